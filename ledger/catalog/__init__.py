"""The organization model catalog and the deployment settings, and the model resolution rules.

Pure core: ``values`` (Structs), ``events``, ``state``, ``decide``, ``evolve``, ``resolve`` (which model a
chat uses, at a command and at generation time) and ``views`` (the ``models`` read shape); ``aggregate``
is the eventsourcing adapter. Streams: one ``OrganizationCatalog`` per organization (stream id = the
organization id), the ``Deployment`` singleton (``DEPLOYMENT_ID``) and one ``ModelConfigClaim`` per model
config id (stream id = the model config id: which organization owns it, so an id is never reused and a
foreign config is recognised as foreign).
"""

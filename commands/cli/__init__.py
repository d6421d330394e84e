"""The ``chat-ledger`` command line: an entry point over the service layer (``commands``).

``commands.cli.main`` is the entry point; ``commands.cli.context`` is what every command module shares.
"""

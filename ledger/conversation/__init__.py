"""The Codex-style conversation: boxes, rounds, stages, steering, stall/restart, recovery.

Pure core: ``values`` (Structs), ``events``, ``state``, ``decide``, ``evolve``, ``queries``;
``aggregate`` adapts it to the store. Importing the package registers every topic.
"""

from ledger.conversation import aggregate as aggregate  # noqa: F401  (registers topics)

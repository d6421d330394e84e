"""Tool-call executions: run a tool call at most once per deterministic tool-call id, cancel truthfully.

One stream per tool call (``ToolCallExecution``), id = the deterministic tool-call UUID of docs/chatd.md §5.3
(``identity.execution_id``). Pure core: ``events`` (facts and the saved response), ``state`` (+ ``evolve``),
``decide`` (claim / record response / cancel, given facts the handler read from the chat), ``identity``
(locating the call in its chat); ``aggregate`` adapts it to the store. Importing the package registers
every topic.
"""

from ledger.toolcalls import aggregate as aggregate  # noqa: F401  (registers topics)

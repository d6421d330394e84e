"""Pure policies the worker applies to a chat: the generation decision, retry schedule, tool batches.

Nothing here reads a clock, a store or another stream: every input is a parameter, so the same inputs
always give the same answer and the functions can be table-tested directly.

* ``generation`` — what the worker does next for a running chat (docs/chatd.md §7 ``decideGenerationAction``).
* ``retry`` — the generation retry schedule (docs/chatd.md §8).
* ``tools`` — the exclusive-tool batch rule and the advisor's eligibility and per-turn budget (docs/chatd.md §5.2).
* ``settings`` — the generation settings of a chat from its organization's catalog and the deployment.
"""

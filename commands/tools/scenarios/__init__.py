"""The example scenarios (JSONL commands, each with the refusals it expects), recorded by ``chat-ledger demo``
and shipped with the package; ``examples/scenarios`` in a checkout points here."""

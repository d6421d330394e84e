"""API tokens: who may call the ledger service (``TokenIssued``/``TokenRevoked``, one stream per token).

The aggregate is a pure decider like every other (``decide`` / ``evolve``); the service layer's handler and
the authorization rules are in ``commands.access`` and ``commands.tokens``."""

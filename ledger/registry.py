"""Imports every aggregate and event module, so every stored topic can be decoded wherever the store
is opened (a projection runner or an export must not depend on which commands were imported)."""

import ledger.access.aggregate  # noqa: F401
import ledger.catalog.aggregate  # noqa: F401
import ledger.chat.aggregate  # noqa: F401
import ledger.conversation.aggregate  # noqa: F401
import ledger.evidence.published  # noqa: F401
import ledger.toolcalls.aggregate  # noqa: F401
import ledger.imports  # noqa: F401
import ledger.protection.decide  # noqa: F401

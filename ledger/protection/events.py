"""Data-protection events: one stream per target (a user, a chat or an organization), found through
``ledger.streams.locate`` at ``protection_id(target)``. They hold no personal data: ids, key numbers, times, and
the reasons an admin gives (the record of why a hold or an erasure was made, written about it, not a subject's
content)."""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar, Literal
from uuid import UUID, uuid5

import msgspec

from ledger.base import LedgerCreated, LedgerEvent

PROTECTION_TOPIC = "chat-ledger:protection.Protection"
#: the natural id of a target's protection stream: uuid5 of this namespace and the target's id
PROTECTION_NAMESPACE = UUID("1c5d0f9e-2a6b-5c7d-8e9f-0a1b2c3d4e5f")

TargetKind = Literal["user", "chat", "organization"]


def protection_id(target: UUID) -> UUID:
    return uuid5(PROTECTION_NAMESPACE, str(target))


class KeyId(msgspec.Struct, frozen=True, order=True):
    """A destroyed data key: whose, its number, the stream whose content it sealed (``ledger.subjectkeys``)."""

    subject: UUID
    number: int
    scope: UUID | None = None


class ProtectionEvent(LedgerEvent):
    abstract: ClassVar[bool] = True


class ProtectionStarted(LedgerCreated, ProtectionEvent):
    """The target's protection stream begins (recorded with its first fact)."""

    TOPIC = "chat-ledger:protection.ProtectionStarted"
    target: UUID
    kind: TargetKind


class LegalHoldSet(ProtectionEvent):
    """Erasure and retention of the target's content are refused (``legal_hold``) until the hold is cleared."""

    TOPIC = "chat-ledger:protection.LegalHoldSet"
    reason: str


class LegalHoldCleared(ProtectionEvent):
    TOPIC = "chat-ledger:protection.LegalHoldCleared"
    reason: str


class RetentionPolicySet(ProtectionEvent):
    """The organization's chats' content is erased ``content_days`` days after their last activity (None: kept)."""

    TOPIC = "chat-ledger:protection.RetentionPolicySet"
    content_days: int | None


class ContentErased(ProtectionEvent):
    """Keys were destroyed: the content they sealed reads ``[erased]`` from now on, and the views of ``streams``
    (the chats and conversations whose content that was) are rewritten from their events."""

    abstract: ClassVar[bool] = True
    keys: list[KeyId]
    streams: list[UUID]
    at: datetime


class SubjectErased(ContentErased):
    """A user's content erased on request (``erase_subject``): every chat's, or only ``organization_id``'s."""

    TOPIC = "chat-ledger:protection.SubjectErased"
    reason: str
    organization_id: UUID | None = None


class ContentExpired(ContentErased):
    """A chat's content erased by its organization's retention policy: no activity since ``last_activity``,
    older than ``content_days`` days at ``at``."""

    TOPIC = "chat-ledger:protection.ContentExpired"
    organization_id: UUID
    content_days: int
    last_activity: datetime


ERASURE_TOPICS = (SubjectErased.TOPIC, ContentExpired.TOPIC)

# -- people's data in these events (issue 28, point 1: ``ledger.privacy``): none.
PERSONAL: dict[type, dict[str, str]] = {}
_WHY = "why an admin set or cleared it: the record of the decision, kept (written about the hold, not content)"
NOT_PERSONAL: dict[type, dict[str, str]] = {
    LegalHoldSet: {"reason": _WHY},
    LegalHoldCleared: {"reason": _WHY},
    SubjectErased: {"reason": "why the erasure was made (the request's basis): the record of it, kept"},
}

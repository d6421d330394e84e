"""Who may do what through the ledger service: the authorization rules and where they are applied.

``may(principal, action, resource)`` is the rule, a pure function: None when allowed, else the refusal's
stable code (``REFUSALS``). Everything else here maps a command or a read to the resource it touches and
asks ``may``:

* a member acts on the chats they own in their organization and reads those, and reads the organization's
  models (their own overrides too, and may set those);
* an admin manages the organization's catalog and may act on and read every chat of it;
* an auditor reads everything of the organization and writes nothing;
* deployment settings, conversations (which belong to no organization) and tokens need a deployment admin.

A token names at most one organization, so every read is scoped to it: lists, views, the event log and its
stream, timelines. The command's ``actor`` is the token's user, and so are ``created_by`` (a sent or edited
message, a completed tool call) and ``owner_id`` (a created chat): a command that claims someone else is
refused (``actor_mismatch``). The CLI never comes here: it is the local administrator's tool (whoever holds
the database), as documented in docs/server.md.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Literal
from uuid import UUID

import msgspec

from commands.base import Command
from commands.catalog import SetDeploymentSettings, SetUserModelOverride
from commands.chat import CreateChat
from commands.protection import SetLegalHold, is_organization
from ledger.access.state import TokenState
from ledger.errors import LedgerError

Action = Literal["read", "write"]
Kind = Literal["chat", "catalog", "deployment"]

#: code -> HTTP status and meaning (docs/server.md lists them)
REFUSALS: dict[str, tuple[int, str]] = {
    "missing_token": (401, "no `Authorization: Bearer <token>` header"),
    "invalid_token": (401, "the token is not one this ledger issued"),
    "token_revoked": (401, "the token was revoked"),
    "session_ended": (401, "the web session was ended (logged out): sign in again"),
    "session_expired": (401, "the web session is past its absolute or idle end: sign in again"),
    "token_expired": (401, "the token expired (tokens create --expires-in; a new token is needed)"),
    # (also the ledger's refusal of a chat for a non-member: "You are not a member of the specified organization.")
    "not_organization_member": (403, "the token's user is no longer a member of the organization it was issued "
                                     "for (a re-added member needs a new token)"),
    "not_in_organization": (403, "the resource belongs to an organization the token has no role in"),
    "not_chat_owner": (403, "a member acts on and reads only the chats they own"),
    "admin_required": (403, "managing the organization's catalog needs its admin role"),
    "read_only_role": (403, "an auditor reads and writes nothing"),
    "deployment_admin_required": (403, "deployment settings, conversations and tokens need a deployment admin"),
    "actor_mismatch": (403, "the command names another user as its actor, creator or owner"),
    "rate_limited": (429, "the token is over a limit of this server (serve --write-rate, --streams-per-token); "
                          "try again after Retry-After seconds"),
}


class Principal(msgspec.Struct, frozen=True):
    """Who a request acts as: the token's user, its organization and role there, deployment admin or not."""

    user: UUID
    org: UUID | None = None
    role: str | None = None
    deployment_admin: bool = False
    token_id: UUID | None = None

    @classmethod
    def of(cls, token: TokenState) -> Principal:
        return cls(token.user, token.org, token.role, token.deployment_admin, token.token_id)


class Resource(msgspec.Struct, frozen=True):
    """What an action touches: a chat (its organization, owner and root chat), an organization's catalog
    (``owner``: the user whose overrides are read or set, if any), or the deployment."""

    kind: Kind
    org: UUID | None = None
    owner: UUID | None = None
    #: a chat's root chat (itself for a root): its sharing decides a member's read (``Scopes.may_read``)
    root: UUID | None = None


DEPLOYMENT = Resource("deployment")


def may(p: Principal, action: Action, r: Resource) -> str | None:
    """None when ``p`` may do ``action`` on ``r``, else the code of the refusal (module docstring)."""
    if r.kind == "deployment":
        return None if p.deployment_admin else "deployment_admin_required"
    if p.org is None or r.org != p.org:
        return "not_in_organization"
    if action == "write" and p.role == "auditor":
        return "read_only_role"
    if p.role in ("admin", "auditor"):
        return None
    # a member
    if r.kind == "chat":
        return None if r.owner == p.user else "not_chat_owner"
    if r.owner is not None:  # a user's own overrides
        return None if r.owner == p.user else "admin_required"
    return None if action == "read" else "admin_required"


def refusal(code: str) -> LedgerError:
    return LedgerError(code, REFUSALS[code][1])


def check(p: Principal, action: Action, r: Resource) -> None:
    code = may(p, action, r)
    if code is not None:
        raise refusal(code)


# -- streams' scopes -----------------------------------------------------------------------------------------

class Scopes:
    """stream id -> the ``Resource`` it belongs to, and for a tool-call execution stream the chat it belongs
    to, from the stream's first event (which never changes, so the answer is kept: a bounded LRU per
    process). A stream with no event yet has none (None)."""

    def __init__(self, app: Any, maxsize: int = 100_000) -> None:
        self.app = app
        self.maxsize = maxsize
        self._known: OrderedDict[UUID, tuple[Resource, UUID | None]] = OrderedDict()
        self._lock = threading.Lock()

    def of(self, stream_id: UUID, first_event: Any = None) -> Resource | None:
        """The stream's resource; ``first_event``: its first event, when at hand (not read again)."""
        known = self.entry(stream_id, first_event)
        return known[0] if known is not None else None

    def chat_of(self, stream_id: UUID, first_event: Any = None) -> UUID | None:
        """The chat a tool-call execution stream belongs to; None for any other stream."""
        known = self.entry(stream_id, first_event)
        return known[1] if known is not None else None

    def entry(self, stream_id: UUID, first_event: Any = None) -> tuple[Resource, UUID | None] | None:
        """Both at once (``of``, ``chat_of``): one look in the LRU."""
        with self._lock:
            found = self._known.get(stream_id)
            if found is not None:
                self._known.move_to_end(stream_id)
                return found
        if first_event is None:
            first = self.app.stream(stream_id, lte=1)
            if not first:
                return None
            first_event = first[0]
        from ledger.toolcalls import events as tc

        chat = first_event.chat_id if isinstance(first_event, tc.ToolCallExecutionOpened) else None
        found = (self.of_first_event(first_event), chat)
        with self._lock:
            self._known[stream_id] = found
            if len(self._known) > self.maxsize:
                self._known.popitem(last=False)
        return found

    def of_first_event(self, event: Any) -> Resource:
        from ledger.catalog import events as cat
        from ledger.chat import events as chat
        from ledger.toolcalls import events as tc

        if isinstance(event, chat.ChatCreated):
            return Resource("chat", event.organization_id, event.owner_id, event.root_chat_id)
        if isinstance(event, (cat.CatalogStarted, cat.ModelConfigClaimed)):
            return Resource("catalog", event.organization_id)
        if isinstance(event, tc.ToolCallExecutionOpened):
            return self.of(event.chat_id) or Resource("chat")
        return DEPLOYMENT  # the deployment, conversations, tokens

    def shared(self, root_chat_id: UUID) -> bool:
        """Whether the root chat is shared now (read through the application's cache, which catches up with
        the store on every read: an unshare is seen by the next request, in every process)."""
        root = self.app.load_cached(root_chat_id, copy=False)  # (a root chat's stream: a chat, or none yet)
        return root is not None and root.state.shared

    def may_read(self, p: Principal, r: Resource) -> str | None:
        """``may(p, "read", r)``, and a chat a member does not own is readable when its root chat is shared
        (``share_chat``: read-only, inherited by the root's children); writes never are."""
        code = may(p, "read", r)
        if code == "not_chat_owner" and r.root is not None and self.shared(r.root):
            return None
        return code

    def check_read(self, p: Principal, r: Resource) -> Resource:
        code = self.may_read(p, r)
        if code is not None:
            raise refusal(code)
        return r

    def chat(self, chat_id: UUID) -> Resource:
        """A chat's resource (``chat_not_found`` when the stream is not a chat)."""
        found = self.of(chat_id)
        if found is None or found.kind != "chat":
            raise LedgerError("chat_not_found", "chat not found")
        return found


# -- commands --------------------------------------------------------------------------------------------------

#: Every UUID field of every command, by its name (nested ones too: ``message.created_by``,
#: ``commit_step.messages[].created_by``, ...), and the rule it is under. One table, enforced here
#: (``as_caller``, ``authorize``), written out in docs/server.md; ``tests/service/test_access_rules.py`` walks
#: every command Struct and fails on a UUID field this table does not name.
#:
#: * ``caller``: a user who acts or writes — the token's user, or refused ``actor_mismatch``. At the top of a
#:   command a missing one is set to the caller; inside a message a missing one stays missing (a message the
#:   model or a tool wrote has no human author), and one that names someone else is refused.
#: * ``subject``: a user an action is about (a member added or removed, whose model override is set) — the
#:   resource rule decides (the organization's admin; a member for their own override).
#: * ``resource``: the stream the command writes (its chat, organization or conversation) — ``may``.
#: * ``parent``: another chat the command writes on (a child is recorded on its parent) — the caller must be
#:   allowed to write that chat too (a member: a chat they own; an admin: any chat of their organization).
#: * ``reference``: an id inside the resource's own world (a model config of the organization's catalog, a
#:   turn of the chat, a structured-output request of the chat) — the handler refuses one that is not there; it names no user and no other stream.
#: * ``worker``: a worker's or runner's own id (not a user): whoever may write the chat may name them.
#: * ``external``: an id of the system the chat runs in (Coder's workspace, build, agent), recorded as given:
#:   it names no user and no stream of the ledger, so whoever may write the chat may set it.
#: * ``held``: what a legal hold is set on — a chat (its organization's admin), an organization (its admin) or
#:   else a user (a deployment admin: a held user's content is kept in every organization).
#:
#: People's data (``commands.protection``): ``erase_subject`` with ``organization_id`` is that organization's
#: admin's (it erases the user's content in its chats only), without it a deployment admin's (every chat and
#: conversation); ``set_retention_policy`` is the organization's admin's.
FIELD_RULES: dict[str, str] = {
    "actor": "caller", "created_by": "caller", "owner_id": "caller",
    "user_id": "subject",
    "chat_id": "resource", "organization_id": "resource", "conversation_id": "resource",
    "parent_chat_id": "parent",
    "model_config_id": "reference", "requested_model_config_id": "reference", "turn_id": "reference",
    "request_id": "reference",
    "worker_id": "worker", "runner_id": "worker",
    "workspace_id": "external", "build_id": "external", "agent_id": "external", "workspace_agent_id": "external",
    "target": "held",
}
_CALLER_FIELDS = tuple(name for name, rule in FIELD_RULES.items() if rule == "caller")


def _nested_callers(value: Any) -> Any:
    """Every (struct, field) with a ``caller`` field inside ``value`` (messages, their lists), depth first."""
    if isinstance(value, msgspec.Struct):
        for name in value.__struct_fields__:
            v = getattr(value, name)
            if name in _CALLER_FIELDS:
                yield value, name
            elif isinstance(v, (msgspec.Struct, list, tuple)):
                yield from _nested_callers(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _nested_callers(v)


def as_caller(p: Principal, cmd: Command) -> Command:
    """The command with the caller's user as ``actor`` (and ``created_by`` where it has one); one that names
    someone else in a ``caller`` field (``FIELD_RULES``) anywhere in it — a new chat's ``owner_id``, a nested
    message's ``created_by`` — is ``actor_mismatch``."""
    changes: dict[str, Any] = {}
    for name in _CALLER_FIELDS:
        if name not in cmd.__struct_fields__:
            continue
        value = getattr(cmd, name)
        if value is None:
            changes[name] = p.user
        elif value != p.user:
            raise refusal("actor_mismatch")
    for name in cmd.__struct_fields__:
        if name not in _CALLER_FIELDS:
            for inner, field in _nested_callers(getattr(cmd, name)):
                author = getattr(inner, field)
                if author is not None and author != p.user:
                    raise refusal("actor_mismatch")
    return msgspec.structs.replace(cmd, **changes) if changes else cmd


def command_resource(scopes: Scopes, cmd: Command) -> Resource | None:
    """What a command writes to (None: a chat that does not exist; the handler refuses it)."""
    if type(cmd).__module__ == "commands.conversation" or isinstance(cmd, SetDeploymentSettings):
        return DEPLOYMENT
    if isinstance(cmd, SetLegalHold):
        return hold_resource(scopes, cmd.target)
    if isinstance(cmd, CreateChat):
        return Resource("chat", cmd.organization_id, cmd.owner_id)
    if isinstance(cmd, SetUserModelOverride):
        return Resource("catalog", cmd.organization_id, cmd.user_id)
    org = getattr(cmd, "organization_id", None)
    if org is not None:
        return Resource("catalog", org)
    chat_id = getattr(cmd, "chat_id", None)
    if chat_id is not None:
        found = scopes.of(chat_id)
        return found if found is None or found.kind == "chat" else Resource("chat")
    return DEPLOYMENT  # pragma: no cover - every command names one of the above


def hold_resource(scopes: Scopes, target: UUID) -> Resource:
    """A legal hold's resource, written with the admin's role: a chat's organization's catalog, an organization's,
    else (a user) the deployment."""
    found = scopes.of(target)
    if found is not None and found.kind == "chat":
        return Resource("catalog", found.org)
    if is_organization(scopes.app, target):
        return Resource("catalog", target)
    return DEPLOYMENT


def authorize(p: Principal, scopes: Scopes, cmd: Command) -> Command:
    """The command to run for ``p`` (``as_caller``), or the refusal of it: the stream it writes, and any other
    chat it writes on (a child's parent: ``FIELD_RULES``), must be ``p``'s to write."""
    cmd = as_caller(p, cmd)
    resource = command_resource(scopes, cmd)
    if resource is not None:
        check(p, "write", resource)
    parent = getattr(cmd, "parent_chat_id", None)
    if parent is not None:
        found = scopes.of(parent)
        if found is not None and found.kind == "chat":  # (not a chat: the handler refuses it, recording nothing)
            check(p, "write", found)
    return cmd


# -- reads -----------------------------------------------------------------------------------------------------

def chats_filter(p: Principal, org: UUID | None, shared: bool = False) -> dict[str, Any]:
    """The chat_status filter a listing of ``p`` gets: its organization (``org``, if given, must be it), and
    for a member its own chats only — or, with ``shared``, the organization's shared root chats (every role
    may read those)."""
    org = org or p.org
    check(p, "read", Resource("catalog", org))
    where: dict[str, Any] = {"organization_id": str(org)}
    if shared:
        where.update(shared=True, parent_chat_id=None)
    elif p.role == "member":
        where["owner_id"] = str(p.user)
    return where


def visible(p: Principal, scopes: Scopes, stream_id: UUID) -> bool:
    """Whether ``p`` may read the events of ``stream_id`` (the event log and its stream)."""
    resource = scopes.of(stream_id)
    return resource is not None and scopes.may_read(p, resource) is None

"""``chat-ledger witness``: an independent witness of a ledger service's checkpoints (issue 27, point 5).

Each poll, for each log URL: fetch ``GET /v1/checkpoints/latest``, check the log's signature, check it is
consistent with the latest checkpoint this witness has seen (``ledger.evidence.witness.split_view``, with a
consistency proof from ``GET /v1/proofs/consistency``), then cosign it (``POST
/v1/checkpoints/{size}/cosignatures``) and remember it (the state file, replaced atomically). A split view is
reported and remembered: the witness never cosigns for that log again until a person looks (its state file
says why). Several URLs of one ledger (its servers) are held to one view of it.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from commands.evidence import utc_now
from ledger.evidence.checkpoint import Checkpoint, EvidenceError, check_signature, cosign_checkpoint, key_id
from ledger.evidence.witness import split_view

#: how long one request to a log may take
TIMEOUT = 10.0


class LogUnreachable(Exception):
    """The log did not answer, or answered with an error (not a split view: the witness tries again)."""


class LogRefused(LogUnreachable):
    """The log answered a 4xx: it refuses what was asked (a consistency proof it cannot give is no proof)."""


def http_json(method: str, url: str, token: str, body: Any = None) -> Any:
    """One JSON request to a ledger service with the witness's token (the standard library: a witness is small)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={
        "Authorization": f"Bearer {token}", "Accept": "application/json",
        **({"Content-Type": "application/json"} if data is not None else {})})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:  # noqa: S310 - the log URL given
            return json.loads(response.read())
    except urllib.error.HTTPError as e:
        try:
            error = json.loads(e.read()).get("error", {})
            message = f"{url}: {e.code} {error.get('code')}: {error.get('message')}"
        except (ValueError, AttributeError):
            message = f"{url}: HTTP {e.code}"
        raise (LogRefused if 400 <= e.code < 500 else LogUnreachable)(message) from None
    except (OSError, ValueError) as e:
        raise LogUnreachable(f"{url}: {e}") from None


@dataclass
class WitnessState:
    """What the witness remembers (its state file): the latest checkpoint it saw, and a split view once found."""

    seen: Checkpoint | None = None
    split: dict[str, Any] | None = None

    @classmethod
    def read(cls, path: Path) -> WitnessState:
        if not path.exists():
            return cls()
        try:
            data = json.loads(path.read_text())
            seen = Checkpoint.from_json(data["seen"]) if data.get("seen") else None
            return cls(seen, data.get("split_view"))
        except (OSError, ValueError, KeyError) as e:
            raise EvidenceError(f"cannot read the witness's state {path}: {e}") from e

    def write(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({"seen": self.seen.to_json() if self.seen else None, "split_view": self.split},
                                  indent=1))
        os.replace(tmp, path)  # a crash leaves the old state or the new, never half of one


@dataclass
class Witness:
    logs: list[str]
    log_key: Any  # the log's public key: its checkpoints must be signed with it
    key: Any  # the witness's private key
    token: str
    state_path: Path
    request: Callable[..., Any] = http_json
    state: WitnessState = field(init=False)

    def __post_init__(self) -> None:
        self.state = WitnessState.read(self.state_path)

    def poll(self) -> list[dict[str, Any]]:
        """One round over the logs: a report per log (``cosigned``, ``unchanged``, ``split_view``,
        ``unreachable``)."""
        return [self._poll(url.rstrip("/")) for url in self.logs]

    def _poll(self, url: str) -> dict[str, Any]:
        if self.state.split is not None:
            return {"log": url, "split_view": self.state.split["reason"], "refused": True}
        try:
            document = self.request("GET", f"{url}/v1/checkpoints/latest", self.token)
            shown = Checkpoint.from_json(document)
            check_signature(shown, self.log_key)
        except (LogUnreachable, EvidenceError) as e:
            return {"log": url, "unreachable": str(e)}
        seen = self.state.seen
        try:
            proof = self._proof(url, seen, shown)
        except LogUnreachable as e:
            return {"log": url, "unreachable": str(e)}
        reason = split_view(seen, shown, proof)
        if reason is not None:
            self.state.split = {"reason": reason, "log": url, "seen": seen.to_json() if seen else None,
                                "shown": shown.to_json(), "at": utc_now()}
            self.state.write(self.state_path)
            return {"log": url, "split_view": reason, "refused": True}
        if seen is None or shown.log_size > seen.log_size:
            self.state.seen = shown
            self.state.write(self.state_path)  # remembered before it is cosigned: never cosign what is forgotten
        if any(c.get("witness_key_id") == key_id(self.key.public_key()) for c in document.get("cosignatures", [])):
            return {"log": url, "unchanged": shown.log_size, "root_hash": shown.root_hash}
        cosignature = cosign_checkpoint(self.key, shown, utc_now())
        try:
            self.request("POST", f"{url}/v1/checkpoints/{shown.log_size}/cosignatures", self.token, cosignature)
        except LogUnreachable as e:  # (a newer checkpoint was published meanwhile: cosigned next round)
            return {"log": url, "unreachable": str(e)}
        return {"log": url, "cosigned": shown.log_size, "root_hash": shown.root_hash}

    def _proof(self, url: str, seen: Checkpoint | None, shown: Checkpoint) -> list[bytes] | None:
        """The consistency proof between ``seen`` and ``shown`` (smaller first), from the log; None when none is
        needed."""
        if seen is None or seen.log_size == shown.log_size or 0 in (seen.log_size, shown.log_size):
            return None
        old, new = sorted((seen.log_size, shown.log_size))
        try:
            answer = self.request("GET", f"{url}/v1/proofs/consistency?from={old}&to={new}", self.token)
        except LogRefused:
            return None  # (no proof: judged a split view unless the two are the same checkpoint)
        try:
            return [bytes.fromhex(h) for h in answer["proof"]]
        except (KeyError, TypeError, ValueError):
            return None

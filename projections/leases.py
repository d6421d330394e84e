"""Leases: one writer per projection build at a time (docs/architecture.md).

A lease names a build — ``(projection, build)``, ``build`` being a build's version, or ``REBUILD`` for the
projection's rebuild lease — and is held by one acquisition (a random token) in one thread of one process.
Whoever writes a build holds its lease: catch-up and follow batch by batch, rebuild and prune for their
whole run (a rebuild also holds ``REBUILD``, so a second rebuild of the projection stops at once). Every
write transaction of a build checks the lease inside that transaction (``SqlBackend._check_lease``): a
writer that does not hold it is refused while somebody else does. So exactly one process writes a build at
a time, and a position read under the lease stays true until the lease is released.

* PostgreSQL: a session advisory lock ``(hashtext('<schema>.<projection>'), build)`` on a connection the
  thread keeps while it holds leases, and whose transactions are the holder's writes; a write transaction
  also takes the key with ``pg_try_advisory_xact_lock`` (granted to the holder's own session, or when
  nobody holds it). A holder that dies loses the lock with its connection. Waiters queue in the server's
  lock queue, first come first served.
* SQLite: a row of ``projection_leases`` (owner token, purpose, pid, host, process start, expiry) written
  in a write transaction; each write transaction of the build reads it (the file's write lock makes the
  check and the write one step) and renews the expiry. A holder on this machine is alive while its process
  is (pid and start time) and its expiry is ahead; a holder on another machine (a shared file system)
  while its expiry is ahead. One waiter at a time is recorded and newcomers let it go first, so a rebuild
  is not starved by a follower taking the lease batch after batch.

Each row also describes its holder for ``projections status`` and for the "busy" messages.
"""

from __future__ import annotations

import os
import socket
from datetime import datetime

import msgspec

#: ``build`` of a projection's rebuild lease (builds are numbered from 1).
REBUILD = 0


class LeaseHolder(msgspec.Struct, frozen=True):
    """Who holds a lease: what for, which process on which host, since when."""

    projection: str
    build: int  # a build version, or REBUILD (0)
    purpose: str  # "catch-up" | "follow" | "rebuild" | "prune"
    pid: int
    host: str
    acquired_at: datetime

    def describe(self) -> str:
        since = self.acquired_at.isoformat(timespec="seconds").replace("+00:00", "Z")
        return f"{self.purpose} (pid {self.pid} on {self.host}, since {since})"


def busy_message(projection: str, build: int, holder: LeaseHolder | None, waited: float) -> str:
    who = holder.describe() if holder is not None else "another writer"
    after = f" (waited {waited:g}s)" if waited > 0 else ""
    if build == REBUILD:
        return f"projection {projection} is being rebuilt by {who}{after}: wait for it to finish"
    return f"projection {projection} v{build} is being written by {who}{after}: try again when it is done"


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


#: This machine as lease rows name it: host name, and the boot (a pid means nothing after a reboot).
HOST = socket.gethostname()
MACHINE = f"{HOST}/{_boot_id()}"


def process_start(pid: int) -> str:
    """The start time of process ``pid`` (clock ticks since boot, from /proc), "" when unknown: with the
    pid it names one process, not whichever later reuses the pid."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return ""
    # The command name (field 2) may hold spaces and parentheses: count fields after its last ')'.
    fields = stat[stat.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 else ""


def process_alive(pid: int, start: str) -> bool:
    """Is process ``pid`` (started at ``start``, as ``process_start`` gives it) still running here?"""
    if start:
        return process_start(pid) == start
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # somebody else's process: it exists
        return True
    return True


_me: tuple[int, str] = (0, "")


def this_process() -> tuple[int, str]:
    """(pid, start) of the calling process (computed again in a forked child)."""
    global _me
    pid = os.getpid()
    if _me[0] != pid:
        _me = (pid, process_start(pid))
    return _me

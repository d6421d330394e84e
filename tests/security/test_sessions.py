"""Issue 23, point 5, through a real ``serve``: signing in opens a server-side session of its own (the cookie
holds the session's secret, never the API token's), recorded on the token's stream; a logout must come from
the site's own pages and ends the session everywhere; revoking the token ends its sessions; a session ends at
its absolute end and when idle."""

from __future__ import annotations

import time
from datetime import timedelta
from uuid import UUID

from commands.tokens import start_session
from ledger.store import open_app
from tests.catalog.kit import ALICE
from tests.security.test_tokens_end_everywhere import cli, token_id_of, wait_for
from tests.service.test_ui import COOKIE, signed_in


def refused_with(c, path: str = "/ui/") -> str | None:
    """The code a page answers a session with (its login redirect's ``error``), or None when it is served."""
    r = c.get(path, follow_redirects=False)
    if r.status_code == 303 and r.headers["location"].startswith("/ui/login"):
        return r.headers["location"].split("error=")[1].split("&")[0] if "error=" in r.headers["location"] else "none"
    return None


def test_the_cookie_is_a_session_not_the_token_and_logout_needs_the_sites_own_form(world):
    with signed_in(world, "alice") as c:
        session = c.cookies.get(COOKIE)
        assert session and session != world.secrets["alice"] and "clt_" not in session
        assert refused_with(c, f"/ui/chats/{world.chat_a}") is None
        assert c.get(f"/v1/chats/{world.chat_a}").status_code == 200  # the pages' EventSource reads with it
        for headers in ({}, {"Origin": "https://elsewhere.example"}, {"Sec-Fetch-Site": "cross-site"}):
            r = c.post("/ui/logout", headers=headers)
            assert r.status_code == 403 and "csrf_origin_mismatch" in r.text, headers
        assert refused_with(c) is None  # nothing was ended
        out = c.post("/ui/logout", headers={"Sec-Fetch-Site": "same-origin"})
        assert out.status_code == 303 and not c.cookies.get(COOKIE)
    with world.client(None, cookies={COOKIE: session}) as replay:  # the old cookie, kept by someone
        assert refused_with(replay) == "session_ended"
        assert replay.get(f"/v1/chats/{world.chat_a}").json()["error"]["code"] == "session_ended"
    with world.client("alice") as c:  # the token itself is untouched
        assert c.get("/v1/chats").status_code == 200


def test_revoking_the_token_ends_its_sessions(world, db_url):
    with signed_in(world, "alice") as c:
        assert refused_with(c) is None
        cli(db_url, "tokens", "revoke", token_id_of(db_url, ALICE, "member"))
        wait_for(lambda: refused_with(c) == "token_revoked", "the session ends with its token")


def test_a_session_ends_at_its_absolute_end_and_when_idle(world, db_url):
    token = UUID(token_id_of(db_url, ALICE, "member"))
    app = open_app(db_url)
    try:
        short = start_session(app, token, lifetime=timedelta(seconds=3))
        idle = start_session(app, token, idle=timedelta(seconds=1))
    finally:
        app.close()
    with world.client(None, cookies={COOKIE: short}) as c:
        assert refused_with(c) is None
        wait_for(lambda: refused_with(c) == "session_expired", "the session ends at its absolute end")
    with world.client(None, cookies={COOKIE: idle}) as c:
        assert refused_with(c) is None
        began = time.monotonic()
        wait_for(lambda: time.monotonic() - began > 1.5, "the session goes unused for longer than its idle time")
        assert refused_with(c) == "session_expired"

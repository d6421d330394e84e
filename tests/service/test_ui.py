"""Issue 18 point 3: the web audit pages at ``/ui/`` of a real ``serve`` process — through httpx (pages
for the token's own organization, 403 pages for another's, the login redirect without a token, the
cookie never authorizing a write) and in headless Chromium (log in, open a chat, follow a tool call to
its result and its execution record, watch an event recorded through the API appear on the open page).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from commands.http.ui import _safe_next, ui_link
from ledger.audit.render import static_link
from tests.audit.test_audit_page_browser import CHROMIUM, browser
from tests.catalog.kit import ALICE, M1, ORG, ORG2

COOKIE = "chat_ledger_session"
CSRF_COOKIE = "chat_ledger_csrf"


@contextmanager
def signed_in(world: Any, who: str) -> Iterator[httpx.Client]:
    """A client holding the cookie ``/ui/login`` sets for ``who``'s token (and no Authorization header)."""
    with world.client(None) as c:
        yield login(c, world.secrets[who])


def csrf_of(form: httpx.Response) -> str:
    """The login form's double-submit token (its hidden field; the page set the same value as a cookie)."""
    found = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
    assert found and f"{CSRF_COOKIE}={found.group(1)}" in form.headers["set-cookie"], form.text[:500]
    return found.group(1)


def login(c: httpx.Client, secret: str) -> httpx.Client:
    csrf = csrf_of(c.get("/ui/login"))
    r = c.post("/ui/login", data={"token": secret, "next": "/ui/", "csrf_token": csrf})
    assert r.status_code == 303 and r.headers["location"] == "/ui/", r.text
    cookie = r.headers["set-cookie"]
    assert f"{COOKIE}=" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    return c


def command(world: Any, who: str, **cmd: Any) -> dict[str, Any]:
    """Run a command through the API as ``who`` (it must be accepted); its result."""
    with world.client(who) as c:
        r = c.post("/v1/commands", json=cmd)
        assert r.json()["ok"], r.text
        return r.json()["result"]


def browser_sign_in(page: Any, world: Any, who: str) -> None:
    """Sign a Chromium page in with ``who``'s token, through the login form."""
    page.goto(f"{world.server.base}/ui/login")
    page.fill("input[name=token]", world.secrets[who])
    page.click("button[type=submit]")
    page.wait_for_url("**/ui/**")


@contextmanager
def signed_in_page(sync_playwright: Any, world: Any, who: str, **options: Any) -> Iterator[Any]:
    """A 1280x900 Chromium page signed in as ``who`` (``browser_sign_in``; ``options``: the page's others, as
    ``accept_downloads``); its browser closed after."""
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = b.new_page(viewport={"width": 1280, "height": 900}, **options)
            browser_sign_in(page, world, who)
            yield page
        finally:
            b.close()


def error_code(r: httpx.Response) -> str:
    found = re.search(r'<code id="error-code">([^<]+)</code>', r.text)
    assert found, r.text[:500]
    return found.group(1)


def test_pages_render_for_the_own_organization(world):
    with signed_in(world, "alice") as c:
        home = c.get("/ui/")
        assert home.status_code == 303 and home.headers["location"] == f"/ui/orgs/{ORG}/chats"
        listing = c.get(f"/ui/orgs/{ORG}/chats")
        assert listing.status_code == 200 and "text/html" in listing.headers["content-type"]
        assert world.chat_a in listing.text and world.chat_b not in listing.text  # a member: their own chats
        # search: a message's text (the promoted prompt), not only the title; and a status filter
        assert world.chat_a in c.get(f"/ui/orgs/{ORG}/chats", params={"q": "FLAKY test"}).text
        assert world.chat_a not in c.get(f"/ui/orgs/{ORG}/chats", params={"q": "no such words"}).text
        assert world.chat_a in c.get(f"/ui/orgs/{ORG}/chats", params={"status": "waiting"}).text
        assert world.chat_a not in c.get(f"/ui/orgs/{ORG}/chats", params={"status": "paused"}).text

        page = c.get(f"/ui/chats/{world.chat_a}")
        assert page.status_code == 200
        for said in ("Fix the build", "Execution-state path", "Queued prompts", "Tool calls", "Turns", "Timeline",
                     'id="call-c1"', 'href="#result-c1"', f"/ui/chats/{world.chat_a}/explain?tool_call=c1",
                     f"/ui/chats/{world.chat_a}/explain?queued_message=1", 'src="/ui/static/live.js"', "<b>read</b>",
                     "chain: ok (head "):
            assert said in page.text, said
        turn = re.search(r"/explain\?turn=([0-9a-f-]+)", page.text).group(1)
        for query in ({"tool_call": "c1"}, {"queued_message": 1}, {"turn": turn}):
            explained = c.get(f"/ui/chats/{world.chat_a}/explain", params=query)
            assert explained.status_code == 200 and '<pre id="explain">' in explained.text, query
        assert "was queued at version" in c.get(f"/ui/chats/{world.chat_a}/explain",
                                                params={"queued_message": 1}).text
        assert error_code(c.get(f"/ui/chats/{world.chat_a}/explain")) == "invalid_request"

        models = c.get(f"/ui/orgs/{ORG}/models")
        assert models.status_code == 200 and M1[:8] in models.text and "Your effective models" in models.text
    with signed_in(world, "admin") as c:
        listing = c.get(f"/ui/orgs/{ORG}/chats").text
        assert world.chat_a in listing and world.chat_b in listing  # an admin: every chat of the organization
        assert c.get(f"/ui/chats/{world.chat_b}").status_code == 200


def test_other_organizations_pages_are_403_pages(world):
    with signed_in(world, "carol") as c:
        for path in (f"/ui/chats/{world.chat_a}", f"/ui/chats/{world.chat_a}/explain?tool_call=c1",
                     f"/ui/orgs/{ORG}/chats", f"/ui/orgs/{ORG}/models"):
            r = c.get(path)
            assert r.status_code == 403 and "text/html" in r.headers["content-type"], path
            assert error_code(r) == "not_in_organization", path
            assert "Fix the build" not in r.text
        assert c.get(f"/ui/orgs/{ORG2}/chats").status_code == 200
    with signed_in(world, "bob") as c:  # the same organization, another member's chat
        r = c.get(f"/ui/chats/{world.chat_a}")
        assert r.status_code == 403 and error_code(r) == "not_chat_owner"
        assert error_code(c.get("/ui/chats/00000000-0000-4000-8000-000000000999")) == "chat_not_found"


def test_without_a_token_the_pages_send_to_the_login_form(world):
    with world.client(None) as c:
        for path in ("/ui/", f"/ui/chats/{world.chat_a}", f"/ui/orgs/{ORG}/models"):
            r = c.get(path)
            assert r.status_code == 303, path
            target = urlparse(r.headers["location"])
            assert target.path == "/ui/login" and parse_qs(target.query)["next"] == [path.rstrip("/") or "/"]
        form = c.get("/ui/login", params={"next": f"/ui/chats/{world.chat_a}"})
        assert form.status_code == 200 and 'name="token"' in form.text
        assert f'value="/ui/chats/{world.chat_a}"' in form.text
        assert 'value="/ui/"' in c.get("/ui/login", params={"next": "https://elsewhere.example/"}).text
        wrong = c.post("/ui/login", data={"token": "clt_not-a-token", "next": "/ui/", "csrf_token": csrf_of(form)})
        assert wrong.status_code == 401 and "invalid_token" in wrong.text and COOKIE not in wrong.headers.get(
            "set-cookie", "")
    with world.client(None, cookies={COOKIE: "clt_forged"}) as c:
        r = c.get(f"/ui/chats/{world.chat_a}")
        assert r.status_code == 303 and "error=invalid_token" in r.headers["location"]


def test_the_login_form_refuses_a_post_it_did_not_make(world):
    """Login CSRF: a form posted from elsewhere has no (or another) double-submit token, so it signs no one
    in, even with a valid token's secret; the form's own token does."""
    secret = world.secrets["alice"]
    with world.client(None) as c:
        refusals = [c.post("/ui/login", data={"token": secret, "next": "/ui/"})]  # no cookie, no field
        csrf = csrf_of(c.get("/ui/login"))
        refusals.append(c.post("/ui/login", data={"token": secret, "next": "/ui/"}))  # cookie, no field
        with world.client(None) as other:  # another browser's token (the attacker's page cannot read ours)
            refusals.append(c.post("/ui/login", data={"token": secret, "csrf_token": csrf_of(other.get("/ui/login"))}))
        refusals.append(c.post("/ui/login", data={"token": secret, "csrf_token": csrf[:-1]}))
        for r in refusals:
            assert r.status_code == 403 and "csrf_token_mismatch" in r.text, r.text[:300]
            assert f"{COOKIE}=" not in r.headers.get("set-cookie", "")
        assert c.get("/ui/").status_code == 303  # still signed out
        r = c.post("/ui/login", data={"token": secret, "next": "/ui/", "csrf_token": csrf})
        assert r.status_code == 303 and c.get("/ui/").status_code in (200, 303)
        assert c.cookies.get(COOKIE) and c.cookies.get(COOKIE) != secret  # a session's secret, never the token's
    with world.client(None, cookies={CSRF_COOKIE: "x" * 43}) as c:  # a cookie planted without the form
        r = c.post("/ui/login", data={"token": secret, "csrf_token": "y" * 43})
        assert r.status_code == 403


def test_the_cookie_reads_the_api_but_never_writes(world):
    with signed_in(world, "alice") as c:
        assert c.get(f"/v1/chats/{world.chat_a}").json()["chat_id"] == world.chat_a  # the page's EventSource
        r = c.post("/v1/commands", json={"type": "set_title", "chat_id": world.chat_a, "title": "forged"})
        assert r.status_code == 401 and r.json()["error"]["code"] == "missing_token"
        out = c.post("/ui/logout", headers={"Origin": world.server.base})
        assert out.status_code == 303 and out.headers["location"] == "/ui/login"
        assert c.get("/ui/").status_code == 303 and not c.cookies.get(COOKIE)  # the cookie is gone
    with world.client("admin") as c:
        assert c.get(f"/v1/chats/{world.chat_a}").json()["title"] != "forged"


@given(st.text(alphabet=st.sampled_from("/\\:.@?#%ui ehtps"), max_size=24) | st.none())
def test_after_login_the_form_goes_to_a_ui_page_only(target):
    went = _safe_next(target)
    assert went.startswith("/ui/") and not went.startswith("/ui//")
    assert went == target or went == "/ui/"  # the page asked for, when it is one


@given(st.sampled_from(["event", "message", "call", "result", "execution", "turn", "queued"]),
       st.text(alphabet="abc_-0123456789", min_size=1, max_size=12))
def test_links_on_the_service_stay_on_the_page_or_go_to_a_ui_page(kind, ident):
    assert ui_link(kind, ident) == static_link(kind, ident)  # the same anchors as the static page
    assert ui_link("chat", ident) == f"/ui/chats/{ident}"


# -- in a browser --------------------------------------------------------------------------------------------------

def record_tool_work(world: Any) -> str:
    """A chat of ALICE's with a claimed tool call, its response and its result, through the API."""
    chat_id = command(world, "alice", type="create_chat", organization_id=ORG, owner_id=ALICE, text="Run the tests",
                      title="Browser chat")["chat_id"]
    command(world, "alice", type="commit_step", chat_id=chat_id, messages=[{"role": "assistant", "parts": [
        {"type": "tool-call", "tool_call_id": "call_t", "tool_name": "execute", "args": {"cmd": "make test"}}]}])
    command(world, "alice", type="claim_tool_call", chat_id=chat_id, tool_call_id="call_t", tool_name="execute",
            assistant_message_id=2)
    command(world, "alice", type="commit_step", chat_id=chat_id, messages=[{"role": "tool", "parts": [
        {"type": "tool-result", "tool_call_id": "call_t", "tool_name": "execute", "result": "12 passed"}]}])
    return chat_id


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_the_pages_in_chromium(world, tmp_path):
    sync_playwright = browser()
    chat_id = record_tool_work(world)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = b.new_page(viewport={"width": 1280, "height": 900})
            page.goto(f"{world.server.base}/ui/chats/{chat_id}")
            assert urlparse(page.url).path == "/ui/login"  # no cookie yet
            page.fill("input[name=token]", world.secrets["alice"])
            page.click("button[type=submit]")
            page.wait_for_url(f"**/ui/chats/{chat_id}")
            assert "Browser chat" in page.inner_text("body")
            # the list links to the chat
            page.goto(f"{world.server.base}/ui/")
            page.click(f"a[href='/ui/chats/{chat_id}']")
            page.wait_for_url(f"**/ui/chats/{chat_id}")
            # a tool call's link to its result, and to its execution record
            call = page.locator("#call-call_t")
            call.locator("a", has_text="result").click()
            page.wait_for_url("**#result-call_t")
            assert "12 passed" in page.inner_text("#result-call_t")
            call.locator("a", has_text="execution record").click()
            page.wait_for_url("**#exec-*")
            execution = page.locator(page.url[page.url.index("#"):])
            assert "ToolCallClaimed" in execution.inner_text() and "running" in execution.inner_text()
            page.locator("#live-status", has_text="live").wait_for()
            before = int(page.locator("#page").get_attribute("data-version"))
            page.screenshot(path=str(tmp_path / "ui-chat.png"), full_page=True)
            # an event recorded through the API appears on the open page
            with world.client("alice") as c:
                r = c.post("/v1/commands", json={"type": "commit_step", "chat_id": chat_id, "messages": [
                    {"role": "assistant", "parts": [{"type": "text", "text": "All twelve passed, live."}]}]})
                assert r.json()["ok"], r.text
            page.get_by_text("All twelve passed, live.").wait_for(timeout=30_000)
            assert int(page.locator("#page").get_attribute("data-version")) == before + 1
            with world.client("alice") as c:  # and the chat's title, as it is now
                assert c.post("/v1/commands", json={"type": "set_title", "chat_id": chat_id,
                                                    "title": "Renamed live"}).json()["ok"]
            page.locator(".card b", has_text="Renamed live").wait_for(timeout=30_000)
            # the chat list follows the organization's stream: a chat created through the API appears
            page.goto(f"{world.server.base}/ui/")
            page.locator("#live-status", has_text="live").wait_for()
            with world.client("alice") as c:
                assert c.post("/v1/commands", json={"type": "create_chat", "organization_id": ORG, "owner_id": ALICE,
                                                    "text": "x", "title": "Created while watching"}).json()["ok"]
            page.locator("#chats td", has_text="Created while watching").wait_for(timeout=30_000)
            page.goto(f"{world.server.base}/ui/chats/{chat_id}")
            # and the explain link of the timeline opens the explanation
            page.click(f"a[href='/ui/chats/{chat_id}/explain?tool_call=call_t']", strict=False)
            page.wait_for_url("**/explain?tool_call=call_t")
            assert "call_t" in page.inner_text("#headline") and "call_t" in page.text_content("#explain")
        finally:
            b.close()

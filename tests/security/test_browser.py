"""Issue 23, points 5 and 6, in a real browser (Chromium through Playwright) against a real ``serve``: what the
headers promise is what the browser does. A script put into a page is not run (the Content-Security-Policy);
the page cannot be framed by another site (``frame-ancestors 'none'``); a bidi override recorded in a message is
shown spelled out, and the text reads in the order it was written; the session cookie is not readable by the
page's scripts (HttpOnly), and after logout the pages send to the login form."""

from __future__ import annotations

import pytest

from tests.audit.test_audit_page_browser import CHROMIUM, browser
from tests.catalog.kit import ALICE, ORG
from tests.security.test_authorship_and_streams import post


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_what_the_headers_promise_the_browser_does(world):
    sync_playwright = browser()
    sneaky = "pay account 1234\u202e5678"
    status, made = post(world, "alice", {"type": "create_chat", "organization_id": ORG, "owner_id": ALICE,
                                         "text": sneaky, "title": "Browser probe"})
    assert status == 200, made
    chat = made["result"]["chat_id"]
    base = world.server.base
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = b.new_page()
            violations: list[str] = []
            page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
            page.goto(f"{base}/ui/login?next=/ui/chats/{chat}")
            page.fill("input[name=token]", world.secrets["alice"])
            page.click("button[type=submit]")
            page.wait_for_url(f"**/ui/chats/{chat}")
            # an inline script added to the page is refused by the browser, and says so
            ran = page.evaluate("""() => { const s = document.createElement('script');
                                          s.textContent = 'window.__injected = 1'; document.body.appendChild(s);
                                          return window.__injected === 1; }""")
            assert ran is False
            page.wait_for_function("() => true")  # (lets the console message arrive)
            assert any("script-src" in v for v in violations), violations
            # the cookie is HttpOnly: the page's scripts do not see it
            assert "chat_ledger_session" not in page.evaluate("() => document.cookie")
            # the recorded override is shown as its code point, and nothing on the page holds the character
            body = page.inner_text("body")
            assert "pay account 1234⟨U+202E⟩5678" in body and "\u202e" not in body
            # another site cannot frame the page: the frame stays empty
            framer = b.new_page()
            framer.set_content(f'<iframe id="f" src="{base}/ui/chats/{chat}" width="600" height="400"></iframe>')
            framer.wait_for_load_state("load")
            frame = framer.frame_locator("#f")
            assert frame.locator("body").count() == 0 or "Browser probe" not in framer.frames[-1].content()
            # logout ends the session: the same cookie opens nothing any more
            page.click("form[action='/ui/logout'] button")
            page.goto(f"{base}/ui/chats/{chat}")
            assert "/ui/login" in page.url
        finally:
            b.close()

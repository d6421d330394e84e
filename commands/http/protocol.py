"""The HTTP connection of ``serve``: uvicorn's (httptools) with a header-read timeout.

uvicorn bounds the wait between requests on a kept-alive connection, but not the wait for a request's headers:
a client that opens a connection, or sends half a request line, holds a connection (and a file descriptor) for
ever. ``protocol(header_timeout)`` is uvicorn's protocol that answers ``408`` and closes the connection when a
request's headers have not all arrived ``header_timeout`` seconds after the connection opened or the request's
first byte. A body, and a response (an event stream), are not bounded by it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

#: ``serve --header-timeout``'s default (docs/server.md, "Limits")
HEADER_TIMEOUT = 10.0

_408_BODY = b"request headers not received in time"
_408 = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
        b"content-length: %d\r\n\r\n%s" % (len(_408_BODY), _408_BODY))


class HeaderTimeoutProtocol(HttpToolsProtocol):
    header_timeout: float = HEADER_TIMEOUT
    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout, self._headers_late)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.write(_408)
            self.transport.close()


def protocol(header_timeout: float = HEADER_TIMEOUT) -> type[HeaderTimeoutProtocol]:
    """uvicorn's ``http`` protocol class, with this header timeout."""
    return type("HeaderTimeoutProtocol", (HeaderTimeoutProtocol,), {"header_timeout": header_timeout})

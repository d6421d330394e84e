"""A loopback TCP proxy in front of PostgreSQL that loses the server's reply to ``COMMIT`` on demand.

Real sockets, real server: the proxy answers a client's ``SSLRequest`` (and ``GSSENCRequest``) with ``N``
itself, so the stream stays plain and readable, then passes bytes both ways. The server's side is parsed
as PostgreSQL wire-protocol messages (type byte, int32 length). When armed, the first ``CommandComplete``
whose tag is ``COMMIT`` — sent by the server after it committed — is not forwarded: the proxy closes the
client's socket (and the server's) instead, so the client sees its connection die while waiting for the
reply to a commit that did happen. One drop per arming.

``vanish_on_drop``: after the drop the proxy also stops listening and closes every connection (the
server "vanished": connections are refused) until ``heal()``; ``stop()`` does the same for good.
"""

from __future__ import annotations

import socket
import struct
import threading
from typing import Any

from ledger.database import DatabaseURL

SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
COMMIT_COMPLETE = b"C" + struct.pack("!I", 4 + len(b"COMMIT\x00")) + b"COMMIT\x00"


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("peer closed")
        data += chunk
    return data


class PgProxy:
    def __init__(self, target: tuple[str, int], port: int = 0) -> None:
        self.target = target
        self._lock = threading.Lock()
        self._armed = False
        self.vanish_on_drop = False
        self.drops = 0
        self.connections = 0
        self._pairs: list[tuple[socket.socket, socket.socket | None]] = []
        self._listener: socket.socket | None = None
        self._accepting: threading.Thread | None = None
        self.port = port
        self.listen()

    # -- control ------------------------------------------------------------------------------------------

    def url(self, schema: str, dbname: str = "postgres", user: str = "postgres") -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{dbname}?schema={schema}"

    def through(self, url: str) -> str:
        """``url``'s database, schema and user, reached through this proxy."""
        db = DatabaseURL.parse(url)
        return self.url(db.schema, db.dbname, db.user)

    def arm(self, vanish: bool = False) -> None:
        """Drop the next reply to COMMIT (and, with ``vanish``, refuse every connection after it)."""
        with self._lock:
            self._armed = True
            self.vanish_on_drop = vanish

    def disarm(self) -> bool:
        """Stop waiting for a COMMIT reply to drop; whether one was dropped since ``arm``."""
        with self._lock:
            was_armed, self._armed = self._armed, False
            return not was_armed

    def listen(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._accepting = threading.Thread(target=self._accept, args=(listener,), daemon=True)
        self._accepting.start()

    def vanish(self) -> None:
        """Refuse new connections and cut every open one (the server is gone)."""
        with self._lock:
            listener, self._listener = self._listener, None
        if listener is not None:
            _close(listener)
        if self._accepting is not None and self._accepting is not threading.current_thread():
            self._accepting.join(timeout=5)
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for client, server in pairs:
            _close(client)
            if server is not None:
                _close(server)

    def heal(self) -> None:
        """Listen again, on the same port."""
        with self._lock:
            self._armed = False
            self.vanish_on_drop = False
        if self._listener is None:
            self.listen()

    def stop(self) -> None:
        self.vanish()

    def __enter__(self) -> PgProxy:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- plumbing -----------------------------------------------------------------------------------------

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        server: socket.socket | None = None
        try:
            with self._lock:
                if self._listener is None:  # accepted just before it vanished: refused after all
                    raise ConnectionError("vanished")
                self._pairs.append((client, None))
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no Nagle stalls on small messages
            startup = self._startup(client)
            server = socket.create_connection(self.target)
            server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self.connections += 1
                self._pairs = [(c, server if c is client else s) for c, s in self._pairs]
            server.sendall(startup)
        except (OSError, ConnectionError):
            _close(client)
            if server is not None:
                _close(server)
            return
        threading.Thread(target=self._client_to_server, args=(client, server), daemon=True).start()
        self._server_to_client(client, server)

    @staticmethod
    def _startup(client: socket.socket) -> bytes:
        """The client's startup message, after answering any encryption request with ``N`` (no)."""
        while True:
            length = struct.unpack("!I", _recv_exactly(client, 4))[0]
            body = _recv_exactly(client, length - 4)
            code = struct.unpack("!I", body[:4])[0]
            if code in (SSL_REQUEST, GSSENC_REQUEST):
                client.sendall(b"N")
                continue
            return struct.pack("!I", length) + body

    def _client_to_server(self, client: socket.socket, server: socket.socket) -> None:
        try:
            while True:
                data = client.recv(65536)
                if not data:
                    break
                server.sendall(data)
        except OSError:
            pass
        finally:
            _close(server)
            _close(client)

    def _server_to_client(self, client: socket.socket, server: socket.socket) -> None:
        buffer = b""
        try:
            while True:
                data = server.recv(65536)
                if not data:
                    break
                buffer += data
                out, buffer, drop = self._split(buffer)
                if out:
                    client.sendall(out)
                if drop:
                    self._dropped(client, server)
                    return
        except OSError:
            pass
        finally:
            _close(client)
            _close(server)

    def _split(self, buffer: bytes) -> tuple[bytes, bytes, bool]:
        """(complete messages to forward, the rest, whether to drop the connection at the rest's head)."""
        pos = 0
        while len(buffer) - pos >= 5:
            length = struct.unpack("!I", buffer[pos + 1:pos + 5])[0]
            end = pos + 1 + length
            if len(buffer) < end:
                break
            if buffer[pos:end] == COMMIT_COMPLETE and self._take_arm():
                return buffer[:pos], buffer[pos:], True
            pos = end
        return buffer[:pos], buffer[pos:], False

    def _take_arm(self) -> bool:
        with self._lock:
            if not self._armed:
                return False
            self._armed = False
            self.drops += 1
            return True

    def _dropped(self, client: socket.socket, server: socket.socket) -> None:
        # With vanish_on_drop the listener closes before the client can see its connection die: a client
        # that reconnects at once (to ask whether its commit happened) must find the server gone.
        if self.vanish_on_drop:
            self.vanish()
        _close(client)
        _close(server)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass

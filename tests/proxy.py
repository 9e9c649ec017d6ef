"""A small TCP proxy the tests own, to cut database connections at chosen moments."""

from __future__ import annotations

import socket
import threading


class Proxy:
    """Forwards 127.0.0.1:<port> to ``target``; ``cut()`` drops every open connection,
    ``down()``/``up()`` refuse new ones as a stopped server would; ``stall()``/``flow()``
    hold every byte in both directions and let them go, as a server whose writes
    stall (a cluster's view change) would; ``lose_reply_after(marker)`` holds every
    reply from the statement containing ``marker`` on (``commit``: from the COMMIT
    that follows it on), as a connection lost before that reply would;
    ``drop_commits_after(marker)`` cuts each connection that sent ``marker`` at its next
    COMMIT, which never reaches the server (every try of that transaction alike, or,
    ``then_down``, the one try: the server is then gone)."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.accepting = True
        self.connections: list[socket.socket] = []
        self.lock = threading.Lock()
        self.closed = False
        self.cuts = 0
        self.refused = 0  # connections closed at once while down
        self.flowing = threading.Event()
        self.flowing.set()
        self.replies = threading.Event()  # cleared: server-to-client bytes are held
        self.replies.set()
        self._marker: bytes | None = None
        self._at_commit = False
        self._marked = False
        self._drop_after: tuple[bytes, ...] = ()
        self._down_after_drop = False
        self.dropped = 0  # COMMITs that drop_commits_after kept from the server
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if not self.accepting:
                self.refused += 1
                client.close()
                continue
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.connections += [client, server]
            args = (client, server, True)
            threading.Thread(target=self._pipe, args=args, daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, False), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, asks: bool) -> None:
        marked = False  # this connection sent drop_commits_after's marker
        try:
            while data := source.recv(65536):
                self.flowing.wait()
                if asks:
                    marked = marked or any(m in data for m in self._drop_after)
                    if marked and (b"\x03COMMIT" in data or b"COMMIT\x00" in data):
                        self.dropped += 1
                        self.accepting = self.accepting and not self._down_after_drop
                        break  # the COMMIT goes nowhere; both ends close below
                    self._watch(data)
                else:
                    self.replies.wait()
                sink.sendall(data)
        except OSError:
            pass
        # Both ends go with either direction; closed here, not left to the garbage
        # collector (a ResourceWarning, which the suite treats as an error).
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _watch(self, data: bytes) -> None:
        """Client to server: the gate closes before the statement whose reply is lost
        reaches the server."""
        if self._marker is None:
            return
        if self._marker in data:
            self._marked = True
            if not self._at_commit:
                self._hold_replies()
        elif self._marked and b"COMMIT" in data.upper():
            self._hold_replies()

    def _hold_replies(self) -> None:
        self.replies.clear()
        self._marker = None

    def lose_reply_after(self, marker: bytes, commit: bool) -> None:
        self._marked = False
        self._at_commit = commit
        self._marker = marker

    def drop_commits_after(self, *marker: bytes, then_down: bool = False) -> None:
        """Any of ``marker`` (the forms a value may travel in: MySQL's text, the hex of
        PostgreSQL's bytea) marks a connection; its next COMMIT (MySQL's COM_QUERY,
        PostgreSQL's simple query) is not forwarded and the connection is cut;
        ``then_down``: and no new connection gets through (as ``down()``)."""
        self._drop_after = marker
        self._down_after_drop = then_down

    def cut(self) -> None:
        with self.lock:
            self.cuts += 1
            for s in self.connections:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
            self.connections = []
        self.replies.set()  # a held reply now goes to a closed socket: lost

    def down(self) -> None:
        self.accepting = False
        self.cut()

    def up(self) -> None:
        self.accepting = True

    def stall(self) -> None:
        self.flowing.clear()

    def flow(self) -> None:
        self.flowing.set()

    def close(self) -> None:
        self.flowing.set()
        self.closed = True
        self.listener.close()
        self.cut()

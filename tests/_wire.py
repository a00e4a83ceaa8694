"""What is on the wire, read without the test's event loop."""

from __future__ import annotations

import select
import socket
import time


class BlockingSubscriber:
    """A raw subscriber on a blocking socket: it reads while the test's event
    loop is held, so it sees only what was written to the socket at once."""

    def __init__(self, url: str, subject: str) -> None:
        host, port = url.removeprefix("nats://").rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=5)
        self.buffer = b""
        assert self._line(5.0).startswith(b"INFO")
        self.sock.sendall(f"CONNECT {{}}\r\nSUB {subject} 1\r\nPING\r\n".encode())
        while (line := self._line(5.0)) != b"PONG":
            assert not line.startswith(b"-ERR"), line

    def next_body(self, timeout: float = 5.0) -> bytes | None:
        """The next message's body; None when none comes within ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._line(deadline - time.monotonic())
            except TimeoutError:
                return None
            if line.startswith(b"MSG"):
                size = int(line.split()[-1])
                while len(self.buffer) < size + 2:
                    self._fill(deadline - time.monotonic())
                body, self.buffer = self.buffer[:size], self.buffer[size + 2 :]
                return body
            if line == b"PING":
                self.sock.sendall(b"PONG\r\n")

    def _line(self, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        while b"\r\n" not in self.buffer:
            self._fill(deadline - time.monotonic())
        line, self.buffer = self.buffer.split(b"\r\n", 1)
        return line

    def _fill(self, timeout: float) -> None:
        if timeout <= 0 or not select.select([self.sock], [], [], timeout)[0]:
            raise TimeoutError
        data = self.sock.recv(65536)
        assert data, "the connection closed"
        self.buffer += data

    def close(self) -> None:
        self.sock.close()

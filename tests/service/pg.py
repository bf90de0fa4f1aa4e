"""PostgreSQL for the store tests: a fresh database per test on the server named by
TRAINPLAN_TEST_POSTGRES_URL (.ci/run installs, starts and exports it), and a TCP proxy
that can take that server away and bring it back (the "database down" tests).

Without the variable the tests skip, except in CI (CI=true), where they fail."""
from __future__ import annotations

import os
import socket
import threading
import uuid

import pytest

ENV = "TRAINPLAN_TEST_POSTGRES_URL"


def server_url() -> str:
    url = os.environ.get(ENV)
    if not url:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{ENV} is not set in CI: .ci/run must start PostgreSQL")
        pytest.skip(f"{ENV} not set (no PostgreSQL here)")
    return url


class FreshDatabase:
    """CREATE DATABASE on enter, DROP on exit; `.url` points at it."""

    def __init__(self, base_url: str) -> None:
        from sqlalchemy import create_engine
        from sqlalchemy.engine import make_url

        self.name = f"trainplan_t_{uuid.uuid4().hex[:12]}"
        self._base = make_url(base_url)
        self.url = self._base.set(database=self.name).render_as_string(hide_password=False)
        self._admin = create_engine(self._base, isolation_level="AUTOCOMMIT")

    def __enter__(self) -> FreshDatabase:
        from sqlalchemy import text

        with self._admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{self.name}"'))
        return self

    def __exit__(self, *exc) -> None:
        from sqlalchemy import text

        with self._admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)'))
        self._admin.dispose()


class Proxy:
    """A loopback TCP proxy to (host, port); stop() drops every connection and refuses new
    ones until start() listens again on the same port."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self._listener: socket.socket | None = None
        self._open: list[socket.socket] = []

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self._open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def stop(self) -> None:
        if self._listener is not None:
            try:  # wakes the accept() of the thread (a bare close() would not, on Linux)
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._listener.close()
            self._listener = None
        for s in self._open:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass
        self._open.clear()

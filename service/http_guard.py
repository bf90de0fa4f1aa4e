"""A request-head deadline for uvicorn (slowloris): a connection whose request line and
headers are not all in within `header_timeout_s` gets a 408 and is closed.

uvicorn 0.54 has no such deadline: its only timer is the keep-alive one, armed after a
response and cancelled by any byte received (uvicorn/protocols/http/h11_impl.py,
`data_received` -> `_unset_keepalive_if_required`), so a client that opens a connection and
sends its headers a byte at a time, or nothing at all, holds the connection (and its memory)
for as long as it likes. `h11_max_incomplete_event_size` bounds the head's bytes, not time.

The guard subclasses uvicorn's h11 protocol: the deadline is armed when a connection opens
and whenever it waits for a new request head (h11's client state IDLE: nothing of the next
request parsed yet, or a head only partly in), and cancelled once h11 has the whole head
(client state SEND_BODY or DONE). The body has its own deadline in the app
(service.app.BodySizeLimit, TRAINPLAN_BODY_READ_TIMEOUT_S, 408 too). Similar in kind to
nginx's client_header_timeout (408 and close).
"""
from __future__ import annotations

import asyncio
import json

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


def _timeout_reply(header_timeout_s: float) -> bytes:
    body = json.dumps({"error": {
        "status": 408, "type": "timeout",
        "message": f"request headers not received within {header_timeout_s} s",
        "problems": [{"field": "headers", "reason": f"not received within {header_timeout_s} s"}]}
    }).encode()
    return (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
            b"connection: close\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


class HeadDeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request head (see module docstring)."""

    header_timeout_s: float = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_timer: asyncio.TimerHandle | None = None
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is h11.IDLE:  # the next head has not (all) arrived
            if self._head_timer is None:
                self._arm()
        else:
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if self.conn.our_state is h11.IDLE:  # nothing sent on this cycle: say why
            self.transport.write(_timeout_reply(self.header_timeout_s))
        self.transport.close()


def head_deadline_protocol(header_timeout_s: float) -> type[HeadDeadlineProtocol]:
    """The protocol class to pass as uvicorn's `http=`, with this deadline (seconds)."""
    return type("HeadDeadlineProtocol", (HeadDeadlineProtocol,),
                {"header_timeout_s": header_timeout_s})

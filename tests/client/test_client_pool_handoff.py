"""The stall of issue 25, reproduced: the client's connection pool closed a connection under a request
it had just handed it to, and that request then waited for its whole read timeout although the server
had answered.

httpcore 1.0.9 (the pool under ``httpx.Client``, which the sync ``Agent``'s threads share) closes
idle connections while it holds more than ``max_keepalive_connections`` connections, counting every
connection, not only the idle ones. A connection that turns idle while another thread's pass
assigns requests is handed to a waiting request; the next pass, before that request has started on
it, sees it idle among too many connections and closes it (the close runs after the pool's lock is
released), by which time the request has sent itself on it and waits in ``poll()`` for the answer.
Linux does not wake a ``poll()`` whose descriptor another thread closes, and once a new connection
reuses the descriptor number, the answer that arrives on the old socket is never seen: the thread
waits for its read timeout (600 s; in the learning runs the rollout's 300 s came first) with the
server idle. This test forces that order of events with hooks in the pool, through the toolkit's own
transport, against a server that answers each request when the test says so.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpcore._backends.sync as sync_backend
import pytest
from httpcore._sync import connection_pool, http11

from toolkit.client import Client
from toolkit.client._transport import Op

HELD = 24  # requests in flight: more than httpx's default max_keepalive_connections (20)
WAIT_S = 10.0  # every hook's wait for the next event; a wait that runs out fails the test
LATE = "/late"  # the request that is handed the connection


class Server(ThreadingHTTPServer):
    """Answers ``POST <path>`` with ``{"path": ...}`` once the test releases that path."""

    daemon_threads = True
    # room in the listen backlog for every request at once (socketserver's default is 5): under load,
    # connections past it had their SYN dropped and retried after the client's 3 s connect timeout
    request_queue_size = 64

    def __init__(self, paths: list[str]) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.arrived = {p: threading.Event() for p in paths}
        self.release = {p: threading.Event() for p in paths}

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.server_address[:2]
        return str(host), int(port)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as uvicorn

    def do_POST(self) -> None:
        server: Server = self.server  # type: ignore[assignment]
        self.rfile.read(int(self.headers.get("content-length", 0)))
        server.arrived[self.path].set()
        server.release[self.path].wait(WAIT_S * 3)
        body = b'{"path": "%s"}' % self.path.encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class Hooks:
    """The order of events: the first held request's connection turns idle inside the late request's
    pass (which hands it over), then the first held request's own pass decides which connections to
    close, then the late request starts, then that decision's closes run."""

    def __init__(self, server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
        self.server = server
        self.armed = False
        self.late_ident: int | None = None
        self.late_assigning = threading.Event()
        self.handed_over = threading.Event()
        self.decided = threading.Event()
        self.failures: list[str] = []
        self.idle: Any = None  # the connection the first held request left idle
        self.handed: Any = None  # the connection the late request was handed
        self.spares: list[socket.socket] = []
        pool, request = connection_pool.ConnectionPool, connection_pool.PoolRequest
        self._patch(monkeypatch, http11.HTTP11Connection, "_response_closed", self._response_closed)
        self._patch(monkeypatch, request, "is_queued", self._is_queued)
        self._patch(monkeypatch, request, "wait_for_connection", self._wait_for_connection)
        self._patch(monkeypatch, pool, "_close_connections", self._close_connections)

    @staticmethod
    def _patch(monkeypatch: pytest.MonkeyPatch, cls: type, name: str, hook: Callable[..., Any]) -> None:
        original = getattr(cls, name)
        monkeypatch.setattr(cls, name, lambda self, *a, **kw: hook(original, self, *a, **kw))

    def _wait(self, event: threading.Event, what: str) -> None:
        if not event.wait(WAIT_S):
            self.failures.append(f"no {what} within {WAIT_S} s")

    def _thread(self) -> str:
        return threading.current_thread().name if self.armed else ""

    def _response_closed(self, original: Callable[..., Any], conn: Any) -> None:
        if self._thread() == "held-0" and not self.handed_over.is_set():
            self._wait(self.late_assigning, "pass of the late request")
            original(conn)  # the connection is idle now, within the late request's pass
            self.idle = conn
            self.handed_over.set()
            return
        original(conn)

    def _is_queued(self, original: Callable[..., Any], request: Any) -> bool:
        if self._thread() == "late" and not self.late_assigning.is_set():
            self.late_assigning.set()  # its pass has sorted the connections; it now assigns
            self._wait(self.handed_over, "idle connection")
        return bool(original(request))

    def _wait_for_connection(self, original: Callable[..., Any], request: Any, timeout: Any) -> Any:
        connection = original(request, timeout)
        if self._thread() == "late" and not self.decided.is_set():
            self.handed = connection
            self._wait(self.decided, "decision of the next pass")
        return connection

    def _close_connections(self, original: Callable[..., Any], pool: Any, closing: list[Any]) -> None:
        if self._thread() != "held-0" or self.decided.is_set():
            original(pool, closing)
            return
        self.decided.set()  # the late request may start on the connection now
        if closing:  # the close lands while the late request waits for its answer
            self._wait(self.server.arrived[LATE], "late request at the server")
            self._until_reading()
            original(pool, closing)
            self.spares.append(socket.create_connection(self.server.address))  # reuses the descriptor
            return
        original(pool, closing)

    def _until_reading(self) -> None:
        """Until the late request's thread waits for its answer in the socket backend's read."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            frame = sys._current_frames().get(self.late_ident or 0)
            if frame is not None and frame.f_code is sync_backend.SyncStream.read.__code__:
                return
            time.sleep(0.001)
        self.failures.append("the late request never read its answer")


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server([f"/held/{i}" for i in range(HELD)] + [LATE])
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    for event in srv.release.values():
        event.set()
    srv.shutdown()
    srv.server_close()


def test_a_connection_handed_to_a_waiting_request_is_not_closed_under_it(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    host, port = server.address
    client = Client(f"http://{host}:{port}", "key", deployment="custom", timeout=3.0, max_retries=0)
    hooks = Hooks(server, monkeypatch)
    outcomes: dict[str, Any] = {}

    def post(path: str) -> None:
        try:
            outcomes[path] = client._transport.run(Op("POST", path, lambda body: body, json={}))
        except Exception as exc:
            outcomes[path] = exc

    held = [threading.Thread(target=post, args=(f"/held/{i}",), name=f"held-{i}") for i in range(HELD)]
    for thread in held:
        thread.start()
    for i in range(HELD):
        assert server.arrived[f"/held/{i}"].wait(WAIT_S), outcomes  # HELD connections, all busy
    hooks.armed = True
    server.release["/held/0"].set()
    late = threading.Thread(target=post, args=(LATE,), name="late")
    late.start()
    hooks.late_ident = late.ident
    held[0].join(WAIT_S)
    assert server.arrived[LATE].wait(WAIT_S)
    for event in server.release.values():
        event.set()  # the server answers the late request (and the held ones)
    late.join(WAIT_S)
    for thread in held:
        thread.join(WAIT_S)
    client.close()
    for spare in hooks.spares:
        spare.close()
    assert hooks.handed_over.is_set() and hooks.decided.is_set(), hooks.failures
    assert hooks.handed._connection is hooks.idle  # the late request was handed the idle connection
    assert outcomes[LATE] == {"path": LATE}, (outcomes[LATE], hooks.failures)
    assert all(outcomes[f"/held/{i}"] == {"path": f"/held/{i}"} for i in range(HELD))

"""Client side of connection loss, through a TCP proxy that drops the first connections after the
request was sent: idempotent calls are retried and succeed, other calls fail with a clear error
and are never resent; a dead server is a clear connection error."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

import toolkit as tk
from support.reliability_support import unique
from toolkit.client import APIConnectionError

if TYPE_CHECKING:
    from conftest import LocalServer


class DroppingProxy:
    """Forwards loopback connections to ``target``; the first ``drops`` connections are closed
    right after the request arrives, as a server dying mid-request would."""

    def __init__(self, target: str, drops: int) -> None:
        host, port = target.removeprefix("http://").split(":")
        self.target = (host, int(port))
        self.drops = drops
        self.connections = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            if self.connections <= self.drops:
                conn.recv(65536)
                conn.close()
                continue
            upstream = socket.create_connection(self.target)
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()

    def close(self) -> None:
        self.listener.close()


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        dst.close()


@pytest.fixture
def proxy(server: LocalServer) -> Iterator[DroppingProxy]:
    p = DroppingProxy(server.url, drops=1)
    yield p
    p.close()


def test_idempotent_call_is_retried_after_connection_loss(server: LocalServer, proxy: DroppingProxy) -> None:
    model = server.client().models.create(project="rel", name=unique(), base_model="toolkit/tiny-chat-1m")
    client = tk.Client(proxy.url, server.key, max_retries=2)
    assert client.models.retrieve(model.id).id == model.id
    assert proxy.connections == 2


def test_non_idempotent_call_is_not_resent(server: LocalServer, proxy: DroppingProxy) -> None:
    model = server.client().models.create(project="rel", name=unique(), base_model="toolkit/tiny-chat-1m")
    client = tk.Client(proxy.url, server.key, max_retries=2)
    with pytest.raises(APIConnectionError):
        client.models.log(model.id, split="val", trajectory_groups=[{"trajectories": [{"reward": 1.0}]}])
    assert proxy.connections == 1
    assert server.client().models.trajectories(model.id).data == []


def test_dead_server_is_a_clear_connection_error(fresh_server: LocalServer) -> None:
    client = fresh_server.client(max_retries=1)
    fresh_server.kill()
    with pytest.raises(APIConnectionError):
        client.models.list()


def start_on_port(server: LocalServer, port: int) -> None:
    """Start ``server`` again on ``port``, its port before a kill; while another process holds the
    port (one that bound port 0 meanwhile), try again."""
    server.extra_args = ("--port", str(port))
    deadline = time.monotonic() + 120
    while True:
        try:
            server.start()
            return
        except RuntimeError as exc:
            if "address already in use" not in str(exc).lower() or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_event_polling_resumes_from_its_cursor_across_a_server_kill(tmp_path: Path) -> None:
    """A job handle following its events through a ``kill -9`` and restart on the same port gets
    every event once, in order, and ends with the terminal event the restart wrote."""
    from conftest import LocalServer
    from support.training_helpers import new_model
    from toolkit.tasks import reverse

    (tmp_path / "data").mkdir()
    server = LocalServer(tmp_path / "data").start()  # on a port of the system's choosing (port 0)
    port = httpx.URL(server.url).port
    assert port is not None
    client = server.client()
    try:
        model = new_model(client, "resume")
        data = [reverse.conversation(w) for w in reverse.sample_words(2000, seed=4)]
        job = client.sft_training_jobs.create_from_data(
            model_id=model.id, data=data, config={"batch_size": 1, "learning_rate": 1e-6}
        )
        seen: list[str] = []
        types: list[str] = []
        restart: threading.Thread | None = None
        for event in job.events(poll_interval=0.2):
            seen.append(event.id)
            types.append(event.type)
            if restart is None and types.count("gradient_step") == 2:
                server.kill()
                restart = threading.Thread(target=start_on_port, args=(server, port), daemon=True)
                restart.start()
        assert restart is not None
        restart.join(120)
        assert httpx.URL(server.url).port == port
        all_ids = [e.id for e in client.training_jobs.events.list(job.id, limit=100)]
        assert seen == all_ids and len(set(seen)) == len(seen)
        assert types[0] == "training_started" and types[-1] == "training_failed"
        assert client.training_jobs.retrieve(job.id).status == "failed"
    finally:
        client.close()
        server.stop()

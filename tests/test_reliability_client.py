"""Client side of connection loss, through a TCP proxy that drops the first connections after the
request was sent: idempotent calls are retried and succeed, other calls fail with a clear error
and are never resent; a dead server is a clear connection error."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from reliability_support import unique

import toolkit as tk
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
    assert server.client().models.trajectories(model.id) == []


def test_dead_server_is_a_clear_connection_error(fresh_server: LocalServer) -> None:
    client = fresh_server.client(max_retries=1)
    fresh_server.kill()
    with pytest.raises(APIConnectionError):
        client.models.list()

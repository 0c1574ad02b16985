"""No request waits forever: the server's deadline of a non-streamed request (``--request-timeout``),
a client that goes away during one, and the watchdog that logs and counts a request without progress.

The engine is held still deterministically by its test-only pause file (``TOOLKIT_ENGINE_PAUSE_FILE``:
while it exists the scheduler does nothing), so no check races against decoding speed. That a request
was dropped rather than finished is read from ``/v1/usage``: a request's usage is recorded only when
its answer is complete."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from conftest import LocalServer
from support.chat_helpers import USER

BASE = "toolkit/tiny-chat-1m"  # the default model
LONG = {"messages": USER, "max_tokens": 960, "ignore_eos": True}


class Paused:
    """A server whose engine can be paused through its pause file."""

    def __init__(self, server: LocalServer, pause_file: Path) -> None:
        self.server, self.pause_file = server, pause_file

    def pause(self) -> None:
        self.pause_file.touch()

    def resume(self) -> None:
        self.pause_file.unlink(missing_ok=True)

    def health(self) -> dict[str, Any]:
        with self.server.http() as http:
            body: dict[str, Any] = http.get("/v1/health").json()
        return body

    def engine(self) -> dict[str, Any]:
        model: dict[str, Any] = self.health()["models"][0]
        return model

    def usage(self, project: str) -> int:
        with self.server.http() as http:
            rows = http.get("/v1/usage", params={"project": project}).json()["data"]
        return sum(row["requests"] for row in rows)


def wait_until(what: Callable[[], bool], bound: float = 60.0, message: str = "") -> None:
    deadline = time.monotonic() + bound
    while not what():
        assert time.monotonic() < deadline, message or "condition not reached"
        time.sleep(0.05)


def paused_server(tmp: Path, *args: str) -> Iterator[Paused]:
    pause_file = tmp / "pause"
    os.environ["TOOLKIT_ENGINE_PAUSE_FILE"] = str(pause_file)
    try:
        (tmp / "data").mkdir()
        server = LocalServer(tmp / "data", extra_args=args).start()
    finally:
        del os.environ["TOOLKIT_ENGINE_PAUSE_FILE"]
    try:
        with server.http() as http:  # the base loads on its first request, past its deadline at times
            http.post("/v1/chat/completions", json={"messages": USER, "max_tokens": 1})
            wait_until(
                lambda: any(m["loaded"] for m in http.get("/v1/health").json()["models"] if m["name"] == BASE)
            )
        yield Paused(server, pause_file)
    finally:
        pause_file.unlink(missing_ok=True)
        server.stop()


@pytest.fixture(scope="module")
def deadline_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Paused]:
    yield from paused_server(tmp_path_factory.mktemp("deadline"), "--request-timeout", "1")


@pytest.fixture(scope="module")
def stall_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Paused]:
    args = ("--request-timeout", "0", "--stall-warning-seconds", "1")
    yield from paused_server(tmp_path_factory.mktemp("stall"), *args)


def test_a_waiting_request_past_the_deadline_is_504_and_leaves_the_engine(deadline_server: Paused) -> None:
    project = f"team/{uuid.uuid4().hex[:8]}"
    deadline_server.pause()
    try:
        with deadline_server.server.http() as http:
            r = http.post("/v1/chat/completions", json=LONG, headers={"OpenAI-Project": project})
    finally:
        deadline_server.resume()
    assert r.status_code == 504
    assert r.json() == {
        "error": {
            "message": "The request did not finish within the server's deadline of 1 s.",
            "type": "Gateway Timeout",
            "param": None,
            "code": 504,
        }
    }
    wait_until(lambda: (lambda e: e["running"] + e["waiting"] == 0)(deadline_server.engine()))
    assert deadline_server.usage(project) == 0  # dropped, never generated to its end
    with deadline_server.server.http() as http:
        short = http.post("/v1/chat/completions", json={"messages": USER, "max_tokens": 4})
    assert short.status_code == 200, short.text


def test_a_running_request_past_the_deadline_frees_its_slots(deadline_server: Paused) -> None:
    project = f"team/{uuid.uuid4().hex[:8]}"
    box: dict[str, httpx.Response] = {}

    def send() -> None:
        with deadline_server.server.http() as http:
            box["r"] = http.post(
                "/v1/chat/completions", json={**LONG, "n": 8}, headers={"OpenAI-Project": project}
            )

    thread = threading.Thread(target=send)
    thread.start()
    try:
        # 8 x 960 tokens take far longer than the 1 s deadline: the request is seen decoding
        wait_until(lambda: deadline_server.engine()["running"] == 8, message="never seen running")
        deadline_server.pause()  # decoding holds still with 8 running sequences
        assert deadline_server.engine()["running"] == 8
        thread.join(60)
    finally:
        deadline_server.resume()
    assert box["r"].status_code == 504, box["r"].text
    assert box["r"].json()["error"]["type"] == "Gateway Timeout"
    wait_until(lambda: deadline_server.engine()["running"] == 0)
    assert deadline_server.usage(project) == 0


def test_clients_gone_during_non_streamed_requests_free_their_slots(stall_server: Paused) -> None:
    """4 non-streamed requests of 8 x 960 tokens (32 running sequences) whose clients go away."""
    project = f"team/{uuid.uuid4().hex[:8]}"
    server = stall_server.server

    async def main() -> None:
        clients = [
            httpx.AsyncClient(base_url=server.url, headers={"Authorization": f"Bearer {server.key}"})
            for _ in range(4)
        ]
        body, headers = {**LONG, "n": 8}, {"OpenAI-Project": project}
        tasks = [
            asyncio.create_task(c.post("/v1/chat/completions", json=body, headers=headers)) for c in clients
        ]
        deadline = time.monotonic() + 60
        while (await asyncio.to_thread(stall_server.engine))["running"] < 32:
            assert time.monotonic() < deadline and not any(t.done() for t in tasks)
        stall_server.pause()  # none can finish while their clients leave
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for client in clients:
            await client.aclose()  # the connections are closed

    try:
        asyncio.run(main())
    finally:
        stall_server.resume()
    wait_until(lambda: stall_server.engine()["running"] == 0)
    assert stall_server.usage(project) == 0  # all 4 were dropped, none generated to its end


def test_a_request_without_progress_is_logged_once_and_counted(stall_server: Paused) -> None:
    request_id = f"stall-{uuid.uuid4().hex[:8]}"
    before = stall_server.health()["stalls"]
    log = stall_server.server.data_dir / "server.log"
    box: dict[str, httpx.Response] = {}

    def send() -> None:
        with stall_server.server.http() as http:
            box["r"] = http.post(
                "/v1/chat/completions",
                json={"messages": USER, "max_tokens": 4},
                headers={"X-Request-Id": request_id},
            )

    stall_server.pause()
    thread = threading.Thread(target=send)
    try:
        thread.start()
        wait_until(lambda: stall_server.health()["stalls"] > before, message="no stall counted")
        time.sleep(2.5)  # more checks of the watchdog while it stays stalled: still one warning
        assert stall_server.health()["stalls"] == before + 1
    finally:
        stall_server.resume()
    thread.join(60)
    assert box["r"].status_code == 200, box["r"].text
    warnings = [part for part in log.read_text().split(" WARNING ") if request_id in part]
    assert len(warnings) == 1
    [warning] = warnings
    assert warning.startswith("toolkit.watchdog: stall: 1 chat request(s) without progress")
    assert f"request chatcmpl-{request_id}" in warning or f"request {request_id}" in warning
    assert "waiting" in warning or "inbox" in warning  # where the engine holds it
    assert "events sent 0" in warning
    assert "event loop: answered a probe" in warning
    assert "Thread toolkit-engine" in warning and "Thread toolkit-watchdog" in warning
    assert "in _loop" in warning  # the engine thread's stack

"""Server flags: ``--scheduling-policy priority`` (lower priority values are served first),
``--trust-request-chat-template`` (request templates accepted, still rendered in the sandbox) and
``--base-model PATH`` (a Hugging Face folder, its generation_config.json defaults applied)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conftest import LocalServer
from toolkit.server.engine.model import ensure_builtin

USER = [{"role": "user", "content": "hi"}]
LONG = 32768  # tokens: the blocker below would take tens of seconds to end by itself


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Hugging Face model folder on disk: the built-in model's files, greedy by default, with a
    context long enough for a request that holds the engine's slot for as long as a test needs."""
    spec = ensure_builtin(tmp_path_factory.mktemp("hf"))
    (spec.folder / "generation_config.json").write_text(json.dumps({"temperature": 0.0, "max_new_tokens": 6}))
    config = json.loads((spec.folder / "config.json").read_text())
    (spec.folder / "config.json").write_text(json.dumps({**config, "max_position_embeddings": LONG}))
    return spec.folder


@pytest.fixture(scope="module")
def flagged(tmp_path_factory: pytest.TempPathFactory, folder: Path) -> Iterator[LocalServer]:
    args = ("--trust-request-chat-template", "--scheduling-policy", "priority", "--max-num-seqs", "1")
    args += ("--base-model", str(folder))
    srv = LocalServer(Path(tmp_path_factory.mktemp("flagged")), extra_args=args).start()
    yield srv
    srv.stop()


def test_lower_priority_values_are_served_first(flagged: LocalServer) -> None:
    """A stream holds the only slot until the three requests wait in the engine (health says so),
    then disconnects, which frees the slot; each of them then runs 200 tokens alone, so the order
    their clients get their answers in is the order the engine admitted them (a client's scheduling
    jitter is far below one answer's service time)."""
    finished: list[str] = []
    lock = threading.Lock()

    def run(name: str, priority: int) -> None:
        with flagged.http(timeout=600) as http:  # waits behind the blocker, long on a loaded machine
            r = http.post(
                "/v1/chat/completions",
                json={"messages": USER, "max_tokens": 200, "ignore_eos": True, "priority": priority},
            )
            assert r.status_code == 200, r.text
        with lock:
            finished.append(name)

    workers = [threading.Thread(target=run, args=(f"p{p}", p)) for p in (9, 5, -3)]
    with (
        flagged.http(timeout=600) as http,
        http.stream(
            "POST",
            "/v1/chat/completions",
            json={"messages": USER, "max_tokens": LONG - 100, "ignore_eos": True, "stream": True},
        ) as blocker,
    ):
        lines = blocker.iter_lines()  # kept: closing it would disconnect the blocker now
        next(line for line in lines if line.startswith("data:"))
        deadline = time.monotonic() + 120
        while (state := http.get("/v1/health").json()["models"][0])["running"] < 1:
            assert time.monotonic() < deadline, state  # the snapshot of its admission step
            time.sleep(0.01)
        for w in workers:
            w.start()
        while (state := http.get("/v1/health").json()["models"][0])["waiting"] < 3:
            assert state["running"] == 1, "the blocker ended before the three requests arrived"
            assert time.monotonic() < deadline, state
            time.sleep(0.01)
    for w in workers:
        w.join()
    assert finished == ["p-3", "p5", "p9"]


def test_trusted_request_template_is_rendered_in_the_sandbox(flagged: LocalServer) -> None:
    with flagged.http() as http:
        r = http.post(
            "/v1/chat/completions",
            json={
                "messages": USER,
                "max_tokens": 1,
                "return_token_ids": True,
                "chat_template": "{% for m in messages %}[{{ m.content }}]{% endfor %}",
            },
        )
        assert r.status_code == 200, r.text
        assert r.json()["prompt_token_ids"] == list(b"[hi]")
        escape = http.post(
            "/v1/chat/completions",
            json={"messages": USER, "chat_template": "{{ ''.__class__.__mro__[1].__subclasses__() }}"},
        )
        assert escape.status_code == 400
        assert escape.json()["error"] == {
            "message": "access to attribute '__class__' of 'str' object is unsafe.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }


def test_priority_is_accepted_when_scheduling_by_priority(flagged: LocalServer) -> None:
    r = httpx.post(
        f"{flagged.url}/v1/chat/completions",
        json={"messages": USER, "max_tokens": 1, "priority": -7},
        headers={"Authorization": f"Bearer {flagged.key}"},
    )
    assert r.status_code == 200, r.text


def test_a_model_folder_is_served_with_its_generation_defaults(flagged: LocalServer, folder: Path) -> None:
    with flagged.http() as http:
        assert [m["id"] for m in http.get("/v1/models").json()["data"]] == [folder.name]
        body = {"messages": USER, "model": folder.name, "ignore_eos": True}
        first, second = (http.post("/v1/chat/completions", json=body).json() for _ in range(2))
    assert first["model"] == folder.name and first["usage"]["completion_tokens"] == 6
    assert first["choices"][0]["message"] == second["choices"][0]["message"]  # temperature 0 by default

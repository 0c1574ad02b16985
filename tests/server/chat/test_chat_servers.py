"""Server flags: ``--scheduling-policy priority`` (lower priority values are served first),
``--trust-request-chat-template`` (request templates accepted, still rendered in the sandbox) and
``--base-model PATH`` (a Hugging Face folder, its generation_config.json defaults applied)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from conftest import LocalServer
from toolkit.server.engine.model import ensure_builtin

USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Hugging Face model folder on disk: the built-in model's files, greedy by default."""
    spec = ensure_builtin(tmp_path_factory.mktemp("hf"))
    (spec.folder / "generation_config.json").write_text(json.dumps({"temperature": 0.0, "max_new_tokens": 6}))
    return spec.folder


@pytest.fixture(scope="module")
def flagged(tmp_path_factory: pytest.TempPathFactory, folder: Path) -> Iterator[LocalServer]:
    args = ("--trust-request-chat-template", "--scheduling-policy", "priority", "--max-num-seqs", "1")
    args += ("--base-model", str(folder))
    srv = LocalServer(Path(tmp_path_factory.mktemp("flagged")), extra_args=args).start()
    yield srv
    srv.stop()


def test_lower_priority_values_are_served_first(flagged: LocalServer) -> None:
    finished: list[str] = []
    lock = threading.Lock()

    def run(name: str, priority: int) -> None:
        with flagged.http(timeout=600) as http:  # waits behind the blocker, long on a loaded machine
            r = http.post(
                "/v1/chat/completions",
                json={"messages": USER, "max_tokens": 10, "ignore_eos": True, "priority": priority},
            )
            assert r.status_code == 200, r.text
        with lock:
            finished.append(name)

    with (
        flagged.http(timeout=600) as http,
        http.stream(
            "POST",
            "/v1/chat/completions",
            json={"messages": USER, "max_tokens": 900, "ignore_eos": True, "stream": True},
        ) as blocker,
    ):
        lines = blocker.iter_lines()
        next(line for line in lines if line.startswith("data:"))  # the blocker holds the only slot
        workers = [threading.Thread(target=run, args=(f"p{p}", p)) for p in (9, 5, -3)]
        for w in workers:
            w.start()
            w.join(0.05)  # all three wait behind the blocker (their order of arrival does not matter)
        for _ in lines:
            pass
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

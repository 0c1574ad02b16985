"""``toolkit serve --inference-url``: the local server in front of an external vLLM (a fake of its
API, tests/support/vllm_fake.py) over loopback HTTP. Names are resolved locally and sent under the external
name, answers come back under the caller's name, streams pass through, usage is recorded,
``--lora-modules`` adapters are loaded by name, LoRA checkpoints are loaded after their job (and
again when the server forgot them), errors keep their status and shape, and a dead URL is a 502
naming it."""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.responses import JSONResponse

from conftest import LocalServer
from support.model_folders import write_adapter, write_folder
from support.traces_helpers import new_project, traces_http
from support.training_helpers import served
from support.vllm_fake import KEY, FakeVllm, error, serve_fake_vllm
from toolkit.cli import main
from toolkit.tasks import reverse
from toolkit.types.training import Model

BASE, ALIAS = "tiny-qwen3", "Qwen/Qwen3-0.6B"
MESSAGES = [{"role": "user", "content": "hi"}]
TEXT = "hello from the fake"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeVllm]:
    with serve_fake_vllm(BASE) as fake:
        yield fake


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A small random Qwen3 and a peft adapter on it."""
    root = tmp_path_factory.mktemp("hf")
    write_folder(root / "qwen3", "qwen3")
    write_adapter(root / "qwen3", root / "named", seed=5)
    return {"qwen3": root / "qwen3", "named": root / "named"}


@pytest.fixture(scope="module")
def scaled(
    tmp_path_factory: pytest.TempPathFactory, fake: FakeVllm, folders: dict[str, Path]
) -> Iterator[LocalServer]:
    """A local server of the Qwen3 (two names) and the ``named`` adapter, generating on the fake."""
    args = (
        *("--base-model", f"{folders['qwen3']}={BASE},{ALIAS}"),
        *("--lora-modules", f"named={folders['named']}"),
        *("--inference-url", fake.url, "--inference-api-key", KEY),
    )
    srv = LocalServer(tmp_path_factory.mktemp("scaled"), extra_args=args).start()
    yield srv
    srv.stop()


def sft_model(srv: LocalServer, **settings: Any) -> Model:
    """A model of the Qwen3 base after one SFT job (LoRA, the default there, unless ``settings``)."""
    with srv.client() as client:
        model = client.models.create(
            project="scale-out", name=f"sft-{uuid.uuid4().hex[:8]}", base_model=BASE, **settings
        )
        job = client.sft_training_jobs.create_from_data(
            model_id=model.id, data=[reverse.conversation("cat")] * 4, config={"batch_size": 2}
        )
        assert job.wait(progress=False).step == 1
        return model


@pytest.fixture(scope="module")
def trained(scaled: LocalServer) -> Model:
    return sft_model(scaled)


def post(srv: LocalServer, key: str | None = None, **body: Any) -> httpx.Response:
    with srv.http(key) as http:
        return http.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 4, **body})


def events(srv: LocalServer, **body: Any) -> list[Any]:
    """The data of each SSE event of a streamed request, ``[DONE]`` included."""
    with srv.http() as http:
        r = http.post("/v1/chat/completions", json={"messages": MESSAGES, "stream": True, **body})
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    return [line if line == "[DONE]" else json.loads(line) for line in lines]


def streamed_text(chunks: list[Any]) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks[:-1] if c["choices"])


def test_a_request_goes_out_under_the_base_name_and_comes_back_under_the_callers(
    scaled: LocalServer, fake: FakeVllm
) -> None:
    for sent in (BASE, ALIAS):
        r = post(scaled, model=sent, temperature=0.5)
        assert r.status_code == 200, r.text
        body = r.json()
        assert (body["model"], body["choices"][0]["message"]["content"]) == (sent, TEXT)
        assert body["choices"][0]["served_by"] == "fake"  # the external answer, keys it adds included
        assert fake.chats()[-1] == {
            "model": BASE,
            "messages": MESSAGES,
            "max_tokens": 4,
            "temperature": 0.5,
            "stream": False,
        }
        assert fake.keys[-1] == f"Bearer {KEY}"
    nameless = post(scaled)
    assert nameless.json()["model"] == BASE and fake.chats()[-1]["model"] == BASE
    with scaled.client() as client:  # the typed client reads it as a local answer
        out = client.chat.completions.create(model=ALIAS, messages=MESSAGES, max_tokens=4)
        assert (out.model, out.choices[0].message.content, out.usage.total_tokens) == (ALIAS, TEXT, 11)


def test_a_lora_modules_adapter_is_loaded_from_its_folder_and_sent_under_its_name(
    scaled: LocalServer, fake: FakeVllm, folders: dict[str, Path]
) -> None:
    assert "named" not in fake.adapters  # loaded before its first request, not at start
    for _ in range(2):
        r = post(scaled, model="named")
        assert r.status_code == 200 and r.json()["model"] == "named"
        assert fake.chats()[-1]["model"] == "named"
    loads = [b for b in fake.loads() if b["lora_name"] == "named"]
    assert loads == [{"lora_name": "named", "lora_path": str(folders["named"].resolve())}]


def test_streams_pass_through_with_the_callers_name(scaled: LocalServer, fake: FakeVllm) -> None:
    chunks = events(scaled, model=ALIAS)
    assert chunks[-1] == "[DONE]" and streamed_text(chunks) == TEXT
    assert all(c["model"] == ALIAS for c in chunks[:-1])
    assert all(c["choices"] and "usage" not in c for c in chunks[:-1])  # not asked for: not passed on
    sent = fake.chats()[-1]
    assert (sent["model"], sent["stream"], sent["stream_options"]) == (BASE, True, {"include_usage": True})

    with_usage = events(scaled, model=ALIAS, stream_options={"include_usage": True})
    assert with_usage[-2]["choices"] == [] and with_usage[-2]["usage"]["total_tokens"] == 11
    assert streamed_text(with_usage) == TEXT


def test_usage_is_recorded_per_project_as_for_local_generation(scaled: LocalServer) -> None:
    project = f"team/p-{uuid.uuid4().hex[:8]}"
    with scaled.http() as http:
        headers = {"OpenAI-Project": project}
        body = {"model": ALIAS, "messages": MESSAGES}
        assert http.post("/v1/chat/completions", json=body, headers=headers).status_code == 200
        stream = http.post("/v1/chat/completions", json={**body, "stream": True}, headers=headers)
        assert stream.status_code == 200 and "[DONE]" in stream.text
        (row,) = http.get("/v1/usage", params={"project": project}).json()["data"]
    assert (row["model"], row["requests"], row["prompt_tokens"], row["completion_tokens"]) == (
        ALIAS,
        2,
        14,
        8,
    )


def wait_for(predicate: Any) -> None:
    deadline = time.monotonic() + 30
    while not predicate():
        assert time.monotonic() < deadline, "not within 30 s"
        time.sleep(0.05)


def test_a_lora_checkpoint_is_loaded_after_its_job_and_served_under_its_adapter_name(
    scaled: LocalServer, fake: FakeVllm, trained: Model
) -> None:
    name = f"{trained.id}:step1"
    folder = (scaled.data_dir / "checkpoints" / trained.id / "step1").resolve()
    assert (folder / "adapter_config.json").is_file()
    wait_for(lambda: name in fake.adapters)  # loaded by the job's end, not by a request
    assert [b for b in fake.loads() if b["lora_name"] == name] == [
        {"lora_name": name, "lora_path": str(folder)}
    ]
    before = len(fake.chats())
    for sent in (f"{trained.name}:step1", served(trained, 1), trained.name, f"{trained.name}:latest"):
        r = post(scaled, model=sent)
        assert r.status_code == 200 and r.json()["model"] == sent
        assert fake.chats()[-1]["model"] == name
    chunks = events(scaled, model=served(trained, 1))
    assert streamed_text(chunks) == TEXT and fake.chats()[-1]["model"] == name
    assert len(fake.chats()) == before + 5
    assert [b["lora_name"] for b in fake.loads()].count(name) == 1  # loaded once, not per request

    step0 = post(scaled, model=f"{trained.name}:step0")  # the base's weights: the base's name
    assert step0.status_code == 200 and fake.chats()[-1]["model"] == BASE


def test_an_adapter_the_server_forgot_is_loaded_again(
    scaled: LocalServer, fake: FakeVllm, trained: Model
) -> None:
    name = f"{trained.id}:step1"
    wait_for(lambda: name in fake.adapters)
    for stream in (False, True):
        fake.adapters.clear()  # vLLM restarted: it answers 404 for the adapter
        loads = len(fake.loads())
        if stream:
            assert streamed_text(events(scaled, model=f"{trained.name}:step1")) == TEXT
        else:
            assert (
                post(scaled, model=f"{trained.name}:step1").json()["choices"][0]["message"]["content"] == TEXT
            )
        assert len(fake.loads()) == loads + 1 and name in fake.adapters


def test_after_a_local_restart_an_adapter_already_loaded_counts_as_loaded(
    scaled: LocalServer, fake: FakeVllm, trained: Model
) -> None:
    name = f"{trained.id}:step1"
    wait_for(lambda: name in fake.adapters)
    scaled.restart()
    loads = len(fake.loads())
    for _ in range(2):
        r = post(scaled, model=f"{trained.name}:step1")
        assert r.status_code == 200 and fake.chats()[-1]["model"] == name
    assert len(fake.loads()) == loads + 1  # one try, answered "already been loaded": then known


def test_deleted_checkpoints_and_models_are_unloaded_from_the_server(
    scaled: LocalServer, fake: FakeVllm
) -> None:
    model = sft_model(scaled)
    with scaled.client() as client:
        job = client.sft_training_jobs.create_from_data(
            model_id=model.id, data=[reverse.conversation("dog")] * 2, config={"batch_size": 2}
        )
        assert job.wait(progress=False).step == 2
        step1, step2 = f"{model.id}:step1", f"{model.id}:step2"
        wait_for(lambda: step1 in fake.adapters and step2 in fake.adapters)
        client.models.checkpoints.delete(model.id, [1])
        assert step1 not in fake.adapters and step2 in fake.adapters
        client.models.delete(model.id)
    assert step2 not in fake.adapters


def test_a_full_fine_tuning_checkpoint_is_a_400_naming_the_reason(
    scaled: LocalServer, fake: FakeVllm
) -> None:
    model = sft_model(scaled, full_finetuning=True)
    seen = len(fake.requests)
    r = post(scaled, model=f"{model.name}:step1")
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "model" and err["code"] == 400
    assert "full fine-tuning checkpoint" in err["message"] and fake.url in err["message"]
    assert len(fake.requests) == seen  # nothing sent, nothing loaded
    assert model.id not in " ".join(fake.adapters)


def test_errors_of_the_server_keep_their_status_and_shape(scaled: LocalServer, fake: FakeVllm) -> None:
    fake.fail = error(400, "max_tokens is too large", "BadRequestError", "max_tokens")
    r = post(scaled, model=BASE)
    assert r.status_code == 400
    assert r.json() == {
        "error": {
            "message": "max_tokens is too large",
            "type": "BadRequestError",
            "param": "max_tokens",
            "code": 400,
        }
    }

    flat = {
        "object": "error",
        "message": "overloaded",
        "type": "ServiceUnavailableError",
        "param": None,
        "code": 503,
    }
    fake.fail = JSONResponse(flat, status_code=503)  # the shape of older vLLM releases
    r = post(scaled, model=BASE, stream=True)  # refused before the stream began: a plain error answer
    assert r.status_code == 503
    assert r.json()["error"] == {
        "message": "overloaded",
        "type": "ServiceUnavailableError",
        "param": None,
        "code": 503,
    }

    fake.fail = JSONResponse({"error": "Unauthorized"}, status_code=401)  # our key, not the caller's
    r = post(scaled, model=BASE)
    assert r.status_code == 502 and "refused the key" in r.json()["error"]["message"]

    fake.stream_error = True  # an error after the stream began: an error event, then [DONE]
    chunks = events(scaled, model=BASE)
    assert chunks[-1] == "[DONE]"
    assert chunks[-2]["error"] == {
        "message": "engine died",
        "type": "InternalServerError",
        "param": None,
        "code": 500,
    }


def test_requests_are_checked_locally_before_anything_is_sent(scaled: LocalServer, fake: FakeVllm) -> None:
    seen = len(fake.requests)
    for key in ("", "wrong-key"):
        r = post(scaled, key=key, model=BASE)
        assert r.status_code == 401 and r.json()["error"]["code"] == 401
    unknown = post(scaled, model="no-such-model")
    assert unknown.status_code == 404 and unknown.json()["error"]["message"].startswith(
        "The model `no-such-model` does not exist; served: "
    )
    with scaled.http() as http:
        bad = http.post("/v1/chat/completions", json={"model": BASE})
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "Bad Request"
    assert len(fake.requests) == seen


def test_trace_service_completions_go_to_the_server(scaled: LocalServer, fake: FakeVllm) -> None:
    project = new_project()
    inputs = {"model": ALIAS, "messages": MESSAGES, "max_tokens": 4}
    with traces_http(scaled.url, scaled.key) as tr:
        res = tr.post("/completions/create", json={"project_id": project, "inputs": inputs}).json()
        assert (
            res["response"]["model"] == ALIAS and res["response"]["choices"][0]["message"]["content"] == TEXT
        )
        assert fake.chats()[-1]["model"] == BASE
        call = tr.post("/call/read", json={"project_id": project, "id": res["weave_call_id"]}).json()["call"]
        assert call["summary"]["usage"][ALIAS]["total_tokens"] == 11
        lines = tr.post("/completions/create_stream", json={"project_id": project, "inputs": inputs}).text
    chunks = [json.loads(line) for line in lines.splitlines()][1:]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == TEXT
    assert chunks[-1]["usage"]["total_tokens"] == 11  # the trace service asks for usage, and gets it


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_a_dead_url_is_a_502_naming_it_and_jobs_still_succeed(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    srv = LocalServer(tmp_path / "data", extra_args=("--inference-url", url))
    srv.data_dir.mkdir()
    srv.start()
    try:
        for stream in (False, True):
            r = post(srv, stream=stream)
            assert r.status_code == 502
            err = r.json()["error"]
            assert err["code"] == 502 and f"The inference server at {url} cannot be reached" in err["message"]
        with srv.client() as client:  # the adapter cannot be loaded at the job's end: the job succeeds
            model = client.models.create(
                project="dead", name="lora", base_model="toolkit/tiny-chat-1m", lora_config={"rank": 4}
            )
            job = client.sft_training_jobs.create_from_data(
                model_id=model.id, data=[reverse.conversation("cat")] * 2, config={"batch_size": 2}
            )
            assert job.wait(progress=False).step == 1
        r = post(srv, model="lora:step1")
        assert r.status_code == 502 and url in r.json()["error"]["message"]
    finally:
        srv.stop()


def test_serve_refuses_a_url_that_is_not_http(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--data-dir", str(tmp_path), "--inference-url", "gpu-host:8000"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        "toolkit serve: --inference-url 'gpu-host:8000': expected the server's OpenAI base URL, "
        "http(s)://HOST[:PORT]/v1"
    )

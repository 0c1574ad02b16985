"""Which weights a chat request's ``model`` names: every name of a checkpoint, deleted checkpoints, and
a bare name the user has in several projects (the ``OpenAI-Project`` header chooses, else a 400)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import torch

from conftest import LocalServer
from support.chat_helpers import USER, chat, text
from toolkit.server.engine.model import BUILTIN_NAME, ensure_builtin, load_model, save_weights
from toolkit.server.store.db import Database
from toolkit.server.store.migrations import MIGRATIONS
from toolkit.server.store.models import Models

GREEDY = {"max_tokens": 8, "temperature": 0, "ignore_eos": True}


def new_model(server: LocalServer, http: httpx.Client, project: str, name: str, steps: int) -> dict[str, Any]:
    """A model with checkpoints 1..``steps`` whose weights differ from the base and from each other,
    written the way training writes them (weights folder, then a checkpoint row)."""
    r = http.post("/v1/preview/models", json={"project": project, "name": name, "base_model": BUILTIN_NAME})
    assert r.status_code == 200, r.text
    model_row: dict[str, Any] = r.json()
    db = Database(server.data_dir / "toolkit.db", MIGRATIONS)
    weights = load_model(ensure_builtin(server.data_dir))
    for step in range(1, steps + 1):
        folder = server.data_dir / "checkpoints" / model_row["id"] / f"step{step}"
        folder.mkdir(parents=True)
        with torch.no_grad():
            for p in weights.parameters():
                p.add_(torch.randn_like(p) * 0.5)
        save_weights(weights, folder / "model.safetensors")
        Models(db).add_checkpoint(model_row["id"], step, str(folder), {})
    db.close()
    return model_row


@pytest.fixture(scope="module")
def http_module(server: LocalServer) -> Iterator[httpx.Client]:
    with server.http() as client:
        yield client


@pytest.fixture(scope="module")
def trained(server: LocalServer, http_module: httpx.Client) -> dict[str, Any]:
    """A model with step-1 and step-2 checkpoints, its name in one project only."""
    return new_model(server, http_module, "proj", f"chat-{uuid.uuid4().hex[:8]}", steps=2)


@pytest.fixture(scope="module")
def twins(server: LocalServer, http_module: httpx.Client) -> tuple[dict[str, Any], dict[str, Any]]:
    """One name in two projects: ``alpha`` (step 0 only, the base weights) and ``beta`` (a step 1)."""
    name = f"twin-{uuid.uuid4().hex[:8]}"
    return new_model(server, http_module, "alpha", name, 0), new_model(server, http_module, "beta", name, 1)


def artifact(model: dict[str, Any], suffix: str = "") -> str:
    return f"wandb-artifact:///{model['entity']}/{model['project']}/{model['name']}{suffix}"


def test_every_name_of_a_checkpoint_is_served(http: httpx.Client, trained: dict[str, Any]) -> None:
    name, entity = trained["name"], trained["entity"]
    step1, step2 = chat(http, model=f"{name}:step1", **GREEDY), chat(http, model=f"{name}:step2", **GREEDY)
    assert step1["model"] == f"{name}:step1"
    assert text(chat(http, model=f"wandb-artifact:///{entity}/proj/{name}:step1", **GREEDY)) == text(step1)
    for latest in (name, f"{name}:latest", trained["id"], f"wandb-artifact:///{entity}/proj/{name}"):
        assert text(chat(http, model=latest, **GREEDY)) == text(step2), latest
    base = chat(http, model=f"{name}:step0", **GREEDY)
    assert text(base) == text(chat(http, **GREEDY))
    assert len({text(base), text(step1), text(step2)}) == 3
    served = {m["id"] for m in http.get("/v1/models").json()["data"]}
    assert {name, f"{name}:step0", f"{name}:step1", f"{name}:step2"} <= served


def test_a_unique_name_is_served_whatever_the_project_header(
    http: httpx.Client, trained: dict[str, Any]
) -> None:
    name = trained["name"]
    r = http.post(
        "/v1/chat/completions",
        json={"messages": USER, "model": f"{name}:step2", **GREEDY},
        headers={"OpenAI-Project": "team/elsewhere"},
    )
    assert r.status_code == 200, r.text
    assert text(r.json()) == text(chat(http, model=artifact(trained, ":step2"), **GREEDY))


def test_a_name_in_several_projects_is_a_400_naming_each(
    http: httpx.Client, twins: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    alpha, beta = twins
    name = alpha["name"]
    for suffix in ("", ":step0", ":latest"):
        for stream in (False, True):
            r = http.post(
                "/v1/chat/completions", json={"messages": USER, "model": name + suffix, "stream": stream}
            )
            assert r.status_code == 400, (suffix, stream, r.text)
            assert r.json() == {
                "error": {
                    "message": f"The model name `{name}{suffix}` matches models in several projects: "
                    f"{artifact(alpha, suffix)}, {artifact(beta, suffix)}. Send one of these names, or the "
                    "header `OpenAI-Project: <entity>/<project>` naming the project.",
                    "type": "BadRequestError",
                    "param": "model",
                    "code": 400,
                }
            }
    other_project = http.post(
        "/v1/chat/completions",
        json={"messages": USER, "model": name},
        headers={"OpenAI-Project": f"{alpha['entity']}/gamma"},
    )
    assert other_project.status_code == 400 and artifact(beta) in other_project.json()["error"]["message"]


def test_the_project_header_chooses_among_the_projects(
    server: LocalServer, http: httpx.Client, twins: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    alpha, beta = twins
    name = alpha["name"]

    def within(project: str, model: str = name) -> str:
        r = http.post(
            "/v1/chat/completions",
            json={"messages": USER, "model": model, **GREEDY},
            headers={"OpenAI-Project": project},
        )
        assert r.status_code == 200, (project, r.text)
        return text(r.json())

    base, step1 = text(chat(http, **GREEDY)), text(chat(http, model=artifact(beta, ":step1"), **GREEDY))
    assert base != step1
    assert within(f"{alpha['entity']}/alpha") == text(chat(http, model=artifact(alpha), **GREEDY)) == base
    assert within(f"{beta['entity']}/beta") == step1
    assert within("beta") == step1  # a bare project name (openai's ``OpenAI(project=...)``)
    assert within(f"{beta['entity']}/beta", f"{name}:step0") == base
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key=server.key, max_retries=0) as client:
        with pytest.raises(openai.BadRequestError, match="matches models in several projects"):
            client.chat.completions.create(model=name, messages=USER, max_tokens=1)  # type: ignore[arg-type]
        scoped = client.with_options(default_headers={"OpenAI-Project": f"{beta['entity']}/beta"})
        completion = scoped.chat.completions.create(
            model=name,
            messages=USER,  # type: ignore[arg-type]
            max_tokens=8,
            temperature=0,
            extra_body={"ignore_eos": True},
        )
    assert completion.choices[0].message.content == step1


def test_a_deleted_checkpoint_stops_being_served(http: httpx.Client, trained: dict[str, Any]) -> None:
    name = trained["name"]
    chat(http, model=f"{name}:step1", max_tokens=1)
    r = http.request("DELETE", f"/v1/preview/models/{trained['id']}/checkpoints", json={"steps": [1]})
    assert r.status_code == 200, r.text
    gone = http.post("/v1/chat/completions", json={"messages": USER, "model": f"{name}:step1"})
    assert gone.status_code == 404
    error = gone.json()["error"]
    assert error["message"].startswith(f"The model `{name}:step1` does not exist; served: ")
    assert {**error, "message": ""} == {"message": "", "type": "NotFoundError", "param": "model", "code": 404}


def test_an_unknown_model_is_a_404_listing_what_is_served(server: LocalServer) -> None:
    """As ``POST /v1/preview/models`` answers an unknown base: the served names, in vLLM's 404 shape
    (so the official client raises ``NotFoundError``), with the caller's own models (no one else's)."""
    key = server.new_user_key(f"names-{uuid.uuid4().hex[:8]}")
    bases = "toolkit/tiny-chat-1m, toolkit/tiny-random-1m"
    with server.http(key=key) as http:
        r = http.post("/v1/chat/completions", json={"messages": USER, "model": "nope"})
        assert (r.status_code, r.json()) == (
            404,
            {
                "error": {
                    "message": f"The model `nope` does not exist; served: {bases}.",
                    "type": "NotFoundError",
                    "param": "model",
                    "code": 404,
                }
            },
        )
        made = http.post(
            "/v1/preview/models", json={"project": "p", "name": "mine", "base_model": BUILTIN_NAME}
        )
        assert made.status_code == 200, made.text
        unknown_base = http.post(
            "/v1/preview/models", json={"project": "p", "name": "x", "base_model": "nope"}
        )
        assert unknown_base.json()["detail"][0]["msg"] == f"unknown base model 'nope'; served: {bases}"
        # a built-in model the server does not serve: how to serve it
        smol = "toolkit/smollm2-135m-instruct"
        how = f"`{smol}` is a built-in model: serve it with `toolkit serve --base-model {smol}` (or "
        how += f"tk.connect(base_models=['{smol}']))"
        not_served = http.post("/v1/preview/models", json={"project": "p", "name": "s", "base_model": smol})
        assert not_served.json()["detail"][0]["msg"] == f"unknown base model '{smol}'; served: {bases}; {how}"
        chat = http.post("/v1/chat/completions", json={"messages": USER, "model": smol})
        assert chat.json()["error"]["message"] == (
            f"The model `{smol}` does not exist; served: {bases}, mine (a model's checkpoints as "
            f"<name>:step<N>). {how}."
        )
    official = openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0)
    with official, pytest.raises(openai.NotFoundError) as raised:
        official.chat.completions.create(model="mine:step7", messages=USER)  # type: ignore[arg-type]
    assert raised.value.status_code == 404 and raised.value.body == {
        "message": f"The model `mine:step7` does not exist; served: {bases}, mine"
        " (a model's checkpoints as <name>:step<N>).",
        "type": "NotFoundError",
        "param": "model",
        "code": 404,
    }

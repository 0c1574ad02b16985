"""``tk.connect()``: environment variables, arguments, presets, and the local server it starts or finds."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import toolkit as tk
from toolkit.client.local_server import base_model_names, local_server, running
from toolkit.server.engine.random_models import write_folder

ENV = (
    "TOOLKIT_BASE_URL",
    "TOOLKIT_API_KEY",
    "TOOLKIT_INFERENCE_URL",
    "TOOLKIT_TRACE_URL",
    "TOOLKIT_PROJECT",
    "TOOLKIT_PRESET",
    "TOOLKIT_DATA_DIR",
    "WANDB_API_KEY",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


def urls(client: tk.Client | tk.AsyncClient) -> tuple[str, str | None, str, str, str | None]:
    c = client.config
    return (c.base_url, c.api_key, c.inference_url, c.trace_url, c.project)


def test_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLKIT_BASE_URL", "http://train.example:9000/")
    monkeypatch.setenv("TOOLKIT_API_KEY", "env-key")
    with tk.connect() as client:
        assert urls(client) == (
            "http://train.example:9000",
            "env-key",
            "http://train.example:9000/v1",
            "http://train.example:9000/traces",
            None,
        )
        assert (client.deployment.name, client.deployment.extensions) == ("custom", True)
    monkeypatch.setenv("TOOLKIT_INFERENCE_URL", "http://infer.example/v1/")
    monkeypatch.setenv("TOOLKIT_TRACE_URL", "http://trace.example")
    monkeypatch.setenv("TOOLKIT_PROJECT", "team/project")
    with tk.connect(timeout=5, max_retries=0) as client:
        assert urls(client) == (
            "http://train.example:9000",
            "env-key",
            "http://infer.example/v1",
            "http://trace.example",
            "team/project",
        )
        assert (client.config.timeout, client.config.max_retries) == (5, 0)
    client_async = tk.connect_async()
    assert isinstance(client_async, tk.AsyncClient)
    assert urls(client_async) == (
        "http://train.example:9000",
        "env-key",
        "http://infer.example/v1",
        "http://trace.example",
        "team/project",
    )
    asyncio.run(client_async.close())


def test_arguments_win_over_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLKIT_BASE_URL", "http://env.example")
    monkeypatch.setenv("TOOLKIT_API_KEY", "env-key")
    monkeypatch.setenv("TOOLKIT_PROJECT", "env/project")
    with tk.connect(
        "http://arg.example", "arg-key", inference_url="http://i.example/v1", project="arg/project"
    ) as client:
        assert urls(client) == (
            "http://arg.example",
            "arg-key",
            "http://i.example/v1",
            "http://arg.example/traces",
            "arg/project",
        )


def test_wandb_preset_needs_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="preset 'wandb' needs an API key"):
        tk.connect(preset="wandb")
    monkeypatch.setenv("TOOLKIT_PRESET", "wandb")
    with pytest.raises(ValueError, match="WANDB_API_KEY"):
        tk.connect_async()
    monkeypatch.setenv("WANDB_API_KEY", "wandb-key")
    with tk.connect() as client:
        assert urls(client) == (
            "https://api.training.wandb.ai",
            "wandb-key",
            "https://api.training.wandb.ai/v1",
            "https://trace.wandb.ai",
            None,
        )
        assert (client.deployment.name, client.deployment.extensions) == ("wandb", False)
    monkeypatch.setenv("TOOLKIT_API_KEY", "toolkit-key")
    monkeypatch.setenv("TOOLKIT_TRACE_URL", "http://my-weave.example")
    with tk.connect(project="team/p") as client:
        assert urls(client) == (
            "https://api.training.wandb.ai",
            "toolkit-key",
            "https://api.training.wandb.ai/v1",
            "http://my-weave.example",
            "team/p",
        )


def test_unknown_preset() -> None:
    with pytest.raises(ValueError, match="unknown preset 'nope'; known: local, wandb"):
        tk.connect(preset="nope")


def test_no_server_and_start_false(tmp_path: Path) -> None:
    with pytest.raises(ConnectionError, match="no toolkit server is running"):
        tk.connect(data_dir=tmp_path / "empty", start=False)
    (tmp_path / "stale").mkdir()
    (tmp_path / "stale" / "server.json").write_text(json.dumps({"url": "http://127.0.0.1:9", "pid": 1}))
    with pytest.raises(ConnectionError):
        tk.connect(data_dir=tmp_path / "stale", start=False)


@pytest.fixture
def local_folder(tmp_path: Path) -> Iterator[Path]:
    """A data folder for ``connect()`` to start a server in; that server is stopped afterwards."""
    folder = tmp_path / "toolkit-data"
    yield folder
    info = folder / "server.json"
    if not info.exists():
        return
    pid = int(json.loads(info.read_text())["pid"])  # our child: connect() spawned it
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if os.waitpid(pid, os.WNOHANG)[0]:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def test_connect_starts_and_then_finds_the_local_server(
    local_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with tk.connect(data_dir=local_folder) as first:
        info = json.loads((local_folder / "server.json").read_text())
        key = (local_folder / "local.key").read_text().strip()
        assert urls(first) == (info["url"], key, f"{info['url']}/v1", f"{info['url']}/traces", None)
        assert info["url"].startswith("http://127.0.0.1:")
        assert first.health().status == "ok"
        assert (first.deployment.name, first.deployment.extensions) == ("local", True)
        model = first.models.create(project="p", name="from-connect", base_model="toolkit/tiny-chat-1m")
    assert oct((local_folder / "local.key").stat().st_mode & 0o777) == "0o600"

    with tk.connect(data_dir=local_folder) as second:
        assert second.config.base_url == info["url"]
        assert second.models.retrieve(model.id) == model
    assert json.loads((local_folder / "server.json").read_text())["pid"] == info["pid"]  # no second server

    monkeypatch.setenv("TOOLKIT_DATA_DIR", str(local_folder))
    with tk.connect(start=False) as third:
        assert third.config.base_url == info["url"]
    found = running(local_folder)
    assert found is not None and (found.url, found.pid, found.version) == (
        info["url"],
        info["pid"],
        tk.__version__,
    )

    async def via_async() -> str:
        async with tk.connect_async(data_dir=local_folder) as client:
            return (await client.models.retrieve(model.id)).id

    assert asyncio.run(via_async()) == model.id


def test_base_model_names_are_the_ones_toolkit_serve_gives(tmp_path: Path) -> None:
    (tmp_path / "my-qwen").mkdir()
    assert base_model_names(f"{tmp_path / 'my-qwen'}") == ("my-qwen",)  # a folder: its name
    assert base_model_names(f"{tmp_path / 'my-qwen'}/") == ("my-qwen",)
    assert base_model_names("Qwen/Qwen3-0.6B") == ("Qwen/Qwen3-0.6B",)  # a hub id: itself
    assert base_model_names("Qwen/Qwen3-0.6B=qwen, small") == ("qwen", "small")


def test_connect_starts_a_server_with_base_models_and_checks_the_one_it_finds(
    local_folder: Path, tmp_path: Path
) -> None:
    base = tmp_path / "tiny-llama"
    write_folder(base, "llama")
    with tk.connect(data_dir=local_folder, base_models=[f"{base}=demo/llama,llama"]) as client:
        (served,) = client.health().models or []
        assert (served.name, served.aliases, served.source) == ("demo/llama", ["llama"], str(base))
        assert client.chat.completions.create(model="llama", messages=[{"role": "user", "content": "hi"}])
    with tk.connect(data_dir=local_folder, base_models=[f"{base}=llama"]) as again:  # found, serves it
        assert again.config.base_url == client.config.base_url
    pid = json.loads((local_folder / "server.json").read_text())["pid"]
    message = (
        f"the toolkit server of {local_folder.resolve()} is already running without the base model "
        f"Qwen/Qwen3-0.6B, tiny-llama (it serves demo/llama, llama); stop it (toolkit stop --data-dir "
    )
    with pytest.raises(RuntimeError, match=re.escape(message)):
        tk.connect(data_dir=local_folder, base_models=["Qwen/Qwen3-0.6B", str(base)])
    assert json.loads((local_folder / "server.json").read_text())["pid"] == pid  # left running as it was


def test_a_starting_server_is_waited_for_while_it_writes_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start timeout counts from the server's last output (a first fetch of a built-in model
    writes its progress for a minute or more): a stand-in server that writes for 3 s and then exits
    is reported by its exit, not by a timeout of 1 s."""
    stand_in = tmp_path / "python"
    writes = "for i in $(seq 10); do echo progress $i; sleep 0.3; done"
    stand_in.write_text(f"#!/usr/bin/env bash\n{writes}\necho last words\nexit 7\n")
    stand_in.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(stand_in))
    with pytest.raises(RuntimeError, match="the toolkit server exited with code 7: last words"):
        local_server(tmp_path / "data", timeout=1.0)

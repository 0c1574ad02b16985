"""``toolkit serve`` options that shape the engine, as a user passes them: a ``--config`` file serves
the base and adapters it names, ``--max-lora-memory`` on the command line (winning over the file)
caps the resident adapters (the least recently used idle one leaves), ``--enforce-eager`` is accepted
(health reports no CUDA graphs), and a hub id that is neither cached nor reachable fails in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
import yaml

from conftest import LocalServer
from support.model_folders import write_adapter, write_folder
from toolkit.server.engine.model import from_folder, load_model
from toolkit.server.engine.runner import Runner

RANK = 64  # two adapters of this rank on the small Qwen3 take more than 1 MiB, one less
MIB = 2**20


def chat(http: httpx.Client, model: str) -> int:
    """One answer of one token (it finishes in the engine step that admits it); its prompt tokens."""
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    return int(r.json()["usage"]["prompt_tokens"])


def health(http: httpx.Client) -> dict[str, Any]:
    (base,) = http.get("/v1/health").json()["models"]
    assert base["name"] == "qwen3"
    return cast(dict[str, Any], base)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[httpx.Client, int]]:
    """A server of a config file naming the base and two adapters (and a 4,096 MiB LoRA cap), with
    ``--max-lora-memory 1`` on the command line; and the bytes of one adapter slot of rank 64."""
    tmp_path = tmp_path_factory.mktemp("serve")
    base = tmp_path / "qwen3"
    write_folder(base, "qwen3")
    adapters = {name: tmp_path / name for name in ("a1", "a2")}
    for i, folder in enumerate(adapters.values()):
        write_adapter(base, folder, seed=20 + i, r=RANK)
    stack = Runner(load_model(from_folder(base)), 64, lora_bytes=0).adapters
    assert stack is not None and stack.slot_bytes(RANK) < MIB < 2 * stack.slot_bytes(RANK)
    config = tmp_path / "serve.yaml"
    options = {
        "base-model": [f"{base}=qwen3"],
        "lora-modules": [f"{name}={folder}" for name, folder in adapters.items()],
        "max-lora-memory": 4096,  # the command line's 1 wins
        "max-num-seqs": 4,
        "enforce-eager": True,  # vLLM's option; the CPU always decodes eagerly
    }
    config.write_text(yaml.safe_dump(options))
    (tmp_path / "data").mkdir()
    args = ("--config", str(config), "--max-lora-memory", "1")
    server = LocalServer(tmp_path / "data", extra_args=args).start()
    try:
        with server.http() as http:
            yield http, stack.slot_bytes(RANK)
    finally:
        server.stop()


def test_a_config_file_serves_its_adapters_under_the_command_lines_lora_cap(
    served: tuple[httpx.Client, int],
) -> None:
    """``adapter_bytes`` is the stack: slot 0 (zeros, the base's rows) and the resident adapters'
    slots; under the file's 4,096 MiB both adapters would stay, in a stack of 4 slots."""
    http, slot = served
    names = {card["id"] for card in http.get("/v1/models").json()["data"]}
    assert {"qwen3", "a1", "a2"} <= names
    for model in ("a1", "a2", "a1"):  # each one makes the other, idle, leave: 1 MiB holds one
        chat(http, model)
        state = health(http)
        assert state["loaded"] and state["adapters"] == 1, state
        assert state["adapter_bytes"] == 2 * slot and state["adapter_bytes"] - slot <= MIB, state


def test_enforce_eager_from_a_config_file_is_taken_and_the_cpu_captures_no_graphs(
    served: tuple[httpx.Client, int],
) -> None:
    http, _ = served
    chat(http, "qwen3")
    state = health(http)
    assert state["loaded"] and state["device"] == "cpu"
    assert state["cuda_graphs"] is False and state["graphs_captured"] == 0 and state["graph_capture_s"] == 0


def test_health_never_reports_a_state_older_than_an_answer_received(served: tuple[httpx.Client, int]) -> None:
    """Read-your-writes, many times: each one-token answer's prompt tokens are already counted in the
    next health read, its adapter resident, nothing running (the engine refreshes its snapshot
    before it sends a ``Finished``; it used to publish it after, and a busy machine read the old one)."""
    http, _ = served
    counted = health(http)["prompt_tokens"]
    for i in range(40):
        counted += chat(http, ("a1", "a2", "qwen3")[i % 3])
        state = health(http)
        assert state["prompt_tokens"] == counted, (i, state)
        assert state["loaded"] and state["adapters"] == 1 and state["running"] == 0, (i, state)


def test_a_hub_id_that_cannot_be_downloaded_fails_in_one_line(tmp_path: Path) -> None:
    """Online mode, an empty cache and a hub endpoint nothing listens on (port 9, discard)."""
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    env |= {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_CACHE": str(tmp_path / "cache")}
    command = ["serve", "--port", "0", "--data-dir", str(tmp_path / "d"), "--base-model", "tiny-org/missing"]
    out = subprocess.run(
        [sys.executable, "-m", "toolkit", *command],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.strip().splitlines()
    cache = tmp_path / "cache"
    assert line.startswith(
        f"toolkit serve: base model 'tiny-org/missing' is not in the Hugging Face cache ({cache}) and could"
        " not be downloaded: "
    )

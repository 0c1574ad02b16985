"""``toolkit serve`` options that shape the engine, as a user passes them: a ``--config`` file serves
the base and adapters it names, ``--max-lora-memory`` on the command line (winning over the file)
caps the resident adapters (the least recently used idle one leaves), and a hub id that is neither
cached nor reachable fails in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import yaml
from model_folders import write_adapter, write_folder

from conftest import LocalServer
from toolkit.server.engine.model import from_folder, load_model
from toolkit.server.engine.runner import Runner

RANK = 64  # two adapters of this rank on the small Qwen3 take more than 1 MiB, one less


def chat(http: httpx.Client, model: str) -> None:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text


def resident(http: httpx.Client) -> int:
    (base,) = http.get("/v1/health").json()["models"]
    assert base["name"] == "qwen3"
    return int(base["adapters"])


def test_a_config_file_serves_its_adapters_under_the_command_lines_lora_cap(tmp_path: Path) -> None:
    base = tmp_path / "qwen3"
    write_folder(base, "qwen3")
    adapters = {name: tmp_path / name for name in ("a1", "a2")}
    for i, folder in enumerate(adapters.values()):
        write_adapter(base, folder, seed=20 + i, r=RANK)
    stack = Runner(load_model(from_folder(base)), 64, lora_bytes=0).adapters
    assert stack is not None and stack.slot_bytes(RANK) < 2**20 < 2 * stack.slot_bytes(RANK)
    config = tmp_path / "serve.yaml"
    options = {
        "base-model": [f"{base}=qwen3"],
        "lora-modules": [f"{name}={folder}" for name, folder in adapters.items()],
        "max-lora-memory": 4096,  # the command line's 1 wins
        "max-num-seqs": 4,
    }
    config.write_text(yaml.safe_dump(options))
    (tmp_path / "data").mkdir()
    args = ("--config", str(config), "--max-lora-memory", "1")
    server = LocalServer(tmp_path / "data", extra_args=args).start()
    try:
        with server.http() as http:
            names = {card["id"] for card in http.get("/v1/models").json()["data"]}
            assert {"qwen3", "a1", "a2"} <= names
            chat(http, "a1")
            assert resident(http) == 1
            chat(http, "a2")
            assert resident(http) == 1  # a1, idle, left to make room: 1 MiB holds one
            chat(http, "a1")
            assert resident(http) == 1
    finally:
        server.stop()


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

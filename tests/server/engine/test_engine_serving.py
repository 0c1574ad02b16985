"""Serving real base models and adapters over HTTP: ``toolkit serve`` with a hub id found in a hub
cache built here (offline) and three folders, under their aliases, with two peft adapters by name.
Bases load on first use (health shows it); greedy completions equal transformers' ``generate``
and peft's; adapters decoding side by side answer as when alone; bad sources fail in one line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from transformers import PreTrainedModel

from conftest import LocalServer
from support.model_folders import greedy, peft_model, write_adapter, write_folder

HUB_ID = "tiny-org/qwen3"
SHA = "0123456789abcdef0123456789abcdef01234567"
BASES = {"qwen3": "qwen3", "llama": "llama", "mistral": "mistral-7b", "qwen2": "qwen2-local"}
MESSAGES = [{"role": "user", "content": "hi there"}]
TOKENS = 8


def hub_cache(root: Path) -> Path:
    """A hub cache holding ``HUB_ID`` as huggingface_hub lays it out: ``refs/main`` names a snapshot."""
    repo = root / f"models--{HUB_ID.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(SHA)
    return repo / "snapshots" / SHA


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("serving")
    cache = root / "hub"
    folders = {
        "qwen3": hub_cache(cache),
        "llama": root / "llama",
        "mistral": root / "m",
        "qwen2": root / "q2",
    }
    built = {arch: write_folder(folder, arch, seed=i) for i, (arch, folder) in enumerate(folders.items())}
    adapters = {name: root / name for name in ("a1", "a2")}
    for i, folder in enumerate(adapters.values()):
        write_adapter(folders["qwen3"], folder, seed=10 + i, r=4 + 4 * i, rslora=i == 1)
    return {"cache": cache, "folders": folders, "models": built, "adapters": adapters, "root": root}


@pytest.fixture(scope="module")
def served(models: dict[str, Any]) -> Iterator[LocalServer]:
    f, a = models["folders"], models["adapters"]
    args = (
        *("--base-model", f"{HUB_ID}={HUB_ID},qwen3"),
        *("--base-model", str(f["llama"])),  # served under the folder's name
        *("--base-model", f"{f['mistral']}=mistral-7b"),
        *("--base-model", f"{f['qwen2']}=qwen2-local,qwen2-other"),
        *(
            "--lora-modules",
            f"a1={a['a1']}",
            f'{{"name": "a2", "path": "{a["a2"]}", "base_model_name": "qwen3"}}',
        ),
    )
    data = models["root"] / "data"
    data.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_CACHE", str(models["cache"]))
        mp.setenv("HF_HUB_OFFLINE", "1")
        server = LocalServer(data, extra_args=args).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def http(served: LocalServer) -> Iterator[httpx.Client]:
    with served.http() as client:
        yield client


def complete(http: httpx.Client, model: str) -> tuple[list[int], list[int]]:
    """Greedy ``TOKENS`` tokens of ``model``: the prompt's token ids and the completion's."""
    r = http.post(
        "/v1/chat/completions",
        json={
            "model": model,
            "messages": MESSAGES,
            "max_tokens": TOKENS,
            "temperature": 0,
            "ignore_eos": True,
            "return_token_ids": True,
        },
    )
    assert r.status_code == 200, r.text
    body = r.json()
    return body["prompt_token_ids"], body["choices"][0]["token_ids"]


def bases(http: httpx.Client) -> dict[str, dict[str, Any]]:
    r = http.get("/v1/health")
    assert r.status_code == 200
    return {m["name"]: m for m in r.json()["models"]}


def test_bases_load_on_first_use_and_health_counts_their_memory(
    http: httpx.Client, models: dict[str, Any]
) -> None:
    before = bases(http)
    assert set(before) == {HUB_ID, "llama", "mistral-7b", "qwen2-local"}
    assert before[HUB_ID]["aliases"] == ["qwen3"] and before["qwen2-local"]["aliases"] == ["qwen2-other"]
    assert before[HUB_ID]["source"] == HUB_ID and before["llama"]["source"] == str(models["folders"]["llama"])
    assert not any(m["loaded"] or m["parameter_bytes"] for m in before.values())
    complete(http, "mistral-7b")
    after = bases(http)
    model: PreTrainedModel = models["models"]["mistral"]
    expected = sum(p.numel() * p.element_size() for p in model.parameters())
    assert after["mistral-7b"]["loaded"] and after["mistral-7b"]["parameter_bytes"] == expected
    assert (after["mistral-7b"]["device"], after["mistral-7b"]["dtype"]) == ("cpu", "float32")
    assert not after["llama"]["loaded"] and after["llama"]["parameter_bytes"] == 0


def test_models_lists_every_name_and_the_adapters_with_their_base(
    http: httpx.Client, models: dict[str, Any]
) -> None:
    cards = {c["id"]: c for c in http.get("/v1/models").json()["data"]}
    assert {HUB_ID, "qwen3", "llama", "mistral-7b", "qwen2-local", "qwen2-other", "a1", "a2"} <= set(cards)
    assert cards["qwen3"]["root"] == HUB_ID
    assert (cards["a2"]["parent"], cards["a2"]["root"]) == (HUB_ID, str(models["adapters"]["a2"]))


@pytest.mark.parametrize("arch", list(BASES))
def test_greedy_over_http_equals_transformers_generate(
    arch: str, http: httpx.Client, models: dict[str, Any]
) -> None:
    prompt, tokens = complete(http, BASES[arch])
    assert tokens == greedy(models["models"][arch], prompt, TOKENS)


def test_adapters_in_one_batch_answer_as_alone_and_as_peft(
    http: httpx.Client, models: dict[str, Any]
) -> None:
    names = ["qwen3", "a1", "a2"]
    alone = {name: complete(http, name) for name in names}
    with ThreadPoolExecutor(6) as pool:
        together = list(pool.map(lambda name: complete(http, name), names * 2))
    assert together == [alone[name] for name in names * 2]
    for name in ("a1", "a2"):
        prompt, tokens = alone[name]
        assert tokens == greedy(
            peft_model(models["folders"]["qwen3"], models["adapters"][name]), prompt, TOKENS
        )
    assert alone["a1"][1] != alone["qwen3"][1] != alone["a2"][1]  # the adapters change the answers
    health = bases(http)[HUB_ID]
    assert health["adapters"] == 2 and health["adapter_bytes"] > 0


def test_aliases_register_training_models(http: httpx.Client) -> None:
    for i, name in enumerate(("qwen3", HUB_ID, "qwen2-other")):
        r = http.post("/v1/preview/models", json={"project": "p", "name": f"m{i}", "base_model": name})
        assert r.status_code == 200, r.text
    r = http.post("/v1/preview/models", json={"project": "p", "name": "x", "base_model": "tiny-org/other"})
    assert r.status_code == 422 and "qwen2-other" in r.text  # the served names are listed


def serve_fails(tmp_path: Path, *args: str) -> str:
    """``toolkit serve`` that must exit 2 before binding; its last stderr line."""
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "empty-cache"), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "toolkit", "serve", "--port", "0", "--data-dir", str(tmp_path / "d"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 2, out.stderr
    return out.stderr.strip().splitlines()[-1]


def test_a_hub_id_neither_cached_nor_reachable_fails_in_one_line(tmp_path: Path) -> None:
    line = serve_fails(tmp_path, "--base-model", "tiny-org/missing")
    assert line.startswith("toolkit serve: base model 'tiny-org/missing' is not in the Hugging Face cache")
    assert "HF_HUB_OFFLINE" in line
    config = tmp_path / "serve.yaml"  # the same through --config
    config.write_text("base-model:\n  - tiny-org/missing=m\nmax-num-seqs: 4\n")
    assert "'tiny-org/missing' is not in the Hugging Face cache" in serve_fails(
        tmp_path, "--config", str(config)
    )
    assert "no such folder" in serve_fails(tmp_path, "--base-model", str(tmp_path / "nowhere"))


def test_an_unknown_device_fails_in_one_line(tmp_path: Path) -> None:
    line = serve_fails(tmp_path, "--device", "tpu")
    assert line == "toolkit serve: unknown device 'tpu': use one of auto, cpu, cuda, cuda:N, mps"


def test_a_bad_thread_count_fails_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLKIT_TORCH_THREADS", "two")
    line = serve_fails(tmp_path)
    assert line == "toolkit serve: TOOLKIT_TORCH_THREADS must be a whole number of at least 1, not 'two'"


def test_the_hub_cache_snapshot_is_what_is_served(
    models: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Resolution goes through huggingface_hub's cache (``refs/main`` -> snapshot), not a copy."""
    from huggingface_hub import constants

    from toolkit.server.engine.sources import BaseModelError, BaseSource, resolve_folder

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    found = resolve_folder(BaseSource(HUB_ID), cache_dir=models["cache"])
    assert found == models["folders"]["qwen3"]
    moved = models["root"] / "hub2"
    shutil.copytree(models["cache"], moved)
    (moved / f"models--{HUB_ID.replace('/', '--')}" / "refs" / "main").unlink()
    with pytest.raises(BaseModelError, match="not in the Hugging Face cache"):
        resolve_folder(BaseSource(HUB_ID), cache_dir=moved)


def test_lora_checkpoints_are_served_on_their_base_as_soon_as_written(
    served: LocalServer, http: httpx.Client, models: dict[str, Any]
) -> None:
    """A model on the ``qwen3`` alias whose checkpoints are peft adapter folders (as LoRA training
    writes them): each step is served the moment its row exists, no restart, through peft's forward."""
    from toolkit.server.store.db import Database
    from toolkit.server.store.migrations import MIGRATIONS
    from toolkit.server.store.models import Models

    r = http.post("/v1/preview/models", json={"project": "lora", "name": "agent", "base_model": "qwen3"})
    assert r.status_code == 200, r.text
    model_id = r.json()["id"]
    db = Database(served.data_dir / "toolkit.db", MIGRATIONS)
    answers = {}
    for step in (1, 2):
        folder = served.data_dir / "checkpoints" / model_id / f"{step:04d}"
        write_adapter(models["folders"]["qwen3"], folder, seed=100 + step, r=8)
        Models(db).add_checkpoint(model_id, step, str(folder), {})
        prompt, tokens = complete(http, f"agent:step{step}")
        assert tokens == greedy(peft_model(models["folders"]["qwen3"], folder), prompt, TOKENS)
        assert complete(http, "agent") == (prompt, tokens)  # the latest step
        answers[step] = tokens
    db.close()
    assert answers[1] != answers[2]
    cards = {c["id"]: c for c in http.get("/v1/models").json()["data"]}
    assert (cards["agent"]["parent"], cards["agent:step2"]["parent"]) == ("qwen3", "agent")

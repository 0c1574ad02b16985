"""The base of a checkpoint record, over HTTP, for a sharded model served from huggingface_hub's
cache: ``base_digest`` covers the index and every shard it names, ``base_revision`` is the snapshot's
commit; an experiment replayed after the hub moved to a revision of the same shard layout but other
weights says the base differs, and names both revisions."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import toolkit as tk
from conftest import LocalServer
from support.model_folders import write_folder
from toolkit.tasks import reverse

HUB_ID = "tests/sharded"
FIRST, SECOND = "1" * 40, "2" * 40  # snapshot commits
SHARD_SIZE = "150KB"  # three shards of the small random model


def snapshot(cache: Path, revision: str, seed: int) -> Path:
    """A snapshot of ``HUB_ID`` at ``revision`` (random weights of ``seed``, sharded), made the one
    ``refs/main`` names."""
    repo = cache / f"models--{HUB_ID.replace('/', '--')}"
    folder = repo / "snapshots" / revision
    model = write_folder(folder, "qwen3", seed=seed)
    (folder / "model.safetensors").unlink()
    model.save_pretrained(folder, max_shard_size=SHARD_SIZE)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    return folder


def folder_digest(folder: Path, names: list[str]) -> str:
    """What ``sha256sum NAMES | sha256sum`` prints in ``folder``."""
    lines = (f"{hashlib.sha256((folder / n).read_bytes()).hexdigest()}  {n}\n" for n in sorted(names))
    return hashlib.sha256("".join(lines).encode()).hexdigest()


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("sharded")
    cache, data = root / "hub", root / "data"
    data.mkdir()
    folder = snapshot(cache, FIRST, seed=0)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_CACHE", str(cache))
        mp.setenv("HF_HUB_OFFLINE", "1")
        server = LocalServer(data, extra_args=("--base-model", HUB_ID)).start()
    yield {"cache": cache, "folder": folder, "server": server, "root": root}
    server.stop()


def test_the_base_digest_covers_every_shard_and_the_revision_is_recorded(hub: dict[str, Any]) -> None:
    folder: Path = hub["folder"]
    shards = sorted(p.name for p in folder.glob("model-*-of-*.safetensors"))
    assert len(shards) == 3
    with hub["server"].client() as client:
        model = client.models.create(project="bases", name="sharded", base_model=HUB_ID)
        start = client.models.checkpoints.record(model.id, 0)
    assert start.base_digest == folder_digest(folder, ["model.safetensors.index.json", *shards])
    assert start.base_revision == FIRST


def test_a_replay_on_another_revision_says_the_base_differs(
    hub: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second revision keeps the shard layout (an identical index) with other weights."""
    path = hub["root"] / "run.json"
    with hub["server"].client() as client, tk.experiment("sharded", seed=2) as exp:
        model = client.models.create(project="bases", name="trained", base_model=HUB_ID)
        job = client.sft_training_jobs.create_from_data(
            model_id=model.id,
            data=[reverse.conversation(w) for w in ("cat", "dog", "sun", "map")],
            config={"batch_size": 4, "learning_rate": 1e-3},
        )
        job.wait(progress=False)
        exp.export(path)
    second = snapshot(hub["cache"], SECOND, seed=1)
    index = "model.safetensors.index.json"
    assert (second / index).read_bytes() == (hub["folder"] / index).read_bytes()
    monkeypatch.setenv("HF_HUB_CACHE", str(hub["cache"]))  # the replay's fresh server reads it
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    report = tk.replay(path)
    (row,) = report.rows
    assert not row.match and row.what is not None
    assert row.what.startswith("base_digest: recorded ")
    assert row.what.endswith(f"(recorded on base revision {FIRST}, replayed on base revision {SECOND})")

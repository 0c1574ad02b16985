"""Checkpoint records (an extension) over HTTP: an SFT job, then an RL job from its checkpoint; each
record names its parent step, job, request as sent, data digest, base and checkpoint digests,
versions, device, dtype, CPU capability and threads, with the values the test computes itself."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import platform
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

import toolkit as tk
from conftest import LocalServer
from support.training_helpers import new_model, rewarded_group, served
from toolkit.tasks import reverse
from toolkit.types.records import CheckpointRecord
from toolkit.types.training import Model

SFT_CONFIG = {"batch_size": 4, "learning_rate": 1e-3}
RL_CONFIG = {"learning_rate": 1e-3, "seed": 7}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def folder_digest(files: dict[str, bytes]) -> str:
    """What ``sha256sum * | sha256sum`` prints in a folder of these files."""
    return sha256("".join(f"{sha256(files[n])}  {n}\n" for n in sorted(files)).encode())


@pytest.fixture(scope="module")
def trained(server: LocalServer) -> dict[str, Any]:
    """A model after an SFT job (step 1) and an RL job on groups sampled from step 1 (step 2)."""
    with server.client() as client:
        model = new_model(client, "records")
        data = b"".join(
            json.dumps({"messages": reverse.conversation(w)}).encode() + b"\n"
            for w in ("cat", "dog", "sun", "map", "pen", "cup", "hat", "box")
        )
        artifact = client.artifacts.upload(project=model.project, files={"train.jsonl": data})
        sft = client.sft_training_jobs.create(
            model_id=model.id, training_data_url=artifact.url, config=SFT_CONFIG
        )
        sft.wait(progress=False)
        groups = [rewarded_group(client, served(model, 1))]
        rl = client.training_jobs.create(
            model_id=model.id, trajectory_groups=groups, experimental_config=RL_CONFIG
        )
        rl.wait(progress=False)
        return {
            "model": model,
            "data": data,
            "url": artifact.url,
            "groups": groups,
            "sft": sft.id,
            "rl": rl.id,
        }


def downloaded(client: tk.Client, model: Model, step: int, into: Path) -> dict[str, bytes]:
    folder = client.models.checkpoints.download(model.id, step, into / f"step{step}")
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def test_each_record_names_what_produced_its_checkpoint(
    server: LocalServer, trained: dict[str, Any], tmp_path: Path
) -> None:
    model: Model = trained["model"]
    with server.client() as client:
        records = client.models.records(model.id)
        metrics = {c.step: c.metrics for c in client.models.checkpoints.list(model.id)}
        files = {step: downloaded(client, model, step, tmp_path) for step in (1, 2)}
    base = server.data_dir / "base" / "toolkit--tiny-chat-1m" / "model.safetensors"
    base_digest = folder_digest({"model.safetensors": base.read_bytes()})
    threads = int(os.environ.get("TOOLKIT_TORCH_THREADS") or 2)
    capability = torch.backends.cpu.get_cpu_capability()  # the server's: it inherits the environment
    versions = {
        "toolkit": tk.__version__,
        "python": platform.python_version(),
        **{p: version(p) for p in ("torch", "transformers", "peft")},
    }
    assert [r.step for r in records] == [0, 1, 2]
    start, sft, rl = records
    assert start.model_dump(exclude={"created_at"}) == CheckpointRecord(
        model_id=model.id, step=0, base_model=model.base_model, base_digest=base_digest
    ).model_dump(exclude={"created_at"})
    sent_sft = {"model_id": model.id, "training_data_url": trained["url"], "config": SFT_CONFIG}
    sent_rl = {"model_id": model.id, "experimental_config": RL_CONFIG}  # the groups: by digest
    groups = json.dumps(trained["groups"], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for record, step, job, kind, request, data_digest, seed in (
        (sft, 1, trained["sft"], "sft", sent_sft, sha256(trained["data"]), None),
        (rl, 2, trained["rl"], "rl", sent_rl, sha256(groups.encode()), 7),
    ):
        assert (record.model_id, record.step, record.parent_step) == (model.id, step, step - 1)
        assert (record.job_id, record.job_kind, record.request) == (job, kind, request)
        assert record.data_digest == data_digest
        assert (record.base_model, record.base_digest) == (model.base_model, base_digest)
        assert record.checkpoint_digest == folder_digest(files[step])
        assert record.seed == seed
        assert record.versions == versions
        assert (record.device, record.dtype, record.torch_threads) == ("cpu", "float32", threads)
        assert record.cpu_capability == capability and record.base_revision is None  # a built-in base
        assert record.deterministic and f"{threads} torch threads and {capability}," in record.deterministic
        assert record.metrics == metrics[step] and record.metrics["data/step_num_gradient_steps"] > 0
        assert record.created_at is not None
    assert sft.checkpoint_digest != rl.checkpoint_digest


def test_one_record_is_the_listed_one_sync_and_async(server: LocalServer, trained: dict[str, Any]) -> None:
    model: Model = trained["model"]
    with server.client() as client:
        listed = client.models.records(model.id)
        one = [client.models.checkpoints.record(model.id, step) for step in (0, 1, 2)]

    async def read() -> tuple[list[CheckpointRecord], CheckpointRecord]:
        async with server.async_client() as client:
            return await client.models.records(model.id), await client.models.checkpoints.record(model.id, 2)

    alisted, aone = asyncio.run(read())
    assert one == listed == alisted and aone == listed[2]


def test_unknown_model_or_step_is_a_404(
    server: LocalServer, trained: dict[str, Any], http: httpx.Client
) -> None:
    model: Model = trained["model"]
    other = server.new_user_key("records-stranger")
    cases = [
        (http, "/v1/preview/models/nope/records", "Model nope not found"),
        (http, "/v1/preview/models/nope/checkpoints/1/record", "Model nope not found"),
        (
            http,
            f"/v1/preview/models/{model.id}/checkpoints/9/record",
            f"Model {model.id} has no checkpoint at step 9",
        ),
    ]
    with server.http(other) as stranger:
        cases.append((stranger, f"/v1/preview/models/{model.id}/records", f"Model {model.id} not found"))
        for client, path, detail in cases:
            r = client.get(path)
            assert (r.status_code, r.json()) == (404, {"detail": detail}), path
    r = http.get(f"/v1/preview/models/{model.id}/checkpoints/-1/record")
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["path", "step"]
    with server.client() as client, pytest.raises(tk.client.NotFoundError, match="no checkpoint at step 9"):
        client.models.checkpoints.record(model.id, 9)


def test_the_hosted_api_has_no_records_and_says_so_without_a_request() -> None:
    with tk.Client("https://api.training.wandb.ai", "key") as hosted:
        for call in (lambda: hosted.models.records("m"), lambda: hosted.models.checkpoints.record("m", 1)):
            with pytest.raises(tk.UnsupportedOperation, match=r"no checkpoint records .*tk\.experiment"):
                call()


def test_a_kill_between_the_files_and_their_commit_leaves_no_checkpoint_without_its_record(
    tmp_path: Path,
) -> None:
    """The runner held (test-only ``TOOLKIT_CHECKPOINT_PAUSE_FILE``) after publishing step 2's files,
    before the transaction of its row and record; ``kill -9`` there; after the restart every
    checkpoint folder has its record and every record of a job its folder, with the folder's digest."""
    pause = tmp_path / "hold"
    server = LocalServer(tmp_path / "data")
    server.data_dir.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TOOLKIT_CHECKPOINT_PAUSE_FILE", str(pause))
        server.start()
    data = [reverse.conversation(w) for w in ("cat", "dog", "sun", "map")]
    try:
        with server.client() as client:
            model = new_model(client, "kill")
            client.sft_training_jobs.create_from_data(model_id=model.id, data=data).wait(progress=False)
            pause.touch()
            held = client.sft_training_jobs.create_from_data(model_id=model.id, data=data)
            published = server.data_dir / "checkpoints" / model.id / "step2"
            wait_until((tmp_path / "hold.held").exists)  # the server's sign that the job waits
        server.kill()
        assert published.is_dir()  # the files were there when the server died
        pause.unlink()
        server.start()
        with server.client() as client:
            assert client.training_jobs.retrieve(held.id).status == "failed"
            records = {r.step: r for r in client.models.records(model.id) if r.job_id}
        folders = {int(p.name.removeprefix("step")): p for p in published.parent.glob("step*") if p.is_dir()}
        assert sorted(folders) == sorted(records) == [1]
        for step, folder in folders.items():
            files = {f.name: f.read_bytes() for f in folder.iterdir()}
            assert records[step].checkpoint_digest == folder_digest(files)
    finally:
        server.stop()


def wait_until(check: Callable[[], bool], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)

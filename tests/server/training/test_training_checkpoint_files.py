"""The checkpoint folders on disk (unit level): staging, publishing, and what a restart cleans up."""

from __future__ import annotations

from pathlib import Path

import torch

from toolkit.server.training.checkpoint_files import CheckpointFolders, manifest, optimizer_file


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_published_checkpoint_appears_whole_with_its_optimizer_state(tmp_path: Path) -> None:
    files = CheckpointFolders(tmp_path)
    staging = files.stage("m", 1, "job")
    (staging.folder / "adapter_config.json").write_text("{}")
    staging.save_optimizer({"kind": "sft", "names": ["w"], "optimizer": {}})
    assert names(tmp_path / "m") == [".step1.job.optimizer.pt.tmp", ".step1.job.tmp"]  # nothing visible yet
    folder = staging.publish()
    assert folder == tmp_path / "m" / "step1"
    assert names(tmp_path / "m") == ["step1", "step1.optimizer.pt"]
    assert torch.load(optimizer_file(folder), weights_only=True)["kind"] == "sft"

    again = files.stage("m", 2, "job2")  # a job that trained nothing shares the files
    again.link(folder)
    assert names(again.publish()) == ["adapter_config.json"]
    assert (tmp_path / "m" / "step2.optimizer.pt").read_bytes() == optimizer_file(folder).read_bytes()
    files.drop_optimizer(folder)
    assert names(tmp_path / "m") == ["step1", "step2", "step2.optimizer.pt"]
    (entry,) = manifest(tmp_path / "m" / "step2")
    assert (entry.name, entry.size) == ("adapter_config.json", 2)
    assert entry.sha256 == "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"


def test_a_discarded_staging_leaves_nothing(tmp_path: Path) -> None:
    staging = CheckpointFolders(tmp_path).stage("m", 1, "job")
    (staging.folder / "model.safetensors").write_bytes(b"x")
    staging.save_optimizer({"kind": "rl"})
    staging.discard()
    assert names(tmp_path / "m") == []


def test_a_restart_keeps_only_known_folders_and_the_latest_optimizer_states(tmp_path: Path) -> None:
    model = tmp_path / "m"
    for name in ("step1", "step2", "step9", ".step3.job.tmp"):
        (model / name).mkdir(parents=True)
    for name in ("step1.optimizer.pt", "step2.optimizer.pt", ".step3.job.optimizer.pt.tmp"):
        (model / name).write_bytes(b"state")
    known = {model / "step1", model / "step2"}  # step9 has no row: a crash before its insert
    CheckpointFolders(tmp_path).recover(known, latest={model / "step2"})
    assert names(model) == ["step1", "step2", "step2.optimizer.pt"]

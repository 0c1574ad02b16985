"""The checkpoint files in the data folder::

    checkpoints/<model id>/step<N>/                a checkpoint: a peft adapter folder (adapter_config.json,
                                                   adapter_model.safetensors, README.md) or whole weights
                                                   (model.safetensors)
    checkpoints/<model id>/step<N>.optimizer.pt    the AdamW state after step N (the latest step only)

A new checkpoint is staged under hidden temporary names, synced, and renamed into place before its
row is inserted; the optimizer state of the step it replaces as the latest is removed once the row
is in. After a crash, :meth:`CheckpointFolders.recover` removes whatever has no row (and optimizer
states of steps that are no longer the latest).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ...types.training import CheckpointFile

OPTIMIZER_SUFFIX = ".optimizer.pt"
_CHUNK = 1 << 20


def optimizer_file(folder: Path) -> Path:
    """Where the optimizer state of the checkpoint in ``folder`` is kept (outside the folder, which
    holds only what a peft or transformers loader reads)."""
    return folder.with_name(folder.name + OPTIMIZER_SUFFIX)


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Staging:
    """A checkpoint being written: ``folder`` and ``optimizer`` are hidden temporary names until
    :meth:`publish` renames them to ``target`` and its optimizer file."""

    folder: Path
    optimizer: Path
    target: Path

    def save_optimizer(self, state: dict[str, Any] | None) -> None:
        if state is not None:
            torch.save(state, self.optimizer)

    def link(self, source: Path) -> None:
        """Share the files of the unchanged checkpoint ``source`` (hard links where possible)."""
        for file in source.iterdir():
            _link_or_copy(file, self.folder / file.name)
        if optimizer_file(source).exists():
            _link_or_copy(optimizer_file(source), self.optimizer)

    def publish(self) -> Path:
        """Sync the staged files and rename them into place; returns the checkpoint folder."""
        for file in self.folder.iterdir():
            _fsync(file)
        shutil.rmtree(self.target, ignore_errors=True)
        self.folder.rename(self.target)
        if self.optimizer.exists():
            _fsync(self.optimizer)
            self.optimizer.replace(optimizer_file(self.target))
        _fsync(self.target.parent)
        return self.target

    def discard(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
        self.optimizer.unlink(missing_ok=True)


class CheckpointFolders:
    """The ``checkpoints/`` tree of the data folder."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def stage(self, model_id: str, step: int, tag: str) -> Staging:
        model_dir = self.root / model_id
        staging = Staging(
            folder=model_dir / f".step{step}.{tag}.tmp",
            optimizer=model_dir / f".step{step}.{tag}{OPTIMIZER_SUFFIX}.tmp",
            target=model_dir / f"step{step}",
        )
        staging.discard()
        staging.folder.mkdir(parents=True)
        return staging

    def remove(self, folder: Path) -> None:
        """Remove a checkpoint folder and its optimizer state."""
        shutil.rmtree(folder, ignore_errors=True)
        optimizer_file(folder).unlink(missing_ok=True)

    def remove_model(self, model_id: str) -> None:
        shutil.rmtree(self.root / model_id, ignore_errors=True)

    def drop_optimizer(self, folder: Path) -> None:
        """Remove the optimizer state of a checkpoint that is no longer the latest."""
        optimizer_file(folder).unlink(missing_ok=True)

    def recover(self, known: set[Path], latest: set[Path]) -> None:
        """Remove every folder and file that is not a ``known`` checkpoint folder or the optimizer
        state of a ``latest`` one (what a crash left half-written or not yet cleaned up)."""
        keep = known | {optimizer_file(folder) for folder in latest}
        if not self.root.exists():
            return
        for model_dir in self.root.iterdir():
            for entry in model_dir.iterdir() if model_dir.is_dir() else ():
                if entry in keep:
                    continue
                if entry.is_dir():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)


def hold_after_publish() -> None:
    """Test-only: while the file ``$TOOLKIT_CHECKPOINT_PAUSE_FILE`` exists, wait here, between
    publishing a checkpoint's files and committing its row (where a crash made on purpose lands);
    ``<that file>.held`` exists while a job waits, so a test knows when to crash."""
    pause = os.environ.get("TOOLKIT_CHECKPOINT_PAUSE_FILE")
    if not pause or not os.path.exists(pause):
        return
    held = Path(pause + ".held")
    held.touch()
    try:
        while os.path.exists(pause):
            time.sleep(0.05)
    finally:
        held.unlink(missing_ok=True)


def manifest(folder: Path) -> list[CheckpointFile]:
    """The files of a checkpoint folder with their sizes and SHA-256 digests, by name."""
    return [_describe(file) for file in sorted(folder.iterdir()) if file.is_file()]


def _describe(file: Path) -> CheckpointFile:
    digest = hashlib.sha256()
    with open(file, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return CheckpointFile(name=file.name, size=file.stat().st_size, sha256=digest.hexdigest())

"""What the runner records of each checkpoint a job writes (:class:`~toolkit.types.records.CheckpointRecord`):
the job's request and data digest, the base model's digest (every weight file, each shard an index
names) and hub revision, the checkpoint's digest, the versions, device, dtype, CPU capability and
thread count training ran with, and on what the result can be replayed bit for bit.
"""

from __future__ import annotations

import hashlib
import json
import platform
import re
import threading
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch

from ..._version import __version__
from ...types.records import files_digest, groups_digest, sha256_hex
from ..engine.device import Placement
from ..engine.model import WEIGHT_FILES, BaseModelSpec
from ..store.jobs import JobRow
from ..store.records import RecordFields
from .checkpoint_files import manifest

_base_digests: dict[tuple[Path, tuple[tuple[str, int, int], ...]], str] = {}
_base_lock = threading.Lock()
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


@cache
def versions() -> dict[str, str]:
    """The versions a checkpoint was trained with."""
    found = {"toolkit": __version__, "python": platform.python_version()}
    for package in ("torch", "transformers", "peft"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = "not installed"
    return found


def weight_files(folder: Path) -> list[str]:
    """The weight files of a model folder: those of ``WEIGHT_FILES`` it holds and every shard their
    index files name (``weight_map``), by name."""
    names = {name for name in WEIGHT_FILES if (folder / name).is_file()}
    for index in [n for n in names if n.endswith(".index.json")]:
        weight_map = json.loads((folder / index).read_text()).get("weight_map") or {}
        names |= {str(shard) for shard in weight_map.values() if (folder / str(shard)).is_file()}
    return sorted(names)


def base_digest(spec: BaseModelSpec) -> str | None:
    """The digest of the base model's weight files (computed once per base and file state)."""
    names = weight_files(spec.folder)
    if not names:
        return None
    stats = [(spec.folder / name).stat() for name in names]
    key = (spec.folder, tuple((n, s.st_size, s.st_mtime_ns) for n, s in zip(names, stats, strict=True)))
    with _base_lock:
        if key not in _base_digests:
            _base_digests[key] = files_digest((n, _sha256(spec.folder / n)) for n in names)
        return _base_digests[key]


def base_revision(spec: BaseModelSpec) -> str | None:
    """The hub commit of a base served from huggingface_hub's cache (its folder is
    ``models--<org>--<name>/snapshots/<commit>``); None for a folder or a built-in model."""
    folder = spec.folder
    in_cache = folder.parent.name == "snapshots" and folder.parent.parent.name.startswith("models--")
    return folder.name if in_cache and _COMMIT.match(folder.name) else None


def _sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def deterministic(device: str, threads: int, capability: str) -> str:
    """On what a checkpoint trained on ``device`` with ``threads`` torch threads (on a CPU of vector
    ``capability``) replays bit for bit."""
    if device == "cpu":
        return (
            f"bit for bit on a CPU server with {threads} torch threads and {capability}, the same"
            " base_digest and versions; another thread count or CPU capability may change the weights"
            " (docs/training.md)"
        )
    return (
        f"not promised bit for bit on {device}: accelerator kernels may differ from run to run;"
        " compare metrics within a tolerance (docs/training.md)"
    )


def _data_digest(kind: str, request: dict[str, Any]) -> str | None:
    if kind == "rl":
        return groups_digest(request.get("trajectory_groups") or [])
    path = Path(request["path"])
    return sha256_hex(path.read_bytes()) if path.is_file() else None


def record_fields(
    job: JobRow,
    parent_step: int,
    spec: BaseModelSpec,
    folder: Path | None,
    placement: Placement | None,
    metrics: dict[str, float],
) -> RecordFields:
    """The record of the checkpoint ``job`` wrote into ``folder`` (None: no files of its own) from
    the checkpoint at ``parent_step``; ``job.request`` is still the stored request."""
    stored: dict[str, Any] = json.loads(job.request or "{}")
    if job.kind == "rl":
        request = {k: v for k, v in stored.items() if k != "trajectory_groups"}
    else:  # the SFT job keeps what it trains with; the request as sent rides along
        request = stored.get("request") or {}
    seed = (request.get("experimental_config") or {}).get("seed")
    device = str(placement.device) if placement else "cpu"
    threads, capability = torch.get_num_threads(), torch.backends.cpu.get_cpu_capability()
    return RecordFields(
        parent_step=parent_step,
        job_id=job.id,
        job_kind=job.kind,
        request=request,
        data_digest=_data_digest(job.kind, stored),
        base_digest=base_digest(spec),
        base_revision=base_revision(spec),
        checkpoint_digest=files_digest((f.name, f.sha256) for f in manifest(folder)) if folder else None,
        seed=seed if isinstance(seed, int) else None,
        versions=versions(),
        device=device,
        dtype=str(placement.dtype if placement else torch.float32).removeprefix("torch."),
        torch_threads=threads,
        cpu_capability=capability,
        deterministic=deterministic(device.partition(":")[0], threads, capability),
        metrics=metrics,
    )

"""Where models run: the ``--device`` setting resolved to a torch device and a dtype.

One helper for serving and training alike: ``auto`` takes CUDA when present, then Apple's MPS, else
the CPU. GPUs compute in bfloat16 (float16 on GPUs without it, and on MPS, whose bfloat16 support
depends on the macOS release); the CPU keeps float32, exact for tests. ``--dtype`` (vLLM's option)
chooses the served weights' dtype instead: bfloat16 on a CPU with AVX-512 BF16 or AMX runs the
projections of a 135M-parameter model 2 to 2.5 times faster, at bfloat16's precision
(docs/performance.md measures what it changes); training keeps the device's own dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

DEVICES = ("auto", "cpu", "cuda", "mps")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class DeviceError(ValueError):
    """A device setting that cannot be used; the message is one line saying why."""


@dataclass(frozen=True)
class Placement:
    """A device and the dtype weights take on it."""

    device: torch.device
    dtype: torch.dtype


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def pick_placement(setting: str = "auto", dtype: str = "auto") -> Placement:
    """``auto``, ``cpu``, ``cuda``, ``cuda:N`` or ``mps``, with the device's own dtype or ``dtype``
    (``float32``, ``bfloat16``, ``float16``); a named accelerator that is absent, or an unknown dtype,
    is a :class:`DeviceError`."""
    if dtype != "auto" and dtype not in DTYPES:
        raise DeviceError(f"unknown dtype {dtype!r}: use one of auto, {', '.join(DTYPES)}")
    placement = _device_placement(setting)
    return placement if dtype == "auto" else Placement(placement.device, DTYPES[dtype])


def _device_placement(setting: str) -> Placement:
    kind = setting.partition(":")[0]
    if kind not in DEVICES or (kind != "cuda" and ":" in setting):
        raise DeviceError(f"unknown device {setting!r}: use one of auto, cpu, cuda, cuda:N, mps")
    if kind == "auto":
        kind = "cuda" if torch.cuda.is_available() else "mps" if _mps_available() else "cpu"
        setting = kind
    if kind == "cuda" and not torch.cuda.is_available():
        raise DeviceError(f"device {setting!r} asked for, but torch sees no CUDA device")
    if kind == "mps" and not _mps_available():
        raise DeviceError("device 'mps' asked for, but torch sees no MPS device")
    device = torch.device(setting)
    if kind == "cpu":
        return Placement(device, torch.float32)
    if kind == "mps":
        return Placement(device, torch.float16)
    bf16 = torch.cuda.is_bf16_supported()
    return Placement(device, torch.bfloat16 if bf16 else torch.float16)

"""The one device helper serving and training share: ``auto`` takes an accelerator when torch sees
one, GPUs get bfloat16 (float16 without it), the CPU float32; an absent or unknown device is a
one-line :class:`DeviceError`."""

from __future__ import annotations

import pytest
import torch

from toolkit.server.engine import device
from toolkit.server.engine.device import DeviceError, pick_placement


@pytest.fixture
def no_accelerator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(device, "_mps_available", lambda: False)


def test_auto_is_the_cpu_without_an_accelerator(no_accelerator: None) -> None:
    for setting in ("auto", "cpu"):
        placement = pick_placement(setting)
        assert (placement.device, placement.dtype) == (torch.device("cpu"), torch.float32)
    with pytest.raises(DeviceError, match="no CUDA device"):
        pick_placement("cuda:1")
    with pytest.raises(DeviceError, match="no MPS device"):
        pick_placement("mps")


def test_auto_takes_cuda_then_mps(no_accelerator: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device, "_mps_available", lambda: True)
    assert pick_placement("auto") == device.Placement(torch.device("mps"), torch.float16)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert pick_placement("auto") == device.Placement(torch.device("cuda"), torch.bfloat16)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    assert pick_placement("cuda:1") == device.Placement(torch.device("cuda:1"), torch.float16)


def test_unknown_settings_are_refused() -> None:
    for setting in ("gpu", "cpu:0", "mps:1", ""):
        with pytest.raises(DeviceError, match="unknown device"):
            pick_placement(setting)

"""A fresh adapter drawn while another thread builds a model without initialising it (the engine
loading a checkpoint inside ``transformers``' ``no_init_weights()``, which switches ``torch.nn.init``
off process-wide): the adapter waits for the build (``engine.building.BUILDING``), so its B is zeros
and its A drawn from its seed, and ``torch.nn.init`` is whole again after both."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM

from toolkit.server.engine.model import RANDOM_NAME, builtin_spec, load_model
from toolkit.server.training import lora
from toolkit.types.training import LoRAConfig


def test_a_fresh_adapter_waits_for_a_model_built_without_initialisation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = builtin_spec(tmp_path, RANDOM_NAME)
    base = load_model(spec)  # the adapter's base, built before the race
    zeros, kaiming = torch.nn.init.zeros_, torch.nn.init.kaiming_uniform_
    inside, release = threading.Event(), threading.Event()
    from_config = AutoModelForCausalLM.from_config

    def held_from_config(*args: Any, **kwargs: Any) -> Any:
        inside.set()  # within no_init_weights(): torch.nn.init's functions do nothing now
        assert release.wait(10)
        return from_config(*args, **kwargs)

    monkeypatch.setattr(AutoModelForCausalLM, "from_config", held_from_config)
    loading = threading.Thread(target=load_model, args=(spec,))
    loading.start()
    assert inside.wait(10)
    adapted: list[Any] = []
    drawing = threading.Thread(target=lambda: adapted.append(lora.attach(base, LoRAConfig(), RANDOM_NAME)))
    drawing.start()
    drawing.join(0.5)
    assert drawing.is_alive()  # it waits for the build, not drawing under the switched-off init
    release.set()
    loading.join(10)
    drawing.join(30)
    (peft_model,) = adapted
    a = [p for n, p in peft_model.named_parameters() if "lora_A" in n]
    b = [p for n, p in peft_model.named_parameters() if "lora_B" in n]
    assert a and b and all(torch.count_nonzero(p) == 0 for p in b)  # B = 0: the base's outputs exactly
    assert all(torch.isfinite(p).all() and p.abs().max() > 0 for p in a)
    assert (torch.nn.init.zeros_, torch.nn.init.kaiming_uniform_) == (zeros, kaiming)

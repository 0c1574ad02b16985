"""peft LoRA adapter folders, read for serving.

A folder holds ``adapter_config.json`` (``r``, ``lora_alpha``, ``use_rslora``, ``target_modules``)
and ``adapter_model.safetensors`` with peft's names,
``base_model.model.model.layers.<i>.<self_attn|mlp>.<module>.lora_A.weight`` ``[r, in]`` and
``...lora_B.weight`` ``[out, r]``; a target computes ``base(x) + scaling * B(A(x))`` with
``scaling = lora_alpha / r`` (``lora_alpha / sqrt(r)`` with rsLoRA), ``r`` being that module's rank.
A checkpoint folder is either such an adapter or whole weights (``model.safetensors``).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from safetensors.torch import load_file
from torch import Tensor

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
FULL_WEIGHTS = "model.safetensors"
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_KEY = re.compile(
    r"^base_model\.model\.model\.layers\.(\d+)\.(?:self_attn|mlp)\.("
    + "|".join(TARGETS)
    + r")\.lora_([AB])\.weight$"
)
# adapter features that change the computation beyond ``B(A(x))``: refused rather than served wrong
_UNSUPPORTED = ("use_dora", "lora_bias", "modules_to_save", "alpha_pattern", "layer_replication")


class AdapterError(ValueError):
    """An adapter folder this engine cannot serve; the message says why."""


def checkpoint_kind(folder: Path) -> Literal["lora", "full"] | None:
    """What a checkpoint folder holds: a LoRA adapter, whole weights, or nothing servable."""
    if (folder / ADAPTER_CONFIG).is_file():
        return "lora"
    if (folder / FULL_WEIGHTS).is_file():
        return "full"
    return None


@dataclass
class LoraAdapter:
    """One adapter's weights: ``(layer, module) -> (A [r, in], scaling * B [out, r])``."""

    modules: dict[tuple[int, str], tuple[Tensor, Tensor]]

    @property
    def rank(self) -> int:
        return max((a.shape[0] for a, _ in self.modules.values()), default=0)

    @classmethod
    def read(cls, folder: Path, device: torch.device, dtype: torch.dtype) -> LoraAdapter:
        """Read and check a peft adapter folder (``FileNotFoundError`` when it is gone)."""
        config: dict[str, Any] = json.loads((folder / ADAPTER_CONFIG).read_text())
        if config.get("peft_type", "LORA") != "LORA":
            raise AdapterError(f"{folder}: peft_type {config.get('peft_type')!r} is not LORA")
        if config.get("bias", "none") != "none":
            raise AdapterError(f"{folder}: bias {config['bias']!r} is not supported (only 'none')")
        used = [key for key in _UNSUPPORTED if config.get(key)]
        if used:
            raise AdapterError(f"{folder}: {', '.join(used)} not supported")
        alpha = float(config.get("lora_alpha", config.get("r", 8)))
        rslora = bool(config.get("use_rslora", False))
        tensors = load_file(str(folder / ADAPTER_WEIGHTS))
        halves: dict[tuple[int, str], dict[str, Tensor]] = {}
        unknown = []
        for key, tensor in tensors.items():
            match = _KEY.match(key)
            if match is None:
                unknown.append(key)
                continue
            halves.setdefault((int(match[1]), match[2]), {})[match[3]] = tensor
        if unknown:
            raise AdapterError(
                f"{folder}: tensors of modules this engine cannot serve: {', '.join(unknown[:3])}"
            )
        modules: dict[tuple[int, str], tuple[Tensor, Tensor]] = {}
        for target, pair in halves.items():
            if set(pair) != {"A", "B"} or pair["A"].shape[0] != pair["B"].shape[1]:
                raise AdapterError(f"{folder}: layer {target[0]} {target[1]} lacks a matching lora_A/lora_B")
            r = pair["A"].shape[0]
            scaling = alpha / math.sqrt(r) if rslora else alpha / r
            a = pair["A"].to(device=device, dtype=dtype)
            b = (pair["B"].float() * scaling).to(device=device, dtype=dtype)
            modules[target] = (a, b)
        return cls(modules)

"""LoRA adapters through peft: which base modules an adapter may target, a fresh adapter on a base
model, a checkpoint's adapter loaded back, and a checkpoint written as a standard peft folder
(``adapter_config.json`` + ``adapter_model.safetensors``, exactly what ``save_pretrained`` writes).

peft (and transformers) are imported when an adapter is first made or read, so a server that only
fully fine-tunes never pays for peft, and one that trains nothing for neither.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ...seeding import derive_seed
from ...types.training import LoRAConfig, ModelCreate
from ..engine.building import BUILDING
from ..engine.lora import ADAPTER_CONFIG
from ..engine.model import BUILTIN_NAMES

if TYPE_CHECKING:
    from peft import LoraConfig, PeftModel
    from transformers import PreTrainedModel

ADAPTER_SEED = 0  # without a job seed, a fresh adapter's A matrices are the same everywhere


def adapter_seed(job_seed: int | None) -> int:
    """The torch seed of a fresh adapter: :data:`ADAPTER_SEED`, or one derived from the job's seed."""
    return ADAPTER_SEED if job_seed is None else derive_seed(job_seed, "lora")


def settings_for(req: ModelCreate) -> LoRAConfig | None:
    """How a new model trains: the given ``lora_config``; full fine-tuning when asked; else a LoRA
    adapter with ART's defaults, except on the built-in models, which are fully fine-tuned by default
    (a million parameters leave a low-rank adapter too little to move: docs/training.md)."""
    if req.full_finetuning:
        return None
    if req.lora_config is not None:
        return req.lora_config
    if req.full_finetuning is None and req.base_model in BUILTIN_NAMES:
        return None
    return LoRAConfig()


def peft_config(settings: LoRAConfig, base_model: str) -> LoraConfig:
    """The peft ``LoraConfig`` of ``settings`` (ART's names mapped to peft's)."""
    from peft import LoraConfig

    return LoraConfig(
        task_type="CAUSAL_LM",
        base_model_name_or_path=base_model,
        r=settings.rank,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=list(settings.target_modules),
        use_rslora=settings.use_rslora,
        bias="none",
    )


@cache
def adaptable_modules(folder: Path) -> frozenset[str]:
    """Names of the linear layers of the model in ``folder`` that an adapter may target: every
    ``nn.Linear`` but the output head (vLLM refuses adapters on it). Built on the meta device, so
    no weight is read or allocated."""
    with BUILDING, torch.device("meta"):
        from transformers import AutoConfig, AutoModelForCausalLM

        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder))
    head = model.get_output_embeddings()
    linears = (name for name, m in model.named_modules() if isinstance(m, torch.nn.Linear) and m is not head)
    return frozenset(linears)


def unknown_targets(settings: LoRAConfig, folder: Path) -> list[str]:
    """The ``target_modules`` that name no adaptable layer of the base model (peft matches a target
    against the end of a module's dotted name)."""
    names = adaptable_modules(folder)
    return [t for t in settings.target_modules if not any(n == t or n.endswith("." + t) for n in names)]


def suffixes(folder: Path) -> list[str]:
    """The distinct last parts of the adaptable layers' names, for error messages."""
    return sorted({name.rsplit(".", 1)[-1] for name in adaptable_modules(folder)})


def attach(
    model: PreTrainedModel, settings: LoRAConfig, base_model: str, seed: int = ADAPTER_SEED
) -> PeftModel:
    """A fresh adapter on ``model`` (B = 0, so it computes exactly what the base does; A drawn from
    ``seed``), trainable. The base weights are frozen; ``model`` itself gains the LoRA layers."""
    model.name_or_path = base_model  # else peft records the folder the weights were read from
    with BUILDING, torch.random.fork_rng(devices=[]):  # its A and B drawn, not left uninitialised
        from peft import get_peft_model

        torch.manual_seed(seed)
        return get_peft_model(model, peft_config(settings, base_model))


def load(model: PreTrainedModel, folder: Path, *, trainable: bool) -> PeftModel:
    """The adapter saved in ``folder``, on ``model``."""
    with BUILDING:
        from peft import PeftModel

        return PeftModel.from_pretrained(model, folder, is_trainable=trainable)


def merged(model: PreTrainedModel, folder: Path) -> PreTrainedModel:
    """``model`` with the adapter of ``folder`` folded into its weights (for inference only)."""
    merged_model: PreTrainedModel = load(model, folder, trainable=False).merge_and_unload()
    merged_model.eval()
    return merged_model


def save(adapter: PeftModel, folder: Path) -> None:
    """Write the adapter as peft does (``save_embedding_layers=False``: the embeddings are never
    adapted here, and peft's automatic check would look the base model up on the Hub), with the same
    bytes on every server: the model card names the base as the adapter's config does (not the base
    folder of this data folder), and ``target_modules`` are sorted (peft keeps them as a set, whose
    order changes from process to process)."""
    config: Any = adapter.get_base_model().config
    folder_name = config._name_or_path
    config._name_or_path = adapter.peft_config["default"].base_model_name_or_path
    try:
        adapter.save_pretrained(str(folder), safe_serialization=True, save_embedding_layers=False)
    finally:
        config._name_or_path = folder_name
    path = folder / ADAPTER_CONFIG
    saved = json.loads(path.read_text())
    if isinstance(saved.get("target_modules"), list):
        saved["target_modules"] = sorted(saved["target_modules"])
        path.write_text(json.dumps(saved, indent=2, sort_keys=True))


def is_adapter(folder: Path) -> bool:
    return (folder / ADAPTER_CONFIG).exists()

"""Random model folders (``toolkit.server.engine.random_models``) and peft adapters on them, built in
the tests (no download), and the references served completions are checked against: peft's model
and transformers' greedy ``generate``."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

from toolkit.server.engine.random_models import ARCHITECTURES, write_folder

__all__ = ["ARCHITECTURES", "greedy", "peft_model", "write_adapter", "write_folder"]
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def write_adapter(
    base: Path, folder: Path, seed: int, r: int = 4, rslora: bool = False, targets: list[str] | None = None
) -> None:
    """A peft LoRA adapter of the model in ``base``, made by peft itself; B random so it matters."""
    from peft import LoraConfig, get_peft_model

    model = AutoModelForCausalLM.from_pretrained(base)
    lora = LoraConfig(
        r=r, lora_alpha=2 * r, use_rslora=rslora, target_modules=targets or LORA_TARGETS, lora_dropout=0.0
    )
    peft_model = get_peft_model(model, lora)
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn_like(p) * 0.2)
    peft_model.save_pretrained(folder)


def peft_model(base: Path, adapter: Path) -> PreTrainedModel:
    """peft's own model: the base folder's model with the adapter, in eval mode."""
    from peft import PeftModel

    model = AutoModelForCausalLM.from_pretrained(base)
    return PeftModel.from_pretrained(model, adapter).eval()  # type: ignore[no-any-return]


def greedy(model: PreTrainedModel, prompt: list[int], tokens: int) -> list[int]:
    """transformers' ``generate``, greedy, exactly ``tokens`` new tokens (no end token stops it)."""
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            max_new_tokens=tokens,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
        )
    ids: list[int] = out[0, len(prompt) :].tolist()
    assert len(ids) == tokens
    return ids

"""Small random Hugging Face model folders and peft adapters built in the tests (no download).

Each folder holds what ``toolkit serve --base-model`` needs: ``config.json`` and
``model.safetensors`` (``save_pretrained``), the byte tokenizer with ChatML tokens
(``tokenizer.json``, vocab sized to match) and a chat template (``tokenizer_config.json``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    MistralConfig,
    PretrainedConfig,
    PreTrainedModel,
    Qwen2Config,
    Qwen3Config,
)

from toolkit.server.engine.tokenizer import CHATML_TEMPLATE, IM_END, PAD, byte_tokenizer

VOCAB = 260  # 256 bytes + the four ChatML special tokens
SHAPE: dict[str, Any] = {
    "vocab_size": VOCAB,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "intermediate_size": 128,
    "max_position_embeddings": 512,
}
ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3")
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def config(arch: str) -> PretrainedConfig:
    """A small config of ``arch``: Qwen2 keeps its q/k/v biases, Qwen3 its q/k norms (head_dim set:
    its default is 128) and tied embeddings, as Qwen3-0.6B has them."""
    ids = byte_tokenizer().get_vocab()
    tokens = {"eos_token_id": ids[IM_END], "pad_token_id": ids[PAD], "bos_token_id": None}
    if arch == "llama":
        return LlamaConfig(**SHAPE, **tokens)
    if arch == "mistral":
        return MistralConfig(**SHAPE, **tokens, sliding_window=256)
    if arch == "qwen2":
        return Qwen2Config(**SHAPE, **tokens)
    if arch == "qwen3":
        return Qwen3Config(**SHAPE, **tokens, head_dim=16, tie_word_embeddings=True)
    raise ValueError(arch)


def random_model(arch: str, seed: int = 0) -> PreTrainedModel:
    """Random weights, every parameter (biases and norms included) moved off its initial value."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config(arch))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model.eval()


def write_folder(folder: Path, arch: str, seed: int = 0) -> PreTrainedModel:
    """A servable folder of a random ``arch`` model; returns the model."""
    model = random_model(arch, seed)
    model.save_pretrained(folder)
    tok = byte_tokenizer()
    assert tok.get_vocab_size() == VOCAB
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": CHATML_TEMPLATE, "eos_token": IM_END, "pad_token": PAD})
    )
    return model


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

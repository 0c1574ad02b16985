"""Small random Hugging Face model folders over the byte tokenizer, built from a config (no download).

A folder holds what ``toolkit serve --base-model FOLDER``, ``transformers`` and ``peft`` load:
``config.json`` and ``model.safetensors`` (``save_pretrained``), the byte tokenizer with the ChatML
tokens (``tokenizer.json``, the vocabulary sized to match) and the ChatML chat template
(``tokenizer_config.json``). The weights are random: such a model answers noise until trained, which
is what tests, demos and notebook 08 need to show LoRA training and serving offline.
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

from .building import BUILDING
from .tokenizer import CHATML_TEMPLATE, IM_END, PAD, byte_tokenizer

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
CLASSES: dict[str, type[PretrainedConfig]] = {
    "llama": LlamaConfig,
    "mistral": MistralConfig,
    "qwen2": Qwen2Config,
    "qwen3": Qwen3Config,
}
ARCHITECTURES = tuple(CLASSES)
EXTRA: dict[str, dict[str, Any]] = {
    "mistral": {"sliding_window": 256},
    "qwen3": {"head_dim": 16, "tie_word_embeddings": True},
}


def config(arch: str, **shape: Any) -> PretrainedConfig:
    """A small config of ``arch``: Qwen2 keeps its q/k/v biases, Qwen3 its q/k norms (head_dim set:
    its default is 128) and tied embeddings, as Qwen3-0.6B has them. ``shape`` overrides any config
    field (a bigger model for a benchmark: ``hidden_size=768, num_hidden_layers=16, ...``)."""
    if arch not in CLASSES:
        raise ValueError(f"unknown architecture {arch!r}; known: {', '.join(ARCHITECTURES)}")
    ids = byte_tokenizer().get_vocab()
    tokens: dict[str, Any] = {"eos_token_id": ids[IM_END], "pad_token_id": ids[PAD], "bos_token_id": None}
    return CLASSES[arch](**{**SHAPE, **tokens, **EXTRA.get(arch, {}), **shape})


def random_model(arch: str, seed: int = 0, **shape: Any) -> PreTrainedModel:
    """Random weights, every parameter (biases and norms included) moved off its initial value."""
    torch.manual_seed(seed)
    with BUILDING:
        model = AutoModelForCausalLM.from_config(config(arch, **shape))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model.eval()


def write_folder(folder: str | Path, arch: str = "qwen3", seed: int = 0, **shape: Any) -> PreTrainedModel:
    """Write a servable folder of a random ``arch`` model (the same weights for the same seed; ``shape``
    as for :func:`config`); returns the model."""
    folder = Path(folder)
    model = random_model(arch, seed, **shape)
    model.save_pretrained(folder)
    byte_tokenizer().save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": CHATML_TEMPLATE, "eos_token": IM_END, "pad_token": PAD})
    )
    return model

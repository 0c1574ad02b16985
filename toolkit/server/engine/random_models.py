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
ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3")


def config(arch: str) -> PretrainedConfig:
    """A small config of ``arch``: Qwen2 keeps its q/k/v biases, Qwen3 its q/k norms (head_dim set:
    its default is 128) and tied embeddings, as Qwen3-0.6B has them."""
    ids = byte_tokenizer().get_vocab()
    tokens: dict[str, Any] = {"eos_token_id": ids[IM_END], "pad_token_id": ids[PAD], "bos_token_id": None}
    if arch == "llama":
        return LlamaConfig(**SHAPE, **tokens)
    if arch == "mistral":
        return MistralConfig(**SHAPE, **tokens, sliding_window=256)
    if arch == "qwen2":
        return Qwen2Config(**SHAPE, **tokens)
    if arch == "qwen3":
        return Qwen3Config(**SHAPE, **tokens, head_dim=16, tie_word_embeddings=True)
    raise ValueError(f"unknown architecture {arch!r}; known: {', '.join(ARCHITECTURES)}")


def random_model(arch: str, seed: int = 0) -> PreTrainedModel:
    """Random weights, every parameter (biases and norms included) moved off its initial value."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config(arch))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model.eval()


def write_folder(folder: str | Path, arch: str = "qwen3", seed: int = 0) -> PreTrainedModel:
    """Write a servable folder of a random ``arch`` model (the same weights for the same seed);
    returns the model."""
    folder = Path(folder)
    model = random_model(arch, seed)
    model.save_pretrained(folder)
    byte_tokenizer().save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": CHATML_TEMPLATE, "eos_token": IM_END, "pad_token": PAD})
    )
    return model

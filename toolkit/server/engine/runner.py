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
from .prefix_cache import BLOCK

Attend = Callable[[int, Tensor, Tensor, Tensor], Tensor]
"""``(layer, q [R, heads, D], k, v [R, kv_heads, D])`` for the ``R`` positions of a forward: stores the
new keys/values in the cache and returns the attention output ``[R, heads * D]``."""


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


@dataclass(frozen=True)
class _Proj:
    """``x @ weight_t (+ bias)`` for ``x [rows, in]``; ``weight_t`` is a transposed view, made once."""

    weight_t: Tensor
    bias: Tensor | None

    @classmethod
    def of(cls, *linears: torch.nn.Linear) -> _Proj:
        """The projections ``linears`` side by side (their weights concatenated)."""
        weight = torch.cat([x.weight.data for x in linears]) if len(linears) > 1 else linears[0].weight.data
        biases = [x.bias.data for x in linears if x.bias is not None]
        return cls(weight.t(), torch.cat(biases) if biases else None)


@dataclass
class _Layer:
    norm1: Norm
    qkv: _Proj
    q_norm: Norm | None
    k_norm: Norm | None
    o_proj: _Proj
    norm2: Norm
    gate_up: _Proj
    down: _Proj


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
                qkv=_Proj.of(layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj),
                q_norm=_norm(layer.self_attn.q_norm) if hasattr(layer.self_attn, "q_norm") else None,
                k_norm=_norm(layer.self_attn.k_norm) if hasattr(layer.self_attn, "k_norm") else None,
                o_proj=_Proj.of(layer.self_attn.o_proj),
                norm2=_norm(layer.post_attention_layernorm),
                gate_up=_Proj.of(layer.mlp.gate_proj, layer.mlp.up_proj),
                down=_Proj.of(layer.mlp.down_proj),
            )
            for layer in layers
        ]
        act = layers[0].mlp.act_fn
        self.act = F.silu if getattr(cfg, "hidden_act", None) == "silu" else act
        self.vocab_size = int(self.lm_head.out_features)
        self.dtype = self.embed.weight.dtype
        self.device = self.embed.weight.device
        with torch.no_grad():
            positions = torch.arange(max_len, device=self.device)[None]
            probe = torch.zeros(1, max_len, self.head_dim, device=self.device, dtype=self.dtype)
            cos, sin = core.rotary_emb(probe, positions)
        self.cos, sin = cos[0].to(self.dtype), sin[0].to(self.dtype)
        # rotate_half(x) * sin == x.roll(D/2) * sin_signed: the first half of sin negated
        half = self.head_dim // 2
        self.sin_signed = torch.cat((-sin[:, :half], sin[:, half:]), dim=-1)
        self._no_mask = torch.zeros(1, 1, 1, device=self.device, dtype=self.dtype)
        # the fused projections replace the model's q/k/v and gate/up weights, freed with the model
        self.parameter_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        self.parameters = sum(p.numel() for p in model.parameters())
        self.adapters: AdapterStack | None = None
        if lora_bytes is not None:
            hidden, inter = self.embed.embedding_dim, self.layers[0].down.weight_t.shape[0]
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

    def _project(
        self,
        proj: _Proj,
        layer: int,
        target: int,
        x: Tensor,
        lora: LoraRows | None,
        residual: Tensor | None = None,
    ) -> Tensor:
        """``proj`` of ``x [rows, in]`` plus the rows' LoRA deltas, plus ``residual`` (one fused
        matmul when there is nothing else to add)."""
        if residual is not None and lora is None and proj.bias is None:
            return torch.addmm(residual, x, proj.weight_t)
        y = torch.mm(x, proj.weight_t) if proj.bias is None else torch.addmm(proj.bias, x, proj.weight_t)
        if lora is not None and self.adapters is not None:
            y += self.adapters.delta(layer, target, x.view(lora.rows, -1, x.shape[-1]), lora).view_as(y)
        return y if residual is None else residual + y

    def _lora_rows(self, adapters: list[int] | None) -> LoraRows | None:
        if not adapters or not any(adapters):
            return None
        if self.adapters is None:
            raise ValueError("these weights serve no LoRA adapters")
        return LoraRows(adapters, self.device)

    def _layers(self, h: Tensor, positions: Tensor, attend: Attend, lora: LoraRows | None) -> Tensor:
        """The decoder layers over ``h [R, hidden]`` at ``positions [R]`` (a forward's rows and
        positions flattened); queries and keys are normed (Qwen3) and rotated together, ``attend``
        stores the keys/values and attends."""
        nh, nkv, d = self.n_heads, self.n_kv, self.head_dim
        nq, nk = nh * d, nkv * d
        cos = self.cos[positions].unsqueeze(1)  # [R, 1, D]
        sin = self.sin_signed[positions].unsqueeze(1)
        for i, layer in enumerate(self.layers):
            qkv = self._project(layer.qkv, i, 0, layer.norm1(h), lora)
            qk = qkv[:, : nq + nk].view(-1, nh + nkv, d)
            if layer.q_norm is not None and layer.k_norm is not None:
                qk = torch.cat((layer.q_norm(qk[:, :nh]), layer.k_norm(qk[:, nh:])), dim=1)
            qk = torch.addcmul(qk * cos, qk.roll(d // 2, -1), sin)  # rotary: x cos + rotate_half(x) sin
            out = attend(i, qk[:, :nh], qk[:, nh:], qkv[:, nq + nk :].view(-1, nkv, d))
            h = self._project(layer.o_proj, i, 1, out, lora, residual=h)
            gate, up = self._project(layer.gate_up, i, 2, layer.norm2(h), lora).chunk(2, dim=-1)
            h = self._project(layer.down, i, 3, self.act(gate) * up, lora, residual=h)
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
        k, t = len(prompts), max(lengths)
        width = min(cache.max_len, max(s + t for s in starts))
        cache.reserve(max(slots) + 1, width)
        ids = torch.tensor([p + [0] * (t - len(p)) for p in prompts], device=dev)
        # pad positions past the window are clamped: they only ever hold masked garbage
        positions = (torch.tensor(starts, device=dev)[:, None] + torch.arange(t, device=dev)[None]).clamp(
            max=width - 1
        )
        rows = torch.tensor(slots, device=dev)
        mask = (torch.arange(width, device=dev)[None, None, :] <= positions[:, :, None])[:, None]

        def attend(i: int, q: Tensor, key: Tensor, value: Tensor) -> Tensor:
            cache.k[i][rows[:, None], :, positions] = key.view(k, t, self.n_kv, -1)
            cache.v[i][rows[:, None], :, positions] = value.view(k, t, self.n_kv, -1)
            keys, values = cache.k[i][rows, :, :width], cache.v[i][rows, :, :width]
            out = F.scaled_dot_product_attention(
                q.view(k, t, self.n_heads, -1).transpose(1, 2),
                keys,
                values,
                attn_mask=mask,
                scale=self.scale,
                enable_gqa=self.n_kv != self.n_heads,
            )
            return out.transpose(1, 2).reshape(k * t, -1)

        embedded = F.embedding(ids.view(-1), self.embed.weight)
        h = self._layers(embedded, positions.view(-1), attend, self._lora_rows(adapters)).view(k, t, -1)
        ends = torch.tensor(lengths, device=dev) - 1
        last = self._logits(h[torch.arange(k, device=dev), ends])
        every: list[Tensor | None] = [
            self._logits(h[i, : lengths[i]]) if full and full[i] else None for i in range(k)
        ]
        return last, every

    @torch.no_grad()
    def decode(
        self, cache: SlotCache, tokens: list[int], positions: list[int], adapters: list[int] | None = None
    ) -> Tensor:
        """One step for slots ``0..B-1``: token ``tokens[b]`` at ``positions[b]`` through adapter slot
        ``adapters[b]``; returns float32 logits ``[B, V]``.

        Each layer's new keys/values go to the cache with one ``index_put_`` each (from their strided
        views: no copy to make them contiguous first), and attention is two batched matmuls per layer
        over strided views of the cache (the query heads sharing a key/value head as one row group),
        with a mask built once per step (none when every row is at the same position): at one query
        per row this is cheaper on the CPU than ``scaled_dot_product_attention``.
        """
        b = len(tokens)
        width = max(positions) + 1
        cache.reserve(b, width)
        dev = self.device
        nkv, group, d, length = self.n_kv, self.n_heads // self.n_kv, self.head_dim, cache.length
        at = torch.tensor(positions, device=dev)
        # the flat row of (slot, kv head, position) in a cache tensor viewed as [-1, head_dim], [B, kv]
        flat = (torch.arange(b * nkv, device=dev).view(b, nkv) * length + at[:, None],)
        mask = self._no_mask
        if min(positions) < width - 1:
            later = torch.arange(width, device=dev)[None, :] > at[:, None]
            mask = torch.zeros(b, width, device=dev, dtype=self.dtype).masked_fill_(later, -float("inf"))
            mask = mask.repeat_interleave(nkv, dim=0)[:, None]  # [B * kv, 1, width]

        def attend(i: int, q: Tensor, key: Tensor, value: Tensor) -> Tensor:
            cache.flat_k[i].index_put_(flat, key)
            cache.flat_v[i].index_put_(flat, value)
            keys_t = cache.k[i].as_strided((b * nkv, d, width), (length * d, 1, d))
            values = cache.v[i].as_strided((b * nkv, width, d), (length * d, d, 1))
            scores = torch.baddbmm(mask, q.reshape(b * nkv, group, d), keys_t, alpha=self.scale)
            return torch.bmm(scores.softmax(-1), values).view(b, -1)

        embedded = F.embedding(torch.tensor(tokens, device=dev), self.embed.weight)
        return self._logits(self._layers(embedded, at, attend, self._lora_rows(adapters)))

    def _logits(self, h: Tensor) -> Tensor:
        """float32 logits of the final hidden states ``h``."""
        return F.linear(self.norm(h), self.lm_head.weight, self.lm_head.bias).float()


class SlotCache:
    """Keys and values ``[slots, kv_heads, length, head_dim]`` per layer, grown on demand."""

    def __init__(
        self, n_layers: int, n_kv: int, head_dim: int, dtype: torch.dtype, max_len: int, device: torch.device
    ) -> None:
        self.n_layers, self.n_kv, self.head_dim, self.max_len = n_layers, n_kv, head_dim, max_len
        self.dtype, self.device = dtype, device
        self.slots, self.length, self.bytes = 0, 0, 0
        self.k: list[Tensor] = []
        self.v: list[Tensor] = []
        self.flat_k: list[Tensor] = []
        self.flat_v: list[Tensor] = []

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
        self.bytes = sum(t.numel() * t.element_size() for store in (self.k, self.v) for t in store)
        self.flat_k = [t.view(-1, self.head_dim) for t in self.k]  # [slots * kv_heads * length, D]
        self.flat_v = [t.view(-1, self.head_dim) for t in self.v]

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

    def read_blocks(self, slot: int, first: int, end: int) -> list[Tensor]:
        """Blocks ``first..end-1`` of ``slot``, each ``[layers, 2, kv_heads, BLOCK, head_dim]`` (copies)."""
        start, stop = first * BLOCK, end * BLOCK
        joined = torch.stack(
            [
                torch.stack((k[slot, :, start:stop], v[slot, :, start:stop]))
                for k, v in zip(self.k, self.v, strict=True)
            ]
        )
        return [block.clone() for block in joined.split(BLOCK, dim=-2)]

    def write_blocks(self, slot: int, blocks: list[Tensor]) -> None:
        """Blocks ``0..len(blocks)-1`` of ``slot`` become ``blocks``."""
        joined = torch.cat(blocks, dim=-2)
        end = joined.shape[-2]
        for i, (k, v) in enumerate(zip(self.k, self.v, strict=True)):
            k[slot, :, :end] = joined[i, 0]
            v[slot, :, :end] = joined[i, 1]

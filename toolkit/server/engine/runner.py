"""A lean forward pass over a Llama-family model's weights, its keys and values in the blocks of a
:class:`~.kv_pool.KVPool`.

Each row of a forward names its sequence's block table; a decode step runs every running sequence at
once, each row attending to its own length. Works for the Llama, Mistral, Qwen2 (q/k/v
bias) and Qwen3 (q/k norms) module layout of transformers (q/k/v/o projections, gated MLP, RMS norms,
rotary embeddings). The base runner also holds the resident LoRA adapters
(:class:`~.adapter_stack.AdapterStack`): each row of a forward may use its own. Every tensor is made
on the weights' device.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor

from .adapter_stack import AdapterStack, LoraRows, Target
from .kv_pool import BLOCK, KVPool, KVShape, blocks_for

if TYPE_CHECKING:
    from transformers import PreTrainedModel

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

    @property
    def kv_shape(self) -> KVShape:
        return KVShape(self.n_layers, self.n_kv, self.head_dim, self.dtype)

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
        pool: KVPool,
        tables: list[list[int]],
        prompts: list[list[int]],
        starts: list[int],
        full: list[bool] | None = None,
        adapters: list[int] | None = None,
    ) -> tuple[Tensor, list[Tensor | None]]:
        """Run several prompts at once, ``prompts[i]`` at positions ``starts[i]..`` of the sequence
        whose blocks are ``tables[i]`` (holding those positions; the positions before are in the
        cache), right-padded to the longest, prompt ``i`` through adapter slot ``adapters[i]`` (0 or
        none: the weights alone).

        Returns float32 logits ``[k, V]`` of each prompt's last position, and where ``full[i]`` the
        final hidden states ``[len, hidden]`` of every position of prompt ``i`` (:meth:`logits` of a
        few at a time bounds the memory of a long prompt's logprobs).
        """
        dev = self.device
        lengths = [len(p) for p in prompts]
        k, t = len(prompts), max(lengths)
        view = _BlockView(tables, max(s + n for s, n in zip(starts, lengths, strict=True)), pool)
        ids = torch.tensor([p + [0] * (t - len(p)) for p in prompts], device=dev)
        # pad positions go no further than the window (their outputs are never read, nor written)
        positions = (torch.tensor(starts, device=dev)[:, None] + torch.arange(t, device=dev)[None]).clamp(
            max=min(view.width, self.cos.shape[0]) - 1
        )
        real = torch.tensor([i * t + j for i, n in enumerate(lengths) for j in range(n)], device=dev)
        slots = view.slots(
            torch.tensor([i for i, n in enumerate(lengths) for _ in range(n)], device=dev),
            torch.tensor([s + j for s, n in zip(starts, lengths, strict=True) for j in range(n)], device=dev),
        )
        mask = (torch.arange(view.width, device=dev)[None, None, :] <= positions[:, :, None])[:, None]

        def attend(i: int, q: Tensor, key: Tensor, value: Tensor) -> Tensor:
            keys, values = view.store_and_read(pool.layer(i), slots, key[real], value[real])
            out = F.scaled_dot_product_attention(
                q.view(k, t, self.n_heads, -1).transpose(1, 2),
                keys.transpose(0, 1),
                values.transpose(0, 1),
                attn_mask=mask,
                scale=self.scale,
                enable_gqa=self.n_kv != self.n_heads,
            )
            return out.transpose(1, 2).reshape(k * t, -1)

        embedded = F.embedding(ids.view(-1), self.embed.weight)
        h = self._layers(embedded, positions.view(-1), attend, self._lora_rows(adapters)).view(k, t, -1)
        ends = torch.tensor(lengths, device=dev) - 1
        last = self.logits(h[torch.arange(k, device=dev), ends])
        every: list[Tensor | None] = [h[i, : lengths[i]] if full and full[i] else None for i in range(k)]
        return last, every

    @torch.no_grad()
    def decode(
        self,
        pool: KVPool,
        tables: list[list[int]],
        tokens: list[int],
        positions: list[int],
        adapters: list[int] | None = None,
    ) -> Tensor:
        """One step for ``B`` sequences: token ``tokens[b]`` at ``positions[b]`` of the sequence whose
        blocks are ``tables[b]`` (holding that position, writable), through adapter slot
        ``adapters[b]``; returns float32 logits ``[B, V]``.

        Each layer writes the new keys/values with one ``index_put_``, reads every row's blocks with
        one ``index_select`` (``[kv_heads * B, width, head_dim]``, key/value head major) and attends
        with two batched matmuls (the query heads sharing a key/value head as one row group) under a
        mask built once per step: at one query per row this is cheaper on the CPU than
        ``scaled_dot_product_attention``.
        """
        dev = self.device
        view = _BlockView(tables, max(positions) + 1, pool)
        at = torch.tensor(positions, device=dev)
        slots = view.slots(torch.arange(len(tokens), device=dev), at)
        mask = self._no_mask if min(positions) == view.width - 1 else self._mask(at, view.width)
        ids = torch.tensor(tokens, device=dev)
        return self._decode(pool, view, slots, at, mask, ids, self._lora_rows(adapters))

    @torch.no_grad()
    def decode_fixed(
        self,
        pool: KVPool,
        tokens: Tensor,
        positions: Tensor,
        table: Tensor,
        real: Tensor,
        adapters: Tensor | None,
    ) -> Tensor:
        """:meth:`decode` over tensors whose shapes alone choose the kernels (no host value does),
        what a CUDA graph captures: ``tokens``/``positions [B]``, block tables ``[B, blocks]``
        padded with block 0, ``real [B]`` (0: a padding row, which stores zero keys/values at
        position 0 of block 0, so it stays zeros) and adapter slots ``[B]`` or ``[1]`` (one for all);
        views of one inputs tensor are fine."""
        view = _BlockView.of_table(table.contiguous(), pool)
        slots = view.slots(torch.arange(table.shape[0], device=self.device), positions)
        lora = None if adapters is None else LoraRows.gathered(adapters.contiguous())
        rows = real.to(self.dtype).view(-1, 1, 1)
        return self._decode(
            pool, view, slots, positions, self._mask(positions, view.width), tokens, lora, rows
        )

    def _mask(self, at: Tensor, width: int) -> Tensor:
        """``[kv_heads * B, 1, width]``: -inf past each row's position."""
        later = torch.arange(width, device=self.device)[None, :] > at[:, None]
        mask = torch.zeros(len(at), width, device=self.device, dtype=self.dtype)
        return mask.masked_fill_(later, -float("inf")).repeat(self.n_kv, 1)[:, None]

    def _decode(
        self,
        pool: KVPool,
        view: _BlockView,
        slots: Tensor,
        at: Tensor,
        mask: Tensor,
        ids: Tensor,
        lora: LoraRows | None,
        real: Tensor | None = None,
    ) -> Tensor:
        b, nkv, group, d = len(ids), self.n_kv, self.n_heads // self.n_kv, self.head_dim

        def attend(i: int, q: Tensor, key: Tensor, value: Tensor) -> Tensor:
            if real is not None:
                key, value = key * real, value * real
            keys, values = view.store_and_read(pool.layer(i), slots, key, value)
            queries = q.view(b, nkv, group, d).transpose(0, 1).reshape(nkv * b, group, d)
            scores = torch.baddbmm(mask, queries, keys.view(nkv * b, -1, d).transpose(1, 2), alpha=self.scale)
            out = torch.bmm(scores.softmax(-1), values.view(nkv * b, -1, d))
            return out.view(nkv, b, group * d).transpose(0, 1).reshape(b, -1)

        embedded = F.embedding(ids, self.embed.weight)
        return self.logits(self._layers(embedded, at, attend, lora))

    def logits(self, h: Tensor) -> Tensor:
        """float32 logits of the final hidden states ``h``."""
        return F.linear(self.norm(h), self.lm_head.weight, self.lm_head.bias).float()


class _BlockView:
    """The rows of one forward in the pool: each row's block table padded (with the zero block 0)
    to the blocks of the longest, ``width`` positions."""

    def __init__(self, tables: list[list[int]], positions: int, pool: KVPool) -> None:
        count = blocks_for(positions)
        padded = [t[:count] + [0] * (count - len(t[:count])) for t in tables]
        self._set(torch.tensor(padded, device=pool.device), pool)

    @classmethod
    def of_table(cls, table: Tensor, pool: KVPool) -> _BlockView:
        """The view of a padded table ``[rows, blocks]`` already on the device."""
        view = cls.__new__(cls)
        view._set(table, pool)
        return view

    def _set(self, table: Tensor, pool: KVPool) -> None:
        self.table = table  # [rows, blocks]
        self.rows, self.width = int(table.shape[0]), int(table.shape[1]) * BLOCK
        # the rows' blocks in a layer viewed as [2 * kv_heads * blocks, BLOCK * D], key/value and head
        # major: one index_select of whole 4 KB rows (several times faster than selecting on dim 2)
        planes = torch.arange(2 * pool.shape.kv_heads, device=pool.device)[:, None] * pool.num_blocks
        self.read_rows = (planes + table.view(1, -1)).view(-1)

    def slots(self, rows: Tensor, positions: Tensor) -> Tensor:
        """Where position ``positions[j]`` of row ``rows[j]`` lies among a layer's ``blocks * BLOCK``."""
        return self.table[rows, positions // BLOCK] * BLOCK + positions % BLOCK

    def store_and_read(
        self, layer: Tensor, slots: Tensor, key: Tensor, value: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Write ``key``/``value`` ``[n, kv_heads, D]`` at ``slots`` of ``layer``
        (``[2, kv_heads, blocks, BLOCK, D]``), then read the rows' blocks: keys and values
        ``[kv_heads, rows, width, D]``."""
        kv, d = layer.shape[1], layer.shape[-1]
        layer.view(2, kv, -1, d)[:, :, slots] = torch.stack((key, value)).transpose(1, 2)
        read = layer.view(-1, BLOCK * d).index_select(0, self.read_rows)
        read = read.view(2, kv, self.rows, self.width, d)
        return read[0], read[1]

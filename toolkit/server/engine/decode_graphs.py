"""The decode step at fixed shapes, replayed as CUDA graphs (as vLLM does).

At the sizes the engine serves on a GPU a decode step is bound by kernel launches, not by the GPU
(issue 35: one step of a 0.6B model took 14 to 19 ms of launches for 0.25 ms of weight reads). A
CUDA graph launches a captured step's kernels at once. A graph holds fixed shapes and addresses, so a
step runs at a bucket of shapes: the batch padded to the next of :func:`batch_buckets`, the block
tables to the next power of two blocks (:func:`width_blocks`), and the LoRA adapters of its rows in
one of three forms (none, one for every row, one per row: :class:`~.adapter_stack.LoraRows`). Each
bucket's inputs live in one static tensor (:class:`FixedStep`) that a step copies its values into;
each bucket is captured the first time it runs, into one memory pool shared by all, in this thread
alone (a training job may be using the GPU from another thread meanwhile).

What a graph cannot hold runs eagerly: prefill, beam search, a batch past the largest bucket. With
``capture`` off (``--enforce-eager``, and everywhere but CUDA), the same fixed-shape step runs
eagerly: the same kernels on the same shapes, so its tokens equal the graphs' bit for bit
(``bench/gpu.py`` checks it on a GPU; ``tests/server/engine/test_decode_graphs.py`` checks the fixed
step against :meth:`.Runner.decode` on the CPU).
"""

from __future__ import annotations

import logging
import time
import weakref
from dataclasses import dataclass, field

import torch
from torch import Tensor

from .kv_pool import KVPool, blocks_for
from .runner import Runner

log = logging.getLogger("toolkit.engine")
LoraForm = str
"""``"none"``, ``"one"`` (every row on one adapter slot) or ``"rows"`` (a slot per row)."""


def batch_buckets(max_num_seqs: int) -> list[int]:
    """The batch sizes a step is padded to: 1, 2, 4, then every multiple of 8, up to the first that
    holds ``max_num_seqs`` rows."""
    top = max(1, max_num_seqs)
    sizes = [1, 2, 4, *range(8, top + 8, 8)]
    return [b for b in sizes if b < top] + [next(b for b in sizes if b >= top)]


def width_blocks(blocks: int, max_blocks: int) -> int:
    """Blocks a step's tables are padded to: the next power of two, at most ``max_blocks``."""
    width = 1
    while width < blocks:
        width *= 2
    return min(width, max(max_blocks, blocks))


def lora_form(adapters: list[int] | None) -> LoraForm:
    """How a step's rows use adapters: none, one slot for every row, or a slot per row."""
    if not adapters or not any(adapters):
        return "none"
    return "one" if len(set(adapters)) == 1 else "rows"


@dataclass
class FixedStep:
    """The static inputs of one bucket (``B`` rows, ``W`` blocks) in one tensor ``[B, 4 + W]``, a
    row each: its last token, that token's position, 1 (0 for a padding row), its adapter slot,
    then its block table padded with block 0. A step's values go in with one copy from ``host``
    (pinned on CUDA, so the copy does not wait on the device); the step, and its graph, read the
    columns. Also the output of the last run and the bucket's CUDA graph once captured."""

    inputs: Tensor
    host: Tensor
    form: LoraForm
    logits: Tensor | None = None  # [B, V] float32, written by each run
    graph: torch.cuda.CUDAGraph | None = field(default=None, repr=False)

    @classmethod
    def empty(cls, rows: int, blocks: int, form: LoraForm, device: torch.device) -> FixedStep:
        inputs = torch.zeros(rows, 4 + blocks, dtype=torch.long, device=device)
        host = torch.zeros(rows, 4 + blocks, dtype=torch.long, pin_memory=device.type == "cuda")
        return cls(inputs, host, form)

    def fill(
        self, tables: list[list[int]], tokens: list[int], positions: list[int], adapters: list[int]
    ) -> None:
        """Copy one step's values in, the rows past them padding (token 0 at position 0, block 0)."""
        width = self.inputs.shape[1] - 4
        values = [
            [t, p, 1, a, *b[:width], *[0] * (width - len(b[:width]))]
            for t, p, a, b in zip(tokens, positions, adapters, tables, strict=True)
        ]
        self.host.zero_()
        self.host[: len(values)] = torch.tensor(values, dtype=torch.long)
        self.inputs.copy_(self.host, non_blocking=True)

    def run(self, runner: Runner, pool: KVPool) -> Tensor:
        """The step over the inputs' columns (:meth:`.Runner.decode_fixed`)."""
        i = self.inputs
        adapters = {"none": None, "one": i[:1, 3], "rows": i[:, 3]}[self.form]
        return runner.decode_fixed(pool, i[:, 0], i[:, 1], i[:, 4:], i[:, 2], adapters)


@dataclass
class GraphStats:
    """What the captured graphs cost: how many, the seconds capturing took, and the device memory
    reserved while capturing (the graphs' pool and the warm-up runs)."""

    captured: int = 0
    capture_s: float = 0.0
    reserved_bytes: int = 0


class DecodeGraphs:
    """Fixed-shape decode steps of one runner over one KV pool, captured as CUDA graphs when
    ``capture`` (the runner must be on a CUDA device), else run eagerly at the same shapes."""

    def __init__(self, runner: Runner, pool: KVPool, max_num_seqs: int, capture: bool) -> None:
        if capture and runner.device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device, not {runner.device}")
        # weakly: the engine keeps these per runner in a WeakKeyDictionary, and an unloaded runner's
        # weights must go at once, with its graphs
        self._runner, self.pool, self.capture = weakref.ref(runner), pool, capture
        self.buckets = batch_buckets(max_num_seqs)
        self.max_blocks = blocks_for(int(runner.cos.shape[0]))
        self.stats = GraphStats()
        self._steps: dict[tuple[int, int, LoraForm], FixedStep] = {}
        self._over: tuple[int, int] | None = None  # the generations of storage and adapters captured over
        self._mempool = torch.cuda.graph_pool_handle() if capture else None
        self._outputs: dict[int, Tensor] = {}  # the graphs' logits, shared by a batch size's buckets

    @property
    def runner(self) -> Runner:
        runner = self._runner()
        assert runner is not None, "the runner of these graphs was unloaded"
        return runner

    @property
    def shapes(self) -> list[tuple[int, int, LoraForm]]:
        """The buckets set up since the storage and adapters were last reallocated: (rows, blocks,
        adapters' form), in the order first run."""
        return list(self._steps)

    def bucket(self, rows: int) -> int | None:
        """The batch size ``rows`` rows run at; None past the largest (they run eagerly)."""
        return next((b for b in self.buckets if b >= rows), None)

    def step(
        self, tables: list[list[int]], tokens: list[int], positions: list[int], adapters: list[int] | None
    ) -> Tensor | None:
        """:meth:`.Runner.decode`'s logits ``[B, V]`` for these rows, at their bucket (a view of the
        bucket's output, overwritten by its next run); None when no bucket holds them."""
        rows = self.bucket(len(tokens))
        if rows is None:
            return None
        slots = adapters or [0] * len(tokens)
        form = lora_form(slots)
        if form != "none" and self.runner.adapters is None:
            raise ValueError("these weights serve no LoRA adapters")
        self._drop_stale()
        key = (rows, width_blocks(blocks_for(max(positions) + 1), self.max_blocks), form)
        fixed = self._steps.get(key)
        if fixed is None:
            fixed = self._steps[key] = FixedStep.empty(*key, self.runner.device)
        fixed.fill(tables, tokens, positions, slots)
        if fixed.graph is not None:
            fixed.graph.replay()
        elif self.capture:
            self._capture(fixed)
        else:
            fixed.logits = self._run(fixed)
        assert fixed.logits is not None
        return fixed.logits[: len(tokens)]

    def _run(self, fixed: FixedStep) -> Tensor:
        return fixed.run(self.runner, self.pool)

    def _capture(self, fixed: FixedStep) -> None:
        """Capture the step (:meth:`_record`); if that fails, the runner's steps run eagerly at
        their fixed shapes from then on (logged, and reported by health), and this one too."""
        try:
            self._record(fixed)
        except Exception:
            log.exception("capturing a CUDA graph of the decode step failed; decoding eagerly from now on")
            self.capture, self._steps = False, {}
            fixed.graph, fixed.logits = None, self._run(fixed)

    def _record(self, fixed: FixedStep) -> None:
        """Warm the step up on a side stream (a step run again on the same inputs writes the same
        keys/values), capture it, then replay it once for this step's logits."""
        started, before = time.perf_counter(), torch.cuda.memory_reserved(self.runner.device)
        side = torch.cuda.Stream(self.runner.device)
        side.wait_stream(torch.cuda.current_stream(self.runner.device))
        with torch.cuda.stream(side):
            for _ in range(2):
                self._run(fixed)
        torch.cuda.current_stream(self.runner.device).wait_stream(side)
        rows = fixed.inputs.shape[0]
        out = self._outputs.get(rows)
        if out is None:  # one output per batch size, outside the graphs' pool: [B, V] each
            out = self._outputs[rows] = torch.empty(
                rows, self.runner.vocab_size, device=self.runner.device, dtype=torch.float32
            )
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._mempool, capture_error_mode="thread_local"):
            out.copy_(self._run(fixed))
        fixed.logits = out
        graph.replay()
        fixed.graph = graph
        self.stats.captured += 1
        self.stats.capture_s += time.perf_counter() - started
        self.stats.reserved_bytes += torch.cuda.memory_reserved(self.runner.device) - before

    def _drop_stale(self) -> None:
        """Forget every bucket when the pool's storage or the adapters' tensors were reallocated:
        their graphs read the old addresses."""
        adapters = self.runner.adapters
        over = (self.pool.generation, adapters.generation if adapters else 0)
        if over != self._over:
            self._steps.clear()
            self._over = over


class Decoder:
    """The engine's decode steps over its KV pool: with ``fixed``, each runner's rows at their bucket
    (:class:`DecodeGraphs`, captured as CUDA graphs with ``capture``), else as they come
    (:meth:`.Runner.decode`, the CPU's default: padding costs there what it saves on a GPU)."""

    def __init__(self, pool: KVPool, max_num_seqs: int, fixed: bool, capture: bool) -> None:
        self.pool, self.max_num_seqs, self.fixed, self.capture = pool, max_num_seqs, fixed, capture
        self._graphs: weakref.WeakKeyDictionary[Runner, DecodeGraphs] = weakref.WeakKeyDictionary()

    def decode(
        self,
        runner: Runner,
        tables: list[list[int]],
        tokens: list[int],
        positions: list[int],
        adapters: list[int] | None,
    ) -> Tensor:
        """Float32 logits ``[B, V]`` of one step (:meth:`.Runner.decode`'s arguments)."""
        if self.fixed:
            graphs = self._graphs.get(runner)
            if graphs is None:
                graphs = self._graphs[runner] = DecodeGraphs(
                    runner, self.pool, self.max_num_seqs, self.capture
                )
            logits = graphs.step(tables, tokens, positions, adapters)
            if logits is not None:
                return logits
        return runner.decode(self.pool, tables, tokens, positions, adapters)

    @property
    def shapes(self) -> list[tuple[int, int, LoraForm]]:
        """Every loaded runner's buckets (:attr:`DecodeGraphs.shapes`)."""
        return [shape for graphs in self._graphs.values() for shape in graphs.shapes]

    @property
    def replaying(self) -> bool:
        """Whether decode steps replay CUDA graphs (on, and no capture has failed)."""
        return self.capture and all(g.capture for g in self._graphs.values())

    @property
    def stats(self) -> GraphStats:
        """The graphs of the runners loaded now, together."""
        every = [g.stats for g in self._graphs.values()]
        return GraphStats(
            sum(s.captured for s in every),
            sum(s.capture_s for s in every),
            sum(s.reserved_bytes for s in every),
        )

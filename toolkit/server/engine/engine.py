"""The engine: one scheduler thread doing continuous batching of every running request.

Requests come in from the event loop (:meth:`Engine.submit`) and wait in a queue (first come, or by
``priority`` when the server schedules by priority). Each iteration admits waiting requests while
there is room (one batched prefill per set of weights, reusing cached prefix blocks), then runs one
decode step per set of weights over all its sequences at once. Results go back to the event loop as
events.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from .beam import BeamJob, BeamParams
from .codec import Codec, IncrementalText
from .events import Delta, Event, Failed, Finished, PromptLogprob, Started, TopLogprobs
from .model import BaseModelSpec, load_model
from .prefix_cache import BLOCK, PrefixCache, block_keys
from .runner import Runner, SlotCache
from .sampling import SamplingParams, StepResult, sample
from .structured import Compiler, GuidedRow

log = logging.getLogger("toolkit.engine")
TORCH_THREADS = 2
LOADED_WEIGHTS = 3


@dataclass(frozen=True)
class Weights:
    """Which weights serve a request: the base model's, or a checkpoint folder's."""

    key: str  # "base" or a checkpoint id
    folder: Path | None = None


@dataclass
class Request:
    """One chat completion in engine terms (``n`` sequences sharing one prompt)."""

    id: str
    weights: Weights
    prompt_ids: list[int]
    params: list[SamplingParams]  # one per choice
    guides: list[GuidedRow | None]
    stream: bool
    priority: int = 0
    cache_scope: str | None = None  # None: no prefix-cache sharing
    prompt_logprobs: int | None = None
    beam: BeamParams | None = None
    arrival: float = field(default_factory=time.monotonic)
    sink: Callable[[Event], None] = lambda event: None
    cancelled: bool = False

    def emit(self, event: Event) -> None:
        if not self.cancelled:
            self.sink(event)


class Sequence:
    """One choice being generated; satisfies :class:`~.sampling.RowState`."""

    def __init__(self, req: Request, index: int, slot: int, codec: Codec, eos: list[int]) -> None:
        p = req.params[index]
        self.req, self.index, self.slot, self.params = req, index, slot, p
        self.prompt_ids = req.prompt_ids
        self.output_ids: list[int] = []
        self.generator: torch.Generator | None = None
        if p.seed is not None:
            self.generator = torch.Generator().manual_seed(p.seed % 2**64)
        self.guide = req.guides[index]
        self.eos = frozenset() if p.ignore_eos else frozenset(eos[:1])
        self.extra_eos = frozenset() if p.ignore_eos else frozenset(eos[1:])
        self.stop_ids = self.eos | self.extra_eos | frozenset(p.stop_token_ids)
        self.text_state: IncrementalText | None = None
        if req.stream or p.stop:
            self.text_state = IncrementalText(codec, p.skip_special_tokens, p.spaces_between_special_tokens)
        self.text = ""
        self.sent_chars = 0
        self.sent_tokens = 0
        self.sent_logprobs = 0
        self.logprobs: list[tuple[float, TopLogprobs]] | None = [] if p.logprobs is not None else None
        self.finish_reason: str | None = None
        self.stop_reason: int | str | None = None

    @property
    def grammar_mask(self) -> Tensor | None:
        return self.guide.mask() if self.guide is not None else None

    @property
    def cached_len(self) -> int:
        """Tokens whose keys/values are in the cache (all but the last sampled one)."""
        return len(self.prompt_ids) + max(len(self.output_ids) - 1, 0)


class Batch:
    """The running sequences of one set of weights: sequence ``i`` lives in cache slot ``i``."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self.cache: SlotCache = runner.new_cache()
        self.seqs: list[Sequence] = []

    def remove(self, seq: Sequence) -> None:
        last = self.seqs.pop()
        if last is not seq:
            self.cache.copy_slot(last.slot, seq.slot, min(last.cached_len + 1, self.cache.length))
            last.slot = seq.slot
            self.seqs[seq.slot] = last


class Engine:
    """Serves one base model and its checkpoints."""

    def __init__(
        self,
        spec: BaseModelSpec,
        codec: Codec,
        *,
        max_num_seqs: int = 32,
        priority_scheduling: bool = False,
    ) -> None:
        self.spec, self.codec = spec, codec
        self.device = torch.device("cpu")  # where the model runs (the system check reports it)
        self.compiler = Compiler(codec, spec.eos_token_ids[0])
        self.max_num_seqs = max_num_seqs
        self.priority_scheduling = priority_scheduling
        self.prefix_cache = PrefixCache()
        self._runners: OrderedDict[str, Runner] = OrderedDict()
        self._batches: dict[str, Batch] = {}
        self._beams: list[BeamJob] = []
        self._waiting: list[Request] = []
        self._inbox: list[Request] = []
        self._wake = threading.Condition()
        self._stopping = False
        self._fallback = torch.Generator().manual_seed(int(time.time_ns() % 2**63))
        self._thread = threading.Thread(target=self._loop, name="toolkit-engine", daemon=True)
        torch.set_num_threads(TORCH_THREADS)
        self.vocab_size = self.runner(Weights("base")).vocab_size

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def for_model(
        cls, spec: BaseModelSpec, *, max_num_seqs: int = 32, priority_scheduling: bool = False
    ) -> Engine:
        return cls(
            spec,
            Codec.from_folder(spec.folder),
            max_num_seqs=max_num_seqs,
            priority_scheduling=priority_scheduling,
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify()
        self._thread.join(timeout=10)
        self.compiler.close()

    def runner(self, weights: Weights) -> Runner:
        """The runner of ``weights``, loading them on first use (LRU of a few)."""
        runner = self._runners.get(weights.key)
        if runner is None:
            model = load_model(self.spec, weights.folder)
            runner = Runner(model, self.spec.max_model_len)
            self._runners[weights.key] = runner
            idle = [k for k in self._runners if k not in self._batches and k not in ("base", weights.key)]
            for key in idle[: max(0, len(self._runners) - LOADED_WEIGHTS)]:
                del self._runners[key]
        self._runners.move_to_end(weights.key)
        return runner

    # ------------------------------------------------------------------ event-loop side

    def submit(self, req: Request) -> asyncio.Queue[Event]:
        """Queue ``req``; its events arrive on the returned queue of the calling event loop."""
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[Event] = asyncio.Queue()

        def sink(event: Event) -> None:
            loop.call_soon_threadsafe(events.put_nowait, event)

        req.sink = sink
        with self._wake:
            self._inbox.append(req)
            self._wake.notify()
        return events

    def cancel(self, req: Request) -> None:
        req.cancelled = True

    # ------------------------------------------------------------------ scheduler thread

    def _running(self) -> int:
        return sum(len(b.seqs) for b in self._batches.values()) + sum(j.width for j in self._beams)

    def _loop(self) -> None:
        torch.set_num_threads(TORCH_THREADS)
        while True:
            with self._wake:
                while not self._stopping and not self._inbox and not self._waiting and not self._running():
                    self._wake.wait()
                if self._stopping:
                    return
                self._waiting.extend(self._inbox)
                self._inbox.clear()
            try:
                self._iterate()
            except Exception as exc:  # never let one bad step kill the engine
                log.exception("engine step failed")
                self._fail_all(exc)

    def _iterate(self) -> None:
        self._waiting = [r for r in self._waiting if not r.cancelled]
        if self.priority_scheduling:
            self._waiting.sort(key=lambda r: (r.priority, r.arrival))
        running = self._running()
        groups: dict[str, list[Request]] = {}
        while self._waiting:
            req = self._waiting[0]
            need = req.beam.width if req.beam else len(req.params)
            if running and running + need > self.max_num_seqs:
                break
            running += need
            groups.setdefault("beam" if req.beam else req.weights.key, []).append(self._waiting.pop(0))
        for key, reqs in groups.items():
            try:
                if key == "beam":
                    self._start_beams(reqs)
                else:
                    self._admit(reqs)
            except Exception as exc:
                log.exception("prefill failed")
                failed = {id(r) for r in reqs}
                for batch in self._batches.values():
                    for seq in [s for s in batch.seqs if id(s.req) in failed]:
                        batch.remove(seq)
                for req in reqs:
                    req.emit(Failed(exc))
        for key, batch in list(self._batches.items()):
            for seq in [s for s in batch.seqs if s.req.cancelled]:
                batch.remove(seq)
            if batch.seqs:
                self._decode(batch)
            if not batch.seqs:
                del self._batches[key]
        for job in list(self._beams):
            if job.req.cancelled or job.step():
                self._beams.remove(job)

    def _fail_all(self, exc: BaseException) -> None:
        for batch in self._batches.values():
            for req in {id(s.req): s.req for s in batch.seqs}.values():
                req.emit(Failed(exc))
        for job in self._beams:
            job.req.emit(Failed(exc))
        self._batches.clear()
        self._beams.clear()

    def _start_beams(self, reqs: list[Request]) -> None:
        for req in reqs:
            job = BeamJob(
                req, self.runner(req.weights), self.codec, self.spec.eos_token_ids, self.spec.max_model_len
            )
            req.emit(Started(0, None))
            self._beams.append(job)

    def _admit(self, reqs: list[Request]) -> None:
        """Prefill requests sharing one set of weights in one forward pass (cached prefix blocks
        reused), then sample each sequence's first token."""
        runner = self.runner(reqs[0].weights)
        batch = self._batches.get(reqs[0].weights.key) or Batch(runner)
        self._batches[reqs[0].weights.key] = batch
        eos = self.spec.eos_token_ids
        parents: list[Sequence] = []
        starts: list[int] = []
        keys: list[list[str]] = []
        for req in reqs:
            prompt, slot = req.prompt_ids, len(batch.seqs)
            batch.cache.reserve(slot + len(req.params), len(prompt))
            scope = f"{req.weights.key}|{req.cache_scope}"
            keys.append(block_keys(scope, prompt[:-1]) if req.cache_scope is not None else [])
            blocks = self.prefix_cache.lookup(keys[-1]) if req.prompt_logprobs is None else []
            for i, block in enumerate(blocks):
                batch.cache.write_block(slot, i * BLOCK, block)
            starts.append(len(blocks) * BLOCK)
            seqs = [Sequence(req, index, slot + index, self.codec, eos) for index in range(len(req.params))]
            batch.seqs.extend(seqs)
            parents.append(seqs[0])
        last, full = runner.prefill(
            batch.cache,
            [p.slot for p in parents],
            [p.prompt_ids[start:] for p, start in zip(parents, starts, strict=True)],
            starts,
            [r.prompt_logprobs is not None for r in reqs],
        )
        rows: list[Sequence] = []
        parent_rows: list[int] = []
        for i, (req, parent) in enumerate(zip(reqs, parents, strict=True)):
            for b, key in enumerate(keys[i]):
                if key not in self.prefix_cache:
                    self.prefix_cache.store(
                        key, batch.cache.read_block(parent.slot, b * BLOCK, (b + 1) * BLOCK)
                    )
            for index in range(1, len(req.params)):
                batch.cache.copy_slot(parent.slot, parent.slot + index, len(req.prompt_ids))
            logits = full[i]
            prompt_lp = (
                _prompt_logprobs(logits, req.prompt_ids, req.prompt_logprobs or 0)
                if logits is not None
                else None
            )
            req.emit(Started(starts[i], prompt_lp))
            rows.extend(batch.seqs[parent.slot : parent.slot + len(req.params)])
            parent_rows.extend([i] * len(req.params))
        step = sample(last[torch.tensor(parent_rows)], rows, self._fallback)
        self._advance(batch, rows, step)

    def _decode(self, batch: Batch) -> None:
        seqs = batch.seqs
        tokens = torch.tensor([s.output_ids[-1] for s in seqs])
        positions = torch.tensor([s.cached_len for s in seqs])
        logits = batch.runner.decode(batch.cache, tokens, positions)
        self._advance(batch, list(seqs), sample(logits, seqs, self._fallback))

    def _advance(self, batch: Batch, seqs: list[Sequence], step: StepResult) -> None:
        for i, seq in enumerate(seqs):
            token = step.tokens[i]
            if step.logprobs is not None and seq.logprobs is not None and step.top is not None:
                seq.logprobs.append((step.logprobs[i], step.top[i]))
            if self._append(seq, token):
                batch.remove(seq)
                self._finish(seq)
            elif seq.req.stream:
                self._stream(seq)

    def _append(self, seq: Sequence, token: int) -> bool:
        """Add a sampled token; True if the sequence is now finished."""
        p = seq.params
        seq.output_ids.append(token)
        if seq.guide is not None:
            seq.guide.advance(token)
        n = len(seq.output_ids)
        stopped_by_token = False
        if n >= p.min_tokens:
            if token in seq.eos:
                seq.finish_reason, stopped_by_token = "stop", True
            elif token in seq.extra_eos or token in p.stop_token_ids:
                seq.finish_reason, seq.stop_reason, stopped_by_token = "stop", token, True
        if seq.text_state is not None and (not stopped_by_token or p.include_stop_str_in_output):
            new_text = seq.text_state.push(token)
            seq.text += new_text
            if p.stop and new_text and n > p.min_tokens and not stopped_by_token:
                self._check_stop_strings(seq, len(new_text))
        if seq.finish_reason is None and (
            n >= p.max_tokens or len(seq.prompt_ids) + n >= self.spec.max_model_len
        ):
            seq.finish_reason = "length"
        return seq.finish_reason is not None

    def _check_stop_strings(self, seq: Sequence, new_chars: int) -> None:
        """Finish at the stop string completed by the newest text (earliest end, then list order)."""
        p = seq.params
        window_start = max(0, len(seq.text) - new_chars - max(len(s) for s in p.stop) + 1)
        found = [
            (at + len(stop), order, at, stop)
            for order, stop in enumerate(p.stop)
            if (at := seq.text.find(stop, window_start)) >= 0
        ]
        best = min(found) if found else None
        if best is not None:
            _, _, at, stop = best
            seq.text = seq.text[: at + len(stop)] if p.include_stop_str_in_output else seq.text[:at]
            seq.finish_reason, seq.stop_reason = "stop", stop

    def _stream(self, seq: Sequence, final: bool = False) -> Delta | None:
        """Send the new tokens and text (text held back while a stop string may still match)."""
        hold = 0 if final or not seq.params.stop else max(len(s) for s in seq.params.stop) - 1
        upto = max(seq.sent_chars, len(seq.text) - hold)
        delta = Delta(
            seq.index,
            seq.output_ids[seq.sent_tokens :],
            seq.text[seq.sent_chars : upto],
            seq.logprobs[seq.sent_logprobs :] if seq.logprobs is not None else [],
        )
        seq.sent_chars, seq.sent_tokens = upto, len(seq.output_ids)
        seq.sent_logprobs = len(seq.logprobs) if seq.logprobs is not None else 0
        if final:
            return delta
        seq.req.emit(delta)
        return None

    def _finish(self, seq: Sequence) -> None:
        p = seq.params
        if seq.text_state is not None:
            if seq.stop_reason is None or not isinstance(seq.stop_reason, str):
                seq.text += seq.text_state.flush()
        else:
            ids = seq.output_ids
            if seq.finish_reason == "stop" and not p.include_stop_str_in_output:
                ids = ids[:-1]
            seq.text = self.codec.decode(ids, p.skip_special_tokens, p.spaces_between_special_tokens)
        tail = self._stream(seq, final=True) if seq.req.stream else None
        seq.req.emit(
            Finished(
                seq.index,
                seq.output_ids,
                seq.text,
                seq.logprobs,
                seq.finish_reason or "stop",
                seq.stop_reason,
                tail,
            )
        )


def _prompt_logprobs(logits: Tensor, prompt: list[int], k: int) -> list[PromptLogprob]:
    """Log-probability, rank and top-``k`` of each prompt token given the tokens before it."""
    logprobs = logits[:-1].log_softmax(-1)
    targets = torch.tensor(prompt[1:])
    chosen = logprobs.gather(-1, targets[:, None])[:, 0]
    ranks = (logprobs > chosen[:, None]).sum(-1) + 1
    top_v, top_i = logprobs.topk(min(k, logprobs.shape[-1]), dim=-1) if k else (None, None)
    out = []
    for pos, token in enumerate(prompt[1:]):
        top = (
            list(zip(top_i[pos].tolist(), top_v[pos].tolist(), strict=True))
            if top_i is not None and top_v is not None
            else []
        )
        out.append(PromptLogprob(token, float(chosen[pos]), int(ranks[pos]), top))
    return out

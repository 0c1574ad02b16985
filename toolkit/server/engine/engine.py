"""The engine of one base model: one scheduler thread doing continuous batching of every running
request.

Requests come in from the event loop (:meth:`Engine.submit`) and wait in a queue (first come, or by
``priority`` when the server schedules by priority). Each iteration admits waiting requests while
there is room (one batched prefill per runner, reusing cached prefix blocks), then runs one decode
step per runner over all its sequences at once: the base model and every LoRA adapter share the base
runner's step, each row through its own adapter; a whole-weight checkpoint has a runner of its own.
Weights load on first use (:mod:`.weights`). On a CUDA device sampling runs there, each seeded
request drawing from a device generator of its own (``TOOLKIT_DEVICE_SAMPLING`` unset or ``device``);
``=1`` samples there with the numbers of CPU generators, ``=0`` on the CPU, as the CPU always does
(:mod:`.sampling`, :mod:`.resources`). Results go back to the event loop as events (:mod:`.output`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from torch import Tensor

from .admission import Admission, Admitted
from .beam import BeamJob
from .codec import Codec
from .decode_graphs import Decoder
from .device import Placement, pick_placement
from .events import Event, Failed, Started
from .kv_budget import fit_context, kv_pool_for
from .kv_room import Preemption, full_message, resume_blocks
from .model import BaseModelSpec
from .output import append, finish, prompt_logprobs, stream
from .prefill import plan, prefill
from .request import Request
from .resources import LORA_BYTES, SERIAL_WORK, device_random, device_sampling, torch_threads, trim_heap
from .runner import Runner
from .running import Batch, Sequence
from .sampling import DeviceRandom, StepResult, sample
from .status import EngineStatus
from .structured import Compiler
from .weights import Route, WeightsPool

log = logging.getLogger("toolkit.engine")
ENGINE_THREADS = torch_threads()
NOISE_THREADS = 8
"""Most threads drawing the random numbers of seeded rows at once, with device sampling on."""
SPARE_IDLE_S = 5.0
"""Seconds the engine stays idle before it frees the KV pool's memory (and the prefixes it caches), on
the CPU only: a new pool there is fresh pages that the kernel faults in and zeroes, so it stays while
requests keep coming, and goes soon after, as an RL loop's training starts (CUDA's caching allocator
reuses freed memory by itself, for the trainer too)."""


class Engine:
    """Serves one base model, its LoRA adapters and its whole-weight checkpoints, on :attr:`device`.

    Threads: the scheduler thread sets torch's intra-op thread count to ``threads`` when it starts
    (:meth:`start`), never at import or construction. torch keeps that count per calling thread (and
    takes the latest one as the default of threads that have not run an op yet), so the training
    job worker, which sets its own count when a job starts, is unaffected by the engine's choice.
    The default, ``ENGINE_THREADS`` (``$TOOLKIT_TORCH_THREADS``, else 2; see :mod:`.resources`),
    suits the tiny built-in model (more threads only add overhead) and the 2-core machines the
    toolkit targets: while a job trains and the engine decodes, each keeps two threads and the OS
    shares the cores, rather than one starving the other.
    torch's inter-op pool is left alone (nothing here forks ops).
    """

    def __init__(
        self,
        spec: BaseModelSpec,
        codec: Codec,
        *,
        max_num_seqs: int = 32,
        priority_scheduling: bool = False,
        threads: int = ENGINE_THREADS,
        placement: Placement | None = None,
        lora_bytes: int = LORA_BYTES,
        enable_prefix_caching: bool = True,
        sample_on_device: bool | None = None,
        random_on_device: bool | None = None,
        kv_cache_bytes: int | None = None,
        max_model_len: int | None = None,
        enforce_eager: bool = False,
        fixed_shapes: bool | None = None,
    ) -> None:
        spec = dataclasses.replace(spec)  # its max_model_len is fitted to the KV cache below
        self.spec, self.codec = spec, codec
        self.threads = threads
        self._current_threads = 0
        self.prompt_tokens = self.prefilled_tokens = 0
        self.placement = placement or pick_placement("cpu")
        self.compiler = Compiler(codec, spec.eos_token_ids[0])
        self.max_num_seqs = max_num_seqs
        self.priority_scheduling = priority_scheduling
        self.vocab_size = spec.vocab_size
        self.kv = kv_pool_for(spec, self.placement, kv_cache_bytes)
        fit_context(spec, self.kv, max_model_len, explicit_budget=kv_cache_bytes is not None)
        # decode steps at fixed shapes (None: on CUDA), replayed as CUDA graphs unless enforce_eager
        cuda = self.placement.device.type == "cuda"
        fixed = cuda if fixed_shapes is None else fixed_shapes
        self.decoder = Decoder(self.kv, max_num_seqs, fixed, capture=fixed and cuda and not enforce_eager)
        self.preemption = Preemption(self.kv)
        self.weights = WeightsPool(spec, self.placement, lora_bytes)
        self.admission = Admission(self.weights, self.kv, codec, spec.eos_token_ids, enable_prefix_caching)
        self.status = EngineStatus(False, str(self.placement.device), _dtype_name(self.placement.dtype))
        self._batches = self.admission.batches
        self._beams: list[BeamJob] = []
        self._ending: list[Sequence | BeamJob] = []  # out of the batches, their Finished not yet sent
        self._waiting: list[Request] = []
        self._inbox: list[Request] = []
        self._wake = threading.Condition()
        self._stopping = False
        self._live: dict[int, Request] = {}  # submitted, not yet released: what the watchdog reads
        self._live_lock = threading.Lock()
        self.stepped_at = time.monotonic()  # the latest step that sampled tokens (or the start)
        # test-only: while this file exists the scheduler does nothing (a stall made on purpose)
        self._pause_file = os.environ.get("TOOLKIT_ENGINE_PAUSE_FILE")
        self._fallback = torch.Generator().manual_seed(int(time.time_ns() % 2**63))
        # device sampling (None: $TOOLKIT_DEVICE_SAMPLING, or on by default on CUDA); seeded rows draw in
        # threads of their own, or on the device with random_on_device (which implies sampling there)
        on_device = device_random(cuda) if random_on_device is None else random_on_device
        self._device_random = DeviceRandom(self.placement.device) if on_device else None
        self.sample_on_device = on_device or (
            device_sampling(cuda) if sample_on_device is None else sample_on_device
        )
        threads = min(NOISE_THREADS, os.cpu_count() or 1)
        use_pool = self.sample_on_device and not on_device
        self._noise_pool = ThreadPoolExecutor(threads, "toolkit-noise") if use_pool else None
        self._thread = threading.Thread(target=self._loop, name="toolkit-engine", daemon=True)
        self._refresh_status()

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def for_model(cls, spec: BaseModelSpec, **options: Any) -> Engine:
        """An engine for ``spec`` with the codec of its folder; ``options``: the constructor's."""
        return cls(spec, Codec.from_folder(spec.folder), **options)

    @property
    def device(self) -> torch.device:
        """The device the weights are (or will be) on."""
        return self.placement.device

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify()
        self._thread.join(timeout=10)
        self.compiler.close()
        if self._noise_pool is not None:
            self._noise_pool.shutdown(wait=False)

    # ------------------------------------------------------------------ event-loop side

    def submit(self, req: Request) -> asyncio.Queue[Event]:
        """Queue ``req``; its events arrive on the returned queue of the calling event loop. The
        caller hands it back with :meth:`release` when it stops listening."""
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[Event] = asyncio.Queue()

        def sink(event: Event) -> None:
            try:
                loop.call_soon_threadsafe(events.put_nowait, event)
            except RuntimeError:  # that loop has closed: nobody listens any more
                req.cancelled = True

        req.sink = sink
        with self._live_lock:
            self._live[id(req)] = req
        with self._wake:
            self._inbox.append(req)
            self._wake.notify()
        return events

    def release(self, req: Request, *, cancel: bool) -> None:
        """The caller of :meth:`submit` stopped listening (``cancel``: before the end, so the engine
        drops the request and frees its slots)."""
        if cancel:
            req.cancelled = True
        with self._live_lock:
            self._live.pop(id(req), None)

    def live(self) -> list[Request]:
        """The requests submitted and not yet released (for the server's watchdog)."""
        with self._live_lock:
            return list(self._live.values())

    def progressed_at(self, req: Request) -> float:
        """When ``req`` last made progress; a request not yet started moves while the queue does
        (the engine sampling tokens for others), so it stalls only with its engine."""
        own = req.progressed_at
        return own if req.emitted else max(own, self.stepped_at)

    def describe(self) -> list[str]:
        """The scheduler's state in words, one line per request it holds (read from another thread:
        a best-effort snapshot, for the watchdog's warning)."""
        now = time.monotonic()
        place: dict[int, str] = {}
        for req in list(self._inbox):
            place[id(req)] = "inbox"
        for req in list(self._waiting):
            place[id(req)] = "waiting"
        for key, batch in list(self._batches.items()):
            for seq in list(batch.seqs):
                place[id(seq.req)] = f"running on {key}"
        for job in list(self._beams):
            place[id(job.req)] = "beam search"
        for seq in list(self.preemption.waiting):
            place[id(seq.req)] = "preempted"
        lines = [
            f"engine {self.spec.name}: thread alive {self._thread.is_alive()}, inbox {len(self._inbox)}, "
            f"waiting {len(self._waiting)}, running {self._running()}, batches {list(self._batches)}, "
            f"preempted {len(self.preemption.waiting)}, "
            f"KV blocks in use {self.kv.in_use} of {self.kv.num_blocks - 1}, "
            f"last step {_ago(now, self.stepped_at)}, status {self.status}"
        ]
        for req in self.live():
            lines.append(
                f"  request {req.id} ({req.weights.key}): {place.get(id(req), 'not held by the engine')}, "
                f"age {now - req.arrival:.1f} s, last token {_ago(now, req.stepped_at)}, "
                f"events sent {req.emitted} (last {_ago(now, req.emitted_at)}), "
                f"taken {req.received} (last {_ago(now, req.received_at)}), cancelled {req.cancelled}"
            )
        return lines

    # ------------------------------------------------------------------ scheduler thread

    def _held(self) -> int:
        return self._running() + len(self.preemption.waiting)

    def _running(self) -> int:
        """Sequences decoding (preempted ones aside)."""
        return sum(len(b.seqs) for b in self._batches.values()) + sum(j.width for j in self._beams)

    def _loop(self) -> None:
        torch.set_num_threads(self.threads)
        self._current_threads = self.threads
        while True:
            with self._wake:
                while not self._stopping and not self._inbox and not self._waiting and not self._held():
                    on_cpu = self.kv.storage is not None and self.kv.device.type == "cpu"
                    if not self._wake.wait(SPARE_IDLE_S if on_cpu else None) and self.kv.free_storage():
                        trim_heap()
                        self._refresh_status()  # idle for a while: the pool's memory went back
                if self._stopping:
                    return
                self._waiting.extend(self._inbox)
                self._inbox.clear()
            while self._pause_file and os.path.exists(self._pause_file) and not self._stopping:
                time.sleep(0.05)
            try:
                self._iterate()
            except Exception as exc:  # never let one bad step kill the engine
                log.exception("engine step failed")
                try:
                    self._fail_all(exc)
                except Exception:
                    log.exception("failing the running requests failed")

    def _iterate(self) -> None:
        self._waiting = [r for r in self._waiting if not r.cancelled]
        for seq in [s for s in self.preemption.waiting if s.req.cancelled]:
            self.preemption.drop([seq])
            self.weights.release(seq.route)
        if self.priority_scheduling:
            self._waiting.sort(key=lambda r: (r.priority, r.arrival))
        running = self._running()
        budget = self.kv.available
        resumed = self.preemption.resumable(budget, running, self.max_num_seqs)
        budget -= sum(resume_blocks(s) for s in resumed)
        running += len(resumed)
        groups: dict[str, Admitted] = {}
        if not self.preemption.waiting:  # preempted sequences resume before anything new is admitted
            groups, self._waiting = self.admission.choose(self._waiting, running, budget, self.max_num_seqs)
        if resumed:
            try:
                self.admission.resume(resumed, self._threads)
            except Exception as exc:
                log.exception("resuming preempted sequences failed")
                self._fail([(s.req, s.route) for s in resumed], exc)
        for key, admitted in groups.items():
            try:
                if key == "beam":
                    self._start_beams(admitted)
                else:
                    self._admit(admitted)
            except Exception as exc:
                log.exception("prefill failed")
                self._fail(admitted, exc)
        for batch in self._batches.values():
            for seq in [s for s in batch.seqs if s.req.cancelled]:
                batch.remove(seq)
        self.preemption.claim(self._batches)  # a writable next position for each, or preemption
        for key, batch in list(self._batches.items()):
            if batch.seqs:
                self._decode(batch)
            if not batch.seqs:
                del self._batches[key]
        for job in list(self._beams):
            self._step_beam(job)
        self._refresh_status()

    def _step_beam(self, job: BeamJob) -> None:
        self._threads(job.runner, job.width)
        job.req.progressed(time.monotonic())
        if not job.req.cancelled and not self.preemption.room(self._batches, job.blocks_per_step):
            self._end_beam(job)
            job.req.emit(Failed(RuntimeError(full_message(self.kv, "a beam search"))))
            return
        if job.req.cancelled or job.step():
            self._end_beam(job)
            if not job.req.cancelled:
                self._ending.append(job)
                self._refresh_status()  # before its answer, as in _advance
                job.finish()
                self._ending.remove(job)

    def _fail(self, admitted: list[tuple[Request, Route]], exc: Exception) -> None:
        """Requests whose prefill failed (and any whose first token ended them before their
        ``Finished`` went out): their sequences leave, their routes are released."""
        failed = {id(r): r for r, _ in admitted} | {id(x.req): x.req for x in self._ending}
        self._ending.clear()
        for batch in self._batches.values():
            for seq in [s for s in batch.seqs if id(s.req) in failed]:
                batch.remove(seq)
        for seq in [s for s in self.preemption.waiting if id(s.req) in failed]:
            self.preemption.drop([seq])
            self.weights.release(seq.route)
        started = {id(job.req) for job in self._beams}
        for req, route in admitted:
            if req.beam is not None and id(req) not in started:
                self.weights.release(route)
        for req in failed.values():
            req.emit(Failed(exc))

    def _fail_all(self, exc: BaseException) -> None:
        """A step failed: every request it holds fails, running, preempted or ended without its
        ``Finished``."""
        held = [*self._ending, *(s for b in self._batches.values() for s in b.seqs), *self._beams]
        for req in {id(x.req): x.req for x in [*held, *self.preemption.waiting]}.values():
            req.emit(Failed(exc))
        self._ending.clear()
        for batch in self._batches.values():
            for seq in list(batch.seqs):
                batch.remove(seq)
        for seq in list(self.preemption.waiting):
            self.preemption.drop([seq])
            self.weights.release(seq.route)
        for job in list(self._beams):
            self._end_beam(job)
        self._batches.clear()

    def _end_beam(self, job: BeamJob) -> None:
        self._beams.remove(job)
        job.release()
        self.weights.release(job.route)

    def _refresh_status(self) -> None:
        usage, graphs = self.weights.usage(), self.decoder.stats
        device = str(self.weights.base.device) if usage.loaded else str(self.placement.device)
        self.status = EngineStatus(
            loaded=usage.loaded,
            device=device,
            dtype=_dtype_name(self.placement.dtype),
            parameter_bytes=usage.parameter_bytes,
            kv_cache_bytes=self.kv.held_bytes,
            kv_cache_budget_bytes=self.kv.budget,
            max_model_len=self.spec.max_model_len,
            checkpoints=usage.checkpoints,
            adapters=usage.adapters,
            adapter_bytes=usage.adapter_bytes,
            running=self._running(),
            waiting=len(self._waiting) + len(self.preemption.waiting),
            preemptions=self.preemption.count,
            prompt_tokens=self.prompt_tokens,
            prefilled_tokens=self.prefilled_tokens,
            cuda_graphs=self.decoder.replaying,
            graphs_captured=graphs.captured,
            graph_capture_s=round(graphs.capture_s, 3),
        )

    def _threads(self, runner: Runner, tokens: int) -> None:
        """Run the next forward (``tokens`` rows) on one torch thread when it is too small to gain
        from more, else on :attr:`threads`: each op of a small forward takes microseconds, and
        handing half of it to a second thread and waiting for it costs more than it saves (far
        more when other processes keep the cores busy; docs/performance.md measures it)."""
        want = 1 if runner.parameters * tokens < SERIAL_WORK else self.threads
        if want != self._current_threads:
            torch.set_num_threads(want)
            self._current_threads = want

    def _start_beams(self, admitted: list[tuple[Request, Route]]) -> None:
        for req, route in admitted:
            self._threads(route.runner, len(req.prompt_ids))
            job = BeamJob(req, route, self.codec, self.spec.eos_token_ids, self.spec.max_model_len, self.kv)
            req.emit(Started(0, None))
            self._beams.append(job)

    def _admit(self, admitted: list[tuple[Request, Route]]) -> None:
        """Prefill requests sharing one runner (reusing cached or shared prompt prefixes, each prompt
        through its own adapter, :mod:`.prefill`), then sample each sequence's first token; the
        other choices of a request share its prompt's blocks."""
        runner = admitted[0][1].runner
        batch, choices, prompts = self.admission.place(admitted)
        plan(prompts, self.kv)
        self._threads(runner, sum(len(p.tokens) - p.start for p in prompts))
        last, full = prefill(runner, self.kv, prompts)
        last = self._to_sampler(last)
        rows: list[Sequence] = []
        parent_rows: list[int] = []
        for i, (p, seqs) in enumerate(zip(prompts, choices, strict=True)):
            req = p.seq.req
            self.prompt_tokens += len(req.prompt_ids)
            self.prefilled_tokens += len(req.prompt_ids) - p.start
            for other in seqs[1:]:
                other.blocks = self.kv.fork(p.seq.blocks)
            hidden, k = full[i], req.prompt_logprobs or 0
            prompt_lp = (
                prompt_logprobs(runner.logits, hidden, req.prompt_ids, k) if hidden is not None else None
            )
            req.emit(Started(p.start, prompt_lp))
            rows.extend(seqs)
            parent_rows.extend([i] * len(seqs))
        step = sample(
            last[torch.tensor(parent_rows, device=last.device)],
            rows,
            self._fallback,
            self._noise_pool,
            self._device_random,
        )
        self._advance(batch, rows, step)

    def _decode(self, batch: Batch) -> None:
        seqs = batch.seqs
        self._threads(batch.runner, len(seqs))
        logits = self.decoder.decode(
            batch.runner,
            [s.blocks for s in seqs],
            [s.output_ids[-1] for s in seqs],
            [s.cached_len for s in seqs],
            [s.route.adapter for s in seqs],
        )
        step = sample(self._to_sampler(logits), seqs, self._fallback, self._noise_pool, self._device_random)
        self._advance(batch, list(seqs), step)

    def _to_sampler(self, logits: Tensor) -> Tensor:
        """The logits where sampling runs: the CPU, or where they are with device sampling on."""
        return logits if self.sample_on_device else logits.cpu()

    def _advance(self, batch: Batch, seqs: list[Sequence], step: StepResult) -> None:
        done: list[Sequence] = []
        now = self.stepped_at = time.monotonic()
        for i, seq in enumerate(seqs):
            seq.req.progressed(now)
            token = step.tokens[i]
            if step.logprobs is not None and seq.logprobs is not None and step.top is not None:
                seq.logprobs.append((step.logprobs[i], step.top[i]))
            if append(seq, token, self.spec.max_model_len):
                batch.remove(seq)
                self._ending.append(seq)  # until its Finished is sent: a failure now fails it
                done.append(seq)
            elif seq.req.stream:
                stream(seq)
        if done:  # the health snapshot is never older than an answer already sent
            self._refresh_status()
        for seq in done:
            finish(seq, self.codec)
            self._ending.remove(seq)


def _ago(now: float, at: float | None) -> str:
    return "never" if at is None else f"{now - at:.1f} s ago"


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")

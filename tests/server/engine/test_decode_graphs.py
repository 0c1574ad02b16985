"""Decode steps at fixed shapes (what a CUDA graph captures, ``engine/decode_graphs.py``), on the CPU:
the buckets; each row's logits those of the plain step, across batch sizes, block widths and the
three forms of adapters; padding rows that write nothing a sequence reads; buckets forgotten when
the KV storage or the adapters' tensors are reallocated; a batch past the largest bucket decoded as
it comes; and an engine decoding at fixed shapes answering greedy and seeded requests with the
plain engine's tokens. Capturing itself runs only on CUDA (``bench/gpu.py`` checks it on a GPU); here
its calls are faked, to check what surrounds it."""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

import pytest
import torch

from support.engine_support import generate, greedy_params
from support.model_folders import write_adapter, write_folder
from toolkit.server.engine.decode_graphs import DecodeGraphs, Decoder, batch_buckets, lora_form, width_blocks
from toolkit.server.engine.device import pick_placement
from toolkit.server.engine.engine import Engine
from toolkit.server.engine.kv_pool import KVPool
from toolkit.server.engine.lora import LoraAdapter
from toolkit.server.engine.model import from_folder, load_model
from toolkit.server.engine.request import Weights
from toolkit.server.engine.runner import Runner
from toolkit.server.engine.sampling import SamplingParams
from toolkit.server.engine.weights import WeightsPool

# five prompts of 1 to 3 blocks: a step of them pads to 8 rows and 4 blocks
PROMPTS = [[256, *[(7 * i + r) % 250 for i in range(n)]] for r, n in enumerate((3, 20, 40, 9, 33))]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("qwen3")
    write_folder(folder, "qwen3")
    for i in (1, 2):
        write_adapter(folder, folder / f"adapter{i}", seed=i, r=4)
    write_adapter(folder, folder / "big", seed=9, r=16)  # a larger rank: the stack reallocates
    return folder


def weights_pool(base: Path) -> tuple[Runner, list[int]]:
    """The base runner and the slots of its two adapters."""
    pool = WeightsPool(from_folder(base), pick_placement("cpu"), 1 << 30)
    slots = []
    for i in (1, 2):
        route = pool.route(Weights(f"lora:a{i}", base / f"adapter{i}"), 1, ())
        assert route is not None
        slots.append(route.adapter)
    return pool.base, slots


def prefilled(runner: Runner, slots: list[int]) -> tuple[KVPool, list[list[int]], torch.Tensor]:
    kv = KVPool(runner.kv_shape, runner.device, 1 << 24)
    tables: list[list[int]] = [[] for _ in PROMPTS]
    assert all(kv.grow(t, len(p)) for t, p in zip(tables, PROMPTS, strict=True))
    last, _ = runner.prefill(kv, tables, PROMPTS, [0] * len(PROMPTS), None, slots)
    return kv, tables, last


def test_batches_pad_to_buckets_and_tables_to_powers_of_two_blocks() -> None:
    assert batch_buckets(32) == [1, 2, 4, 8, 16, 24, 32]
    assert batch_buckets(1) == [1] and batch_buckets(3) == [1, 2, 4] and batch_buckets(33)[-2:] == [32, 40]
    assert [width_blocks(b, 10) for b in (1, 2, 3, 5, 9, 11)] == [1, 2, 4, 8, 10, 11]
    forms = [lora_form(a) for a in (None, [0, 0], [3, 3], [0, 3], [2, 3])]
    assert forms == ["none", "none", "one", "rows", "rows"]


@pytest.mark.parametrize("form", ["none", "one", "rows"])
def test_each_row_of_a_fixed_step_gets_the_plain_steps_logits_and_padding_writes_nothing_read(
    base: Path, form: str
) -> None:
    """Five rows of 1 to 3 blocks, three greedy steps: the plain step on one pool, the fixed step
    (8 rows, 4 blocks) on another; the same logits, tokens and keys/values, and block 0 (which
    pads the tables, and where the padding rows write) still zeros."""
    runner, (s1, s2) = weights_pool(base)
    slots = {"none": [0] * 5, "one": [s1] * 5, "rows": [0, s1, s2, s1, 0]}[form]
    plain_kv, plain_tables, last = prefilled(runner, slots)
    fixed_kv, fixed_tables, _ = prefilled(runner, slots)
    graphs = DecodeGraphs(runner, fixed_kv, max_num_seqs=8, capture=False)
    tokens, positions = [int(t) for t in last.argmax(-1)], [len(p) for p in PROMPTS]
    for _ in range(3):
        for kv, tables in ((plain_kv, plain_tables), (fixed_kv, fixed_tables)):
            assert all(kv.writable(t, at) for t, at in zip(tables, positions, strict=True))
        plain = runner.decode(plain_kv, plain_tables, tokens, positions, slots)
        fixed = graphs.step(fixed_tables, tokens, positions, slots)
        assert fixed is not None and fixed.shape == plain.shape
        assert torch.allclose(fixed, plain, atol=1e-5, rtol=1e-5)
        assert torch.equal(fixed.argmax(-1), plain.argmax(-1))
        tokens, positions = [int(t) for t in plain.argmax(-1)], [p + 1 for p in positions]
    assert graphs.shapes == [(8, 4, form)]
    assert plain_tables == fixed_tables
    assert plain_kv.storage is not None and fixed_kv.storage is not None
    used = sorted({b for t in plain_tables for b in t})
    assert torch.allclose(fixed_kv.storage[:, :, :, used], plain_kv.storage[:, :, :, used], atol=1e-5)
    assert not fixed_kv.storage[:, :, :, 0].any()  # the zero block, which padding rows wrote to
    if form != "none":  # the adapters matter here, so the forms are really compared
        assert not torch.allclose(
            fixed, runner.decode(plain_kv, plain_tables, tokens, positions, None), atol=1e-3
        )


def test_buckets_are_forgotten_when_the_storage_or_the_adapters_are_reallocated(base: Path) -> None:
    runner, (s1, _) = weights_pool(base)
    kv, tables, _ = prefilled(runner, [0] * 5)
    graphs = DecodeGraphs(runner, kv, max_num_seqs=8, capture=False)

    def step(slots: list[int]) -> None:
        positions = [len(p) for p in PROMPTS]
        assert all(kv.writable(t, at) for t, at in zip(tables, positions, strict=True))
        assert graphs.step(tables, [1] * 5, positions, slots) is not None

    step([0] * 5)
    step([s1] * 5)
    assert graphs.shapes == [(8, 4, "none"), (8, 4, "one")]
    assert runner.adapters is not None
    runner.adapters.acquire(
        Weights("lora:big", base / "big"), lambda: LoraAdapter.read(base / "big", runner.device, runner.dtype)
    )
    step([0] * 5)  # a larger rank reallocated the adapters' tensors
    assert graphs.shapes == [(8, 4, "none")]
    for t in tables:
        kv.release(t)
    assert kv.free_storage()
    tables[:] = [[] for _ in PROMPTS]
    assert all(kv.grow(t, len(p)) for t, p in zip(tables, PROMPTS, strict=True))
    step([s1] * 5)  # new storage
    assert graphs.shapes == [(8, 4, "one")]


def test_a_batch_past_the_largest_bucket_is_decoded_as_it_comes(base: Path) -> None:
    runner, _ = weights_pool(base)
    kv, tables, last = prefilled(runner, [0] * 5)
    positions = [len(p) for p in PROMPTS]
    assert all(kv.writable(t, at) for t, at in zip(tables, positions, strict=True))
    tokens = [int(t) for t in last.argmax(-1)]
    assert (
        DecodeGraphs(runner, kv, max_num_seqs=4, capture=False).step(tables, tokens, positions, None) is None
    )
    decoder = Decoder(kv, max_num_seqs=4, fixed=True, capture=False)
    assert torch.equal(
        decoder.decode(runner, tables, tokens, positions, None), runner.decode(kv, tables, tokens, positions)
    )
    with pytest.raises(ValueError, match="CUDA graphs need a CUDA device"):
        DecodeGraphs(runner, kv, max_num_seqs=4, capture=True)


def test_an_engine_at_fixed_shapes_answers_with_the_plain_engines_tokens(base: Path) -> None:
    """Greedy and seeded T=1 requests on the base and both adapters, submitted together (6 rows
    padded to 8), then one alone (1 row): the same tokens from both engines, and the fixed one ran
    its steps at buckets."""
    requests = [(Weights("base"), PROMPTS[0])] + [
        (Weights(f"lora:a{i}", base / f"adapter{i}"), PROMPTS[i]) for i in (1, 2)
    ]
    seeded = [SamplingParams(max_tokens=12, temperature=1.0, seed=7 + i, ignore_eos=True) for i in range(3)]
    answers = []
    for fixed in (False, True):
        spec = from_folder(base)
        engine = Engine.for_model(
            spec, max_num_seqs=8, placement=pick_placement("cpu"), threads=1, fixed_shapes=fixed
        )
        engine.start()
        try:
            together = generate(engine, requests * 2, [greedy_params(12)] * 3 + seeded)
            alone = generate(engine, requests[1:2], seeded[1:2])
        finally:
            engine.stop()
        answers.append((together, alone))
        rows = {shape[0] for shape in engine.decoder.shapes}
        assert rows >= {8, 1} if fixed else not rows
    assert answers[0] == answers[1]
    assert len({tuple(t) for t in answers[0][0]}) == 6  # the rows differ: each row's own tokens compared


def eager_step_and_graphs(
    base: Path,
) -> tuple[Runner, list[list[int]], list[int], list[int], Any, DecodeGraphs]:
    """The prompts prefilled, one step's inputs, its logits at a fixed shape run eagerly, and graphs
    of the same runner and pool set to capture, as on CUDA (the runner too: graphs hold it weakly)."""
    runner, _ = weights_pool(base)
    kv, tables, last = prefilled(runner, [0] * 5)
    positions = [len(p) for p in PROMPTS]
    assert all(kv.writable(t, at) for t, at in zip(tables, positions, strict=True))
    tokens = [int(t) for t in last.argmax(-1)]
    eager = DecodeGraphs(runner, kv, max_num_seqs=8, capture=False).step(tables, tokens, positions, None)
    graphs = DecodeGraphs(runner, kv, max_num_seqs=8, capture=False)
    graphs.capture = True
    return runner, tables, tokens, positions, eager, graphs


def test_a_capture_that_fails_leaves_the_runner_decoding_eagerly_and_logs_it(
    base: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Unit level (no CUDA here): the capture itself made to fail."""
    _runner, tables, tokens, positions, eager, graphs = eager_step_and_graphs(base)

    def fail(fixed: object) -> None:
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(graphs, "_record", fail)
    logits = graphs.step(tables, tokens, positions, None)
    assert logits is not None and eager is not None and torch.equal(logits, eager)
    assert not graphs.capture and "decoding eagerly from now on" in caplog.text


def test_an_unloaded_runner_goes_at_once_with_its_buckets(base: Path) -> None:
    """The decoder holds runners weakly: a checkpoint's runner that the engine unloads frees its
    weights (and on CUDA its graphs) when its last reference goes, not at the next garbage collection."""
    runner = Runner(load_model(from_folder(base)), 128)
    kv, tables, last = prefilled(runner, [0] * 5)
    positions = [len(p) for p in PROMPTS]
    assert all(kv.writable(t, at) for t, at in zip(tables, positions, strict=True))
    decoder = Decoder(kv, max_num_seqs=8, fixed=True, capture=False)
    decoder.decode(runner, tables, [int(t) for t in last.argmax(-1)], positions, None)
    assert decoder.shapes == [(8, 4, "none")]
    gone = weakref.ref(runner)
    del runner, last
    assert gone() is None and decoder.shapes == []


class _FakeGraph:
    """Stands in for ``torch.cuda.CUDAGraph`` (no CUDA here): counts replays."""

    replays = 0

    def replay(self) -> None:
        _FakeGraph.replays += 1


def test_capturing_runs_the_step_once_into_the_batch_sizes_output_then_replays(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unit level, with torch.cuda's capture calls faked (the capture itself runs only on a GPU, in
    bench/gpu.py): the first step of a bucket warms up, captures into the batch size's one output and
    gives the eager step's logits; the next step of that bucket replays instead of running."""
    import contextlib

    _FakeGraph.replays = 0
    fake_stream = type("Stream", (), {"wait_stream": lambda self, other: None})
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 0)
    monkeypatch.setattr(torch.cuda, "Stream", lambda device=None: fake_stream())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: fake_stream())
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", _FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph", lambda graph, pool, capture_error_mode: contextlib.nullcontext())
    _runner, tables, tokens, positions, eager, graphs = eager_step_and_graphs(base)
    captured = graphs.step(tables, tokens, positions, None)
    assert captured is not None and eager is not None and torch.equal(captured, eager)
    assert graphs.stats.captured == 1 and _FakeGraph.replays == 1  # captured, then replayed once
    assert graphs.step(tables, tokens, positions, None) is not None
    assert graphs.stats.captured == 1 and _FakeGraph.replays == 2  # the bucket's graph, replayed

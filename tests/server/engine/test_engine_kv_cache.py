"""The paged KV cache: blocks shared by reference and copied before a write, cached prompt prefixes
kept until their room is needed, a budget the engine never exceeds (the latest sequences preempted and
resumed with the same tokens), the context length fitted to the budget, and what the health check and
``toolkit serve`` say about it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import LocalServer
from toolkit.server.engine import engine as engine_module
from toolkit.server.engine.engine import Engine
from toolkit.server.engine.events import Failed, Finished, Started
from toolkit.server.engine.kv_budget import fit_context, kv_pool_for
from toolkit.server.engine.kv_pool import BLOCK, KVPool, KVShape
from toolkit.server.engine.model import BaseModelSpec, ensure_builtin, load_model
from toolkit.server.engine.request import Request, Weights
from toolkit.server.engine.runner import Runner
from toolkit.server.engine.sampling import SamplingParams
from toolkit.server.engine.sources import BaseModelError

SHAPE = KVShape(layers=2, kv_heads=1, head_dim=4, dtype=torch.float32)
BLOCK_BYTES = SHAPE.token_bytes * BLOCK


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> BaseModelSpec:
    return ensure_builtin(tmp_path_factory.mktemp("kv"))


def pool_of(blocks: int) -> KVPool:
    """A pool of ``blocks`` blocks, the zero block included."""
    return KVPool(SHAPE, torch.device("cpu"), blocks * BLOCK_BYTES)


def test_blocks_are_shared_by_reference_and_copied_before_a_write() -> None:
    pool = pool_of(6)
    first: list[int] = []
    assert pool.grow(first, 20) and len(first) == 2 and pool.in_use == 2
    assert pool.storage is not None
    pool.storage[:, :, :, first[1]] = 7.0
    second = pool.fork(first)
    assert second == first and pool.in_use == 2  # shared, not copied
    assert pool.writable(second, 20)  # position 20 lies in the shared second block: copied first
    assert second[0] == first[0] and second[1] != first[1] and pool.in_use == 3
    assert torch.equal(pool.storage[:, :, :, second[1]], pool.storage[:, :, :, first[1]])
    assert pool.writable(first, 20) and pool.in_use == 3  # its own block now: nothing to copy
    assert pool.writable(first, 32) and len(first) == 3  # a block past the end
    pool.release(second)
    assert second == [] and pool.in_use == 3  # the first block is still the first table's
    pool.release(first)
    assert pool.in_use == 0 and pool.available == 5


def test_a_full_pool_refuses_whole_and_takes_nothing() -> None:
    pool = pool_of(4)
    table: list[int] = []
    assert not pool.grow(table, 4 * BLOCK)  # 4 blocks asked, 3 there (block 0 pads tables)
    assert table == [] and pool.available == 3
    assert pool.grow(table, 3 * BLOCK) and not pool.writable(table, 3 * BLOCK)


def test_cached_prefixes_stay_until_their_room_is_needed_least_recent_first() -> None:
    pool = pool_of(8)
    a: list[int] = []
    b: list[int] = []
    assert pool.grow(a, BLOCK) and pool.grow(b, BLOCK)
    pool.register(["ka"], a)
    pool.register(["kb"], b)
    block_a, block_b = a[0], b[0]
    pool.release(a)
    pool.release(b)
    assert pool.in_use == 0 and pool.held_bytes == 2 * BLOCK_BYTES and pool.available == 7
    assert pool.lookup(["ka", "kx"]) == [block_a]  # the longest cached prefix, now in use again
    pool.release([block_a])
    taken: list[int] = []
    assert pool.grow(taken, 6 * BLOCK)  # the 5 free blocks, then the least recently used cached one
    assert block_b in taken and not pool.cached("kb") and pool.cached("ka")
    assert pool.lookup(["kb"]) == []


def test_at_most_a_quarter_of_the_pool_holds_cached_prefixes_no_sequence_uses() -> None:
    pool = pool_of(8)  # room for 2 idle cached blocks
    tables: list[list[int]] = [[] for _ in range(3)]
    for i, table in enumerate(tables):
        assert pool.grow(table, BLOCK)
        pool.register([f"k{i}"], table)
    for table in tables:
        pool.release(table)
    assert [pool.cached(f"k{i}") for i in range(3)] == [False, True, True]  # the oldest forgotten
    assert pool.held_bytes == 2 * BLOCK_BYTES and pool.available == 7


def test_blocks_handed_out_for_the_first_time_hold_zeros_whatever_the_memory_held() -> None:
    pool = pool_of(8)
    table: list[int] = []
    assert pool.grow(table, 1) and pool.storage is not None
    pool.storage[:, :, :, 2:] = float("nan")  # what fresh memory may hold
    assert pool.grow(table, 3 * BLOCK)
    assert not pool.storage[:, :, :, table].isnan().any()


FIRST_BLOCK_RSS = """
import sys, psutil, torch
from toolkit.server.engine import kv_pool
from toolkit.server.engine.kv_pool import KVPool, KVShape
if sys.argv[1] == "huge":
    kv_pool.small_pages = lambda tensor: None
pool = KVPool(KVShape(30, 3, 64, torch.float32), torch.device("cpu"), 1 << 30)  # SmolLM2's, 1 GiB
before = psutil.Process().memory_info().rss
assert pool.grow([], 16)
print((psutil.Process().memory_info().rss - before) // 2**20)
"""
"""Prints the MiB of resident memory the first block of SmolLM2's KV pool takes, in a process with
torch's huge pages (``toolkit serve``'s); with ``huge``, as if the pool did not ask for small pages."""


def test_the_pools_first_block_takes_its_own_pages_not_huge_ones() -> None:
    def first_block(*args: str) -> int:
        env = {**os.environ, "THP_MEM_ALLOC_ENABLE": "1"}
        command = [sys.executable, "-c", FIRST_BLOCK_RSS, *args]
        out = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        return int(out.stdout.strip().splitlines()[-1])

    # blocks 0 and 1 of 180 regions (30 layers x keys and values x 3 heads): 1.4 MB of 4 KB pages
    assert first_block("small") < 16
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if thp.exists() and "[never]" not in thp.read_text():  # where Linux gives huge pages at all
        assert first_block("huge") > 300  # a 2 MB page in each of the 180 regions


def test_the_storage_is_freed_only_when_no_sequence_holds_a_block() -> None:
    pool = pool_of(4)
    table: list[int] = []
    assert pool.grow(table, 1)
    assert not pool.free_storage() and pool.storage is not None
    pool.register(["k"], table)
    pool.release(table)
    assert pool.free_storage() and pool.storage is None and pool.held_bytes == 0
    assert not pool.cached("k") and pool.available == 3


def test_a_runner_reads_the_same_logits_from_scattered_blocks(spec: BaseModelSpec) -> None:
    """Blocks out of order in the pool (a long-lived cache's usual state) change nothing."""
    model = load_model(spec)
    runner = Runner(model, spec.max_model_len)
    pool = KVPool(runner.kv_shape, runner.device, 1 << 22)
    holes: list[list[int]] = [[] for _ in range(6)]
    for hole in holes:
        assert pool.grow(hole, BLOCK)
    for hole in holes[::2]:
        pool.release(hole)  # free blocks between used ones
    prompt = list(range(40, 90))
    table: list[int] = []
    assert pool.grow(table, len(prompt)) and table == [1, 3, 5, 7]  # lowest free first: scattered
    last, _ = runner.prefill(pool, [table], [prompt], [0])
    with torch.no_grad():
        reference = model(torch.tensor([[*prompt, 5]])).logits[0]
    assert torch.allclose(last[0], reference[-2], atol=1e-4)
    assert pool.writable(table, len(prompt))
    step = runner.decode(pool, [table], [5], [len(prompt)])
    assert torch.allclose(step[0], reference[-1], atol=1e-4)


def greedy_request(ids: list[int], tokens: int) -> Request:
    params = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True, logprobs=0)
    return Request(
        id=f"r{len(ids)}",
        weights=Weights("base"),
        prompt_ids=ids,
        params=[params],
        guides=[None],
        stream=False,
    )


async def finished(engine: Engine, requests: list[Request]) -> list[list[int]]:
    queues = [engine.submit(r) for r in requests]
    out: list[list[int]] = []
    for queue in queues:
        while True:
            event = await asyncio.wait_for(queue.get(), 120)
            assert not isinstance(event, Failed), event.error
            if isinstance(event, Finished):
                out.append(event.token_ids)
                break
    return out


async def test_a_full_kv_cache_preempts_the_latest_sequences_and_resumes_them_with_the_same_tokens(
    spec: BaseModelSpec,
) -> None:
    """Eight greedy answers of 80 tokens need some 70 blocks; the budget holds 24. The engine never
    holds more, preempts the sequences admitted last and runs their tokens again when there is room:
    every answer equals the one the same request gets alone."""
    budget = 25 * kv_pool_for(spec, engine_module.pick_placement("cpu"), 1).block_bytes
    prompts = [[256, *range(65 + i, 90 + i), 257] for i in range(8)]
    tight = Engine.for_model(spec, max_num_seqs=8, kv_cache_bytes=budget, threads=1)
    roomy = Engine.for_model(spec, max_num_seqs=8, threads=1)
    assert tight.kv.num_blocks == 25 and tight.spec.max_model_len <= tight.kv.tokens
    peak = 0
    step = tight._decode

    def counting(batch):  # type: ignore[no-untyped-def]
        nonlocal peak
        peak = max(peak, tight.kv.in_use)
        step(batch)

    tight._decode = counting  # type: ignore[method-assign]
    for engine in (tight, roomy):
        engine.start()
    try:
        together = await finished(tight, [greedy_request(p, 80) for p in prompts])
        alone = [(await finished(roomy, [greedy_request(p, 80)]))[0] for p in prompts]
    finally:
        for engine in (tight, roomy):
            engine.stop()
    assert tight.status.preemptions > 0 and peak <= 24
    assert together == alone
    assert tight.kv.in_use == 0  # every block back


async def test_cached_prefix_blocks_stay_in_the_pool_until_the_engine_idles(
    spec: BaseModelSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a request ends, its full prompt blocks stay (counted in ``kv_cache_bytes``) and the next
    prompt with that prefix reuses them; once the engine has idled for ``SPARE_IDLE_S`` the pool's
    memory goes back."""
    monkeypatch.setattr(engine_module, "SPARE_IDLE_S", 0.3)
    engine = Engine.for_model(spec, threads=1)
    ids = [256, *range(60, 110), 257]  # 52 tokens: three full blocks cached
    engine.start()
    try:
        cached: list[int] = []
        for _ in range(2):
            req = greedy_request(ids, 4)
            req.cache_scope = "u|"
            queue = engine.submit(req)
            while not isinstance(event := await asyncio.wait_for(queue.get(), 60), Finished):
                if isinstance(event, Started):
                    cached.append(event.cached_tokens)
            assert engine.status.kv_cache_bytes == 3 * engine.kv.block_bytes and engine.status.running == 0
        assert cached == [0, 3 * BLOCK]
        deadline = time.monotonic() + 30
        while engine.status.kv_cache_bytes and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert engine.status.kv_cache_bytes == 0 and engine.kv.storage is None
    finally:
        engine.stop()


def test_the_context_is_fitted_to_the_budget(spec: BaseModelSpec, tmp_path: Path) -> None:
    placement = engine_module.pick_placement("cpu")
    small = ensure_builtin(tmp_path)
    pool = kv_pool_for(small, placement, 8 * kv_pool_for(small, placement, 1).block_bytes)
    fit_context(small, pool, None, explicit_budget=True)
    assert small.max_model_len == pool.tokens == 7 * BLOCK  # lowered, with a warning
    asked = ensure_builtin(tmp_path)
    fit_context(asked, pool, 64, explicit_budget=True)
    assert asked.max_model_len == 64
    with pytest.raises(BaseModelError, match="fewer than --max-model-len 200: raise the first or lower"):
        fit_context(ensure_builtin(tmp_path), pool, 200, explicit_budget=True)
    with pytest.raises(BaseModelError, match="longer than the context"):
        fit_context(ensure_builtin(tmp_path), pool, spec.max_model_len + 1, explicit_budget=False)


def test_serve_reports_the_budget_and_the_context_and_refuses_one_it_cannot_hold(tmp_path: Path) -> None:
    (tmp_path / "served").mkdir()
    server = LocalServer(
        tmp_path / "served", extra_args=("--kv-cache-memory-bytes", "4MiB", "--max-model-len", "512")
    ).start()
    try:
        http = server.http()
        body = {
            "model": "toolkit/tiny-chat-1m",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 4,
        }
        assert http.post("/v1/chat/completions", json=body).status_code == 200
        base = http.get("/v1/health").json()["models"][0]
        assert base["kv_cache_budget_bytes"] == 4 * 2**20 and base["max_model_len"] == 512
        assert 0 < base["kv_cache_bytes"] <= base["kv_cache_budget_bytes"] and base["preemptions"] == 0
        too_long = {**body, "max_tokens": 600}
        r = http.post("/v1/chat/completions", json=too_long)
        assert r.status_code == 400 and "max_model_len=512" in r.json()["error"]["message"]
    finally:
        server.stop()
    result = subprocess.run(
        [sys.executable, "-m", "toolkit", "serve", "--data-dir", str(tmp_path / "refused"), "--port", "0",
         "--kv-cache-memory-bytes", "64Ki", "--max-model-len", "1024"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith("toolkit serve: --kv-cache-memory-bytes 65536 holds")
    )

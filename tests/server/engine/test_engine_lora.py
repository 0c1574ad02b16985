"""Many LoRA adapters on one base without HTTP: rows of one batch through different adapters equal
peft's own forward of each; the engine decodes requests for different adapters and the base in one
step; the three ways of applying them agree; residency is LRU under a byte cap and never evicts an
adapter in use; folders peft cannot have written are refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

from support.engine_support import generate, greedy_params
from support.model_folders import peft_model, write_adapter, write_folder
from toolkit.server.engine import adapter_stack
from toolkit.server.engine.device import pick_placement
from toolkit.server.engine.engine import Engine
from toolkit.server.engine.kv_pool import KVPool
from toolkit.server.engine.lora import AdapterError, LoraAdapter
from toolkit.server.engine.model import from_folder, load_model
from toolkit.server.engine.request import Weights
from toolkit.server.engine.runner import Runner
from toolkit.server.engine.weights import WeightsPool

PROMPTS = [[256, 117, 10, 104, 105, 257], [256, 97, 98, 99], [256, 120, 121, 122, 123, 124, 125]]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("qwen3")
    write_folder(folder, "qwen3")
    return folder


@pytest.fixture(scope="module")
def adapters(base: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Six adapters: ranks 2..8, one rsLoRA, one on attention only."""
    root = tmp_path_factory.mktemp("adapters")
    out = []
    for i in range(6):
        folder = root / f"a{i}"
        targets = ["q_proj", "v_proj", "o_proj"] if i == 2 else None
        write_adapter(base, folder, seed=i + 1, r=2 + (i % 4) * 2, rslora=i == 1, targets=targets)
        out.append(folder)
    return out


def pool(base: Path, lora_bytes: int = 1 << 30) -> WeightsPool:
    return WeightsPool(from_folder(base), pick_placement("cpu"), lora_bytes)


def slot(p: WeightsPool, folder: Path) -> int:
    route = p.route(Weights(f"lora:{folder.name}", folder), 1, ())
    assert route is not None and route.runner is p.base
    return route.adapter


def run(runner: Runner, prompts: list[list[int]], slots: list[int], steps: int = 3) -> list[torch.Tensor]:
    """Per row: the logits after the prompt and after each greedy decode step, ``[steps + 1, V]``."""
    pool = KVPool(runner.kv_shape, runner.device, 1 << 22)
    tables: list[list[int]] = [[] for _ in prompts]
    assert all(pool.grow(t, len(p)) for t, p in zip(tables, prompts, strict=True))
    last, _ = runner.prefill(pool, tables, prompts, [0] * len(prompts), None, slots)
    rows = [[row] for row in last]
    positions = [len(p) for p in prompts]
    for _ in range(steps):
        tokens = [int(r[-1].argmax()) for r in rows]
        assert all(pool.writable(t, at) for t, at in zip(tables, positions, strict=True))
        logits = runner.decode(pool, tables, tokens, positions, slots)
        for r, row in zip(rows, logits, strict=True):
            r.append(row)
        positions = [p + 1 for p in positions]
    return [torch.stack(r) for r in rows]


def reference(model: torch.nn.Module, prompt: list[int], steps: int = 3) -> torch.Tensor:
    """The same greedy steps through a transformers/peft model."""
    ids, out = list(prompt), []
    with torch.no_grad():
        for _ in range(steps + 1):
            logits = model(torch.tensor([ids])).logits[0, -1]
            out.append(logits)
            ids.append(int(logits.argmax()))
    return torch.stack(out)


def test_rows_of_one_batch_through_different_adapters_equal_peft(base: Path, adapters: list[Path]) -> None:
    p = pool(base)
    slots = [0, slot(p, adapters[0]), slot(p, adapters[1])]
    assert slots[1] != slots[2] and 0 not in slots[1:]
    batch = run(p.base, PROMPTS, slots)
    expected = [
        reference(AutoModelForCausalLM.from_pretrained(base).eval(), PROMPTS[0]),
        reference(peft_model(base, adapters[0]), PROMPTS[1]),
        reference(peft_model(base, adapters[1]), PROMPTS[2]),
    ]
    for got, want in zip(batch, expected, strict=True):
        assert torch.allclose(got, want, atol=1e-4)
    alone = run(p.base, [PROMPTS[1]], [slots[1]])[0]  # the same adapter served alone
    assert torch.allclose(alone, batch[1], atol=1e-5)
    assert not torch.allclose(batch[1], run(p.base, [PROMPTS[1]], [0])[0], atol=1e-2)  # it matters


def test_the_engine_decodes_different_adapters_in_one_step(
    base: Path, adapters: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests for the base and two adapters, submitted together, share the base runner's decode
    calls (each row through its own adapter slot) and answer as each does alone."""
    engine = Engine.for_model(from_folder(base), max_num_seqs=8, placement=pick_placement("cpu"), threads=1)
    runner = engine.weights.base
    batches: list[list[int]] = []
    decode = runner.decode

    def spy(*args: Any, **kwargs: Any) -> torch.Tensor:
        batches.append(list(kwargs.get("adapters", args[4] if len(args) > 4 else None) or []))
        return decode(*args, **kwargs)

    monkeypatch.setattr(runner, "decode", spy)
    weights = [Weights("base"), *(Weights(f"lora:{a.name}", a) for a in adapters[:2])]
    requests = list(zip(weights, PROMPTS, strict=True))
    engine.start()
    try:
        together = generate(engine, requests, [greedy_params(8)] * 3)
        shared = [b for b in batches if len(set(b)) == 3]
        alone = [generate(engine, [r], [greedy_params(8)])[0] for r in requests]
        plain = generate(engine, [(Weights("base"), PROMPTS[1])], [greedy_params(8)])[0]
    finally:
        engine.stop()
    assert shared and 0 in shared[0], batches  # a step with the base (slot 0) and both adapters' slots
    assert together == alone
    assert alone[1] != plain  # the adapter changes the answer


def test_grouped_and_gathered_application_agree(
    base: Path, adapters: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six adapters plus the base in one batch: per-adapter groups and per-row gathered weights give
    the rows' results alone, and each adapter of a different rank lands in its own slot."""
    p = pool(base)
    slots = [0, *(slot(p, a) for a in adapters)]
    prompts = [PROMPTS[i % 3] for i in range(len(slots))]
    alone = [run(p.base, [pr], [s])[0] for pr, s in zip(prompts, slots, strict=True)]
    for grouped_up_to in (0, len(slots)):  # gathered + bmm, then one group per adapter
        monkeypatch.setattr(adapter_stack, "GROUPED_UP_TO", grouped_up_to)
        for got, want in zip(run(p.base, prompts, slots), alone, strict=True):
            assert torch.allclose(got, want, atol=1e-4)
    rsl = run(p.base, [PROMPTS[0]], [slots[2]])[0]
    assert torch.allclose(rsl, reference(peft_model(base, adapters[1]), PROMPTS[0]), atol=1e-4)


def test_residency_is_lru_under_the_cap_and_spares_adapters_in_use(base: Path, adapters: list[Path]) -> None:
    runner = Runner(load_model(from_folder(base)), 512, lora_bytes=0)
    stack = runner.adapters
    assert stack is not None
    read = {a.name: LoraAdapter.read(a, runner.device, runner.dtype) for a in adapters[:3]}
    stack.max_bytes = 2 * stack.slot_bytes(max(read[a.name].rank for a in adapters[:3]))
    first = stack.acquire(Weights("a0"), lambda: read["a0"])
    second = stack.acquire(Weights("a1"), lambda: read["a1"])
    assert first and second and stack.resident == 2
    assert stack.acquire(Weights("a2"), lambda: read["a2"]) is None  # both in use: it waits
    stack.release(first)
    third = stack.acquire(Weights("a2"), lambda: read["a2"])
    assert third == first and stack.resident == 2  # a0, idle and least recent, left
    assert stack.acquire(Weights("a1"), lambda: pytest.fail("a1 is resident")) == second
    assert stack.capacity == 3  # the base's slot and the two the cap allows, not a doubling past them


def test_a_later_step_of_a_model_retires_its_idle_earlier_steps(base: Path, adapters: list[Path]) -> None:
    """An RL loop's steps 1, 2, 3 take one slot between them, not one each; an earlier step in use,
    another model's adapter and an earlier step asked for after a later one stay."""
    runner = Runner(load_model(from_folder(base)), 512, lora_bytes=1 << 30)
    stack = runner.adapters
    assert stack is not None
    adapter = LoraAdapter.read(adapters[0], runner.device, runner.dtype)

    def step(model: str, n: int) -> Weights:
        return Weights(f"{model}-{n}", adapters[0], (model, n))

    other = stack.acquire(step("other", 5), lambda: adapter)
    assert other is not None
    stack.release(other)
    for n in (1, 2, 3):
        slot = stack.acquire(step("m", n), lambda: adapter)
        assert slot is not None
        stack.release(slot)
    assert stack.resident == 2  # m's step 3 and the other model's step 5
    in_use = stack.acquire(step("m", 3), lambda: pytest.fail("step 3 is resident"))
    stack.acquire(step("m", 4), lambda: adapter)
    assert stack.resident == 3  # step 3 is in use: it stays beside step 4
    stack.acquire(step("m", 2), lambda: adapter)  # an earlier step again: read again, retiring nothing
    assert stack.resident == 4
    assert stack.acquire(step("other", 5), lambda: pytest.fail("other is resident")) == other
    assert in_use is not None


def test_a_later_full_checkpoint_of_a_model_unloads_its_idle_earlier_one(base: Path, tmp_path: Path) -> None:
    p = pool(base)
    folders = []
    for n in (1, 2):
        folder = tmp_path / f"step{n}"
        folder.mkdir()
        for name in ("model.safetensors", "config.json"):  # a whole-weight checkpoint
            shutil.copy(base / name, folder / name)
        folders.append(folder)
    first = p.route(Weights("m-1", folders[0], ("m", 1)), 1, busy=())
    assert first is not None
    p.release(first)
    assert p.usage().checkpoints == 1
    p.route(Weights("m-2", folders[1], ("m", 2)), 1, busy=())
    assert p.usage().checkpoints == 1  # step 1, idle, unloaded for step 2
    p.route(Weights("m-1", folders[0], ("m", 1)), 1, busy=("m-2",))
    assert p.usage().checkpoints == 2  # an earlier step asked for again: loaded beside the later


def test_adapters_peft_could_not_serve_are_refused(base: Path, adapters: list[Path], tmp_path: Path) -> None:
    folder = tmp_path / "dora"
    folder.mkdir()
    for f in adapters[0].iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**config, "use_dora": True}))
    with pytest.raises(AdapterError, match="use_dora"):
        LoraAdapter.read(folder, torch.device("cpu"), torch.float32)
    deeper = tmp_path / "deeper"  # an adapter of a deeper model: layer 7 is not in this base
    deeper.mkdir()
    (deeper / "adapter_config.json").write_text(json.dumps(config))
    tensors = load_file(adapters[0] / "adapter_model.safetensors")
    save_file(
        {k.replace("layers.1.", "layers.7."): v for k, v in tensors.items()},
        deeper / "adapter_model.safetensors",
    )
    with pytest.raises(AdapterError, match=r"layer 7 .* this base model lacks"):
        pool(base).route(Weights("lora:deeper", deeper), 1, ())

"""The GPU path, measured: a Qwen3-0.6B-shaped base served by ``toolkit serve --device cuda`` against
``transformers``' ``generate`` and bare peft loops on the same GPU, in one run (under 8 minutes on an
H100 or H200).

    python bench/gpu.py [--device cuda] [--tokens 128] [--rounds 2] [--out gpu.json] [--smoke]

The base: random weights (no download) built from Qwen3-0.6B's config by
``toolkit.server.engine.random_models.write_folder`` (hidden 1024, 28 layers, 16 query / 8 key-value
heads of 128, MLP 3072, tied embeddings, vocabulary 151,936, context 40,960: 596M parameters), over
the project's byte tokenizer. The tokenizer has 260 ids; the model's vocabulary may be larger (ids
past the tokenizer's decode to no text, as the padded ids of real vocabularies do), and it is kept
at Qwen3's 151,936 so that the output head, the logits of each step and the memory are those of the
real model. Requests ignore EOS and count ``usage.completion_tokens``. Served in bf16 (the server's
placement on a GPU), with 16 LoRA adapters (peft, rank 8, the 7 projections) by name.

Two servers on the same folder: one sampling on the CPU (``TOOLKIT_DEVICE_SAMPLING=0``), one as
shipped on CUDA: sampling and its random numbers on the device (``=device``, the default there).
Measures, interleaved over ``--rounds`` (each keeps its best):
- one decode step's forward in-process as its rows come, at fixed shapes eagerly (``--enforce-eager``)
  and as a CUDA graph, with what capturing cost, whether the graphs give the eager step's logits and
  tokens bit for bit, and 16 rows on 16 adapters in a graph (bench/gpu_graphs.py);
- decode tokens/s at 1, 16 and 64 concurrent chat requests over HTTP (``--tokens`` each, greedy, and
  at T=1 with a seed; the servers replay CUDA graphs), against ``generate`` at batch 1, 16 and 64
  (greedy) in this process, eager and with a static cache (which transformers compiles on CUDA);
- what sampling costs a decode step (bench/gpu_sampling.py: in-process, the engine's runner and
  sampler);
- 16 concurrent requests on 16 adapters against 16 on the base alone;
- a LoRA SFT job (4 batches of 64) and a LoRA RL job (8 groups x 8, 4 minibatches x 2 passes)
  through the training API, from POST to the new checkpoint's first token, against a bare peft loop
  on the same data (bench/bench_training.py's measures, bench/training_bare.py's loops);
- peak memory on the device: this process per phase, each server, the whole GPU;
- checks that nothing silently ran on the CPU: each server's ``/v1/health`` device and dtype and
  ``/v1/system-check`` device queue, the servers' GPU memory against the weights' bytes (and its
  growth when a job loads its base), the gradient steps timed by the job's events against the bare
  loop on the device, and the devices of this process's models.
Prints Markdown tables and, with ``--out``, writes every figure as JSON. A section that fails is
reported (with the servers' last log lines) and the run goes on; past ``--budget`` seconds the
sections left are skipped. ``--smoke``: a 2-layer model, 4 tokens, 1/2/4 concurrent, 2 adapters, 1 SFT
batch, 1 RL group, 1 round (tests/bench/test_bench_gpu.py runs it with ``--device cpu``).
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import torch
from bench_engine import (
    MESSAGES,
    Server,
    concurrently,
    engine_throughput,
    generate_throughput,
)
from bench_training import RL_SETTINGS, TARGET_GROUPS, Pair, measure_rl, measure_sft
from gpu_graphs import graph_costs
from gpu_report import NAME, STATIC, report
from gpu_sampling import device_used_mib, process_memory_mib, sampling_costs
from lora_serving import write_adapters
from server_process import start_server
from training_bare import BareRL, BareSFT

import toolkit as tk
from toolkit.server.engine.codec import Codec
from toolkit.server.engine.device import pick_placement
from toolkit.server.engine.engine import ENGINE_THREADS, NOISE_THREADS
from toolkit.server.engine.kv_pool import BLOCK
from toolkit.server.engine.model import BaseModelSpec, from_folder, load_model
from toolkit.server.engine.random_models import write_folder
from toolkit.server.engine.runner import Runner
from toolkit.server.engine.template import render_chat
from toolkit.server.training.policy import TRAINER_THREADS
from toolkit.types.training import LoRAConfig

QWEN3_0_6B: dict[str, Any] = {
    "vocab_size": 151_936,
    "hidden_size": 1024,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 3072,
    "max_position_embeddings": 40_960,
    "rope_theta": 1_000_000.0,
    "tie_word_embeddings": True,
}
SMOKE_SHAPE: dict[str, Any] = {}  # random_models' tiny Qwen3 (2 layers, the tokenizer's 260 ids)
SLOWER = 5.0  # the API's gradient steps this many times the bare loop's on the device: suspect


@contextlib.contextmanager
def served(folder: Path, args: list[str], env: dict[str, str]) -> Iterator[Server]:
    """A server on ``folder``, its output in ``folder/server.log``."""
    folder.mkdir()
    proc, url, key = start_server(folder, env, args, folder / "server.log", timeout=120)
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=600) as http:
            yield Server(http, proc.pid, url, key)
    finally:
        proc.terminate()
        proc.wait(60)


def chat_prompt(spec: BaseModelSpec) -> list[int]:
    """The token ids of the bench's chat messages, as the server renders and encodes them."""
    text = render_chat(spec.chat_template, MESSAGES, add_generation_prompt=True, continue_final_message=False)
    return Codec.from_folder(spec.folder).encode(text)


def get(server: Server, path: str) -> dict[str, Any]:
    r = server.http.get(path)
    assert r.status_code in (200, 503), r.text
    return dict(r.json())


def peak_mib(device: torch.device) -> float:
    """This process's peak CUDA allocation since the last reset; then resets it."""
    peak = torch.cuda.max_memory_allocated(device) / 2**20
    torch.cuda.reset_peak_memory_stats(device)
    return peak


class Bench:
    """The run's figures, checks, errors and timings, filled section by section."""

    def __init__(self, device: torch.device, budget: float) -> None:
        self.device, self.budget = device, budget
        self.figures: dict[str, Any] = {}
        self.checks: list[dict[str, Any]] = []
        self.errors: dict[str, str] = {}
        self.logs: list[Path] = []
        self.seconds: dict[str, float] = {}
        self.memory: dict[str, float | None] = {}
        self.started = time.perf_counter()
        self.mark = self.started

    def run(self, name: str, work: Callable[[], object]) -> None:
        """Section ``name``: a failure is recorded (with the servers' last log lines) and the run goes
        on with the next section, so that one device run gives every figure it can; past the time
        budget, the section is skipped."""
        if time.perf_counter() - self.started > self.budget:
            self.errors[name] = f"skipped: past the time budget of {self.budget:.0f} s"
        else:
            try:
                work()
            except Exception as exc:  # reported with the figures, never lost
                self.errors[name] = "".join(traceback.format_exception_only(exc)).strip()
                traceback.print_exc()
                for log in self.logs:
                    if log.exists():
                        print(f"--- last lines of {log}:\n" + "\n".join(log.read_text().splitlines()[-30:]))
        self.section(name)

    def section(self, name: str) -> None:
        """Close the section ``name`` (its seconds and this process's peak memory in it)."""
        now = time.perf_counter()
        self.seconds[name] = now - self.mark
        self.mark = now
        if self.device.type == "cuda":  # on the CPU, the servers' resident memory is what is shown
            self.memory[f"bench process peak, {name}"] = peak_mib(self.device)
            used = device_used_mib(self.device) or 0.0
            self.memory["whole GPU, most seen"] = max(self.memory.get("whole GPU, most seen") or 0.0, used)
        print(f"[{now - self.started:6.1f} s] {name} done", flush=True)

    def check(self, name: str, expected: str, observed: object, ok: bool | None) -> None:
        """``ok`` None: not meaningful on this device."""
        self.checks.append({"check": name, "expected": expected, "observed": str(observed), "ok": ok})


def health_checks(bench: Bench, server: Server, label: str, dtype: str) -> int:
    """The server's own report of where its base runs; returns the base's parameter bytes."""
    model = get(server, "/v1/health")["models"][0]
    kind = bench.device.type
    bench.check(f"{label}: /v1/health device", kind, model["device"], model["device"].split(":")[0] == kind)
    bench.check(
        f"{label}: /v1/health dtype", dtype, model["dtype"], model["dtype"] == dtype and model["loaded"]
    )
    queue = get(server, "/v1/system-check")["gpu_queue"]
    ok = queue["success"] and queue["device"].split(":")[0] == kind
    bench.check(f"{label}: /v1/system-check gpu_queue", f"success on {kind}", queue["device"], ok)
    held = process_memory_mib(server.pid, bench.device)
    weights = model["parameter_bytes"] / 2**20
    bench.memory[f"{label} after warm-up"] = held
    bench.check(
        f"{label}: its memory on the device holds the weights",
        f">= {weights:,.0f} MiB",
        f"{held:,.0f} MiB" if held is not None else "unreadable",
        None if held is None else held >= weights,
    )
    return int(model["parameter_bytes"])


def decode(bench: Bench, plain: Server, sampling: Server, model: Any, prompt: list[int], args: Any) -> None:
    """Engine over HTTP (greedy and seeded T=1, device sampling off and on) against ``generate``."""
    cases = {
        "engine greedy": (plain, {}),
        "engine T=1": (plain, {"temperature": 1.0, "seed": 1}),
        "device sampling greedy": (sampling, {}),
        "device sampling T=1": (sampling, {"temperature": 1.0, "seed": 1}),
    }
    best: dict[tuple[str, int], float] = {}
    first_static_s: dict[str, float] = {}  # its first call at a batch: the compilation, then the run
    for _ in range(args.rounds):
        for n in args.concurrency:
            for label, (server, fields) in cases.items():
                rate = engine_throughput(server, n, args.tokens, 1, **fields).wall
                best[label, n] = max(best.get((label, n), 0.0), rate)
            for label, cache in (("generate", None), (STATIC, "static")):
                started = time.perf_counter()
                rate = generate_throughput(model, prompt, n, args.tokens, cache).wall
                if cache:
                    first_static_s.setdefault(str(n), time.perf_counter() - started)
                best[label, n] = max(best.get((label, n), 0.0), rate)
    bench.figures["decode_tokens_per_s"] = {
        label: {str(n): best[label, n] for n in args.concurrency} for label in [*cases, "generate", STATIC]
    }
    bench.figures["static_generate_first_call_s"] = first_static_s


def adapter_rate(server: Server, count: int, tokens: int) -> float:
    """Tokens/s of ``count`` concurrent requests, request ``i`` on adapter ``lora{i}``."""
    produced: list[int] = []

    def one(i: int) -> None:
        body = {"messages": MESSAGES, "max_tokens": tokens, "temperature": 0, "ignore_eos": True}
        r = server.http.post("/v1/chat/completions", json={**body, "model": f"lora{i}"})
        r.raise_for_status()
        produced.append(r.json()["usage"]["completion_tokens"])

    start = time.perf_counter()
    concurrently([lambda i=i: one(i) for i in range(count)])
    return sum(produced) / (time.perf_counter() - start)


def adapters(bench: Bench, server: Server, count: int, args: Any) -> None:
    """``count`` concurrent requests, one per adapter, against ``count`` on the base alone."""
    adapter_rate(server, count, 2)  # the adapters load and become resident
    best = {"base": 0.0, "adapters": 0.0}
    for _ in range(args.rounds):
        best["base"] = max(best["base"], engine_throughput(server, count, args.tokens, 1).wall)
        best["adapters"] = max(best["adapters"], adapter_rate(server, count, args.tokens))
    bench.figures["adapters"] = {"requests": count, "tokens_per_s": best}


def training(bench: Bench, server: Server, folder: Path, args: Any) -> dict[str, Pair]:
    """A LoRA SFT job and a LoRA RL job through the API against bare peft loops on the device."""
    spec = from_folder(folder, (NAME,))
    placement = pick_placement(args.device)
    before = process_memory_mib(server.pid, bench.device)
    results: dict[str, Pair] = {}
    with tk.Client(server.url, server.key) as client:
        sft = BareSFT(spec, TRAINER_THREADS, placement, LoRAConfig())
        results["SFT"] = measure_sft(client, NAME, sft, args.sft_batches, args.repeats)
        rl = BareRL(spec, RL_SETTINGS, TRAINER_THREADS, placement, LoRAConfig())
        results["RL"] = measure_rl(client, NAME, rl, [args.groups], args.repeats)[args.groups]
    for label, loop in (("SFT", sft), ("RL", rl)):
        where = loop.device.type
        bench.check(
            f"bare {label} peft loop's model", bench.device.type, loop.device, where == bench.device.type
        )
    del sft, rl
    after = process_memory_mib(server.pid, bench.device)
    bench.memory["plain server after training"] = after
    grown = None if after is None or before is None else after - before
    bench.check(
        "plain server: its memory on the device grew while jobs trained (their base, adapter, AdamW)",
        "> 0 MiB",
        f"{grown:,.0f} MiB" if grown is not None else "unreadable",
        None if grown is None else grown > 0,
    )
    bench.figures["training"] = {
        label: {
            "api_s": pair.api.total,
            "bare_s": pair.bare,
            "ratio": pair.ratio,
            "gradient_steps": pair.api.gradient_steps,
            "phases_s": pair.api.phases,
        }
        for label, pair in results.items()
    }
    for label, pair in results.items():
        ratio = pair.api.phases["gradient steps"] / pair.bare
        bench.check(
            f"{label} job's gradient steps (timed by its events) against the bare loop on the device",
            f"< {SLOWER:.0f}x",
            f"{ratio:.2f}x",
            ratio < SLOWER if bench.device.type != "cpu" else None,  # on the CPU both ran there
        )
    return results


def sampling(bench: Bench, model: Any, prompt: list[int], args: Any) -> None:
    """In-process sampling costs per batch size, on the engine's runner over ``model``'s weights and
    on the engine's torch threads."""
    threads = torch.get_num_threads()
    torch.set_num_threads(ENGINE_THREADS)
    runner = Runner(model, len(prompt) + 8)
    with ThreadPoolExecutor(NOISE_THREADS) as pool:
        results = [sampling_costs(runner, prompt, n, args.steps, pool) for n in args.concurrency]
    torch.set_num_threads(threads)
    bench.figures["sampling"] = results


def graphs(bench: Bench, model: Any, prompt: list[int], adapters: list[Path], args: Any) -> None:
    """In-process decode steps as they come, at fixed shapes, and (on CUDA) as CUDA graphs, on a
    runner over ``model``'s weights with the adapters resident (bench/gpu_graphs.py)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(ENGINE_THREADS)
    runner = Runner(model, len(prompt) + args.steps + 2 * BLOCK, lora_bytes=1 << 30)
    results = graph_costs(runner, prompt, args.concurrency, args.steps + 1, adapters)
    torch.set_num_threads(threads)
    bench.figures["graphs"] = results
    cuda = bench.device.type == "cuda"
    for r in results:
        same = (
            r.get("identical_logits_steps") == r["steps"]
            and r.get("greedy_tokens_same")
            and r.get("seeded_tokens_same")
        )
        bench.check(
            f"batch {r['batch']}: CUDA graphs replay the eager fixed step (logits, greedy and seeded tokens)",
            "identical",
            "n/a on the CPU" if not cuda else f"{r['identical_logits_steps']} of {r['steps']} steps",
            bool(same) if cuda else None,
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu (the smoke)")
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per request")
    parser.add_argument(
        "--rounds", type=int, default=2, help="interleaved rounds (each measure keeps its best)"
    )
    parser.add_argument("--budget", type=float, default=420, help="seconds after which sections are skipped")
    parser.add_argument("--out", type=Path, help="write the figures here as JSON")
    parser.add_argument("--smoke", action="store_true", help="tiny model and sizes, for CI (--device cpu)")
    args = parser.parse_args()
    args.concurrency, args.adapters, args.steps, shape = (1, 16, 64), 16, 10, QWEN3_0_6B
    args.sft_batches, args.groups, args.repeats = 4, TARGET_GROUPS, 3
    if args.smoke:
        args.tokens, args.rounds, args.concurrency, args.adapters, args.steps = 4, 1, (1, 2, 4), 2, 2
        args.sft_batches, args.groups, args.repeats, shape = 1, 1, 1, SMOKE_SHAPE
    placement = pick_placement(args.device)
    bench = Bench(placement.device, args.budget)
    dtype = str(placement.dtype).removeprefix("torch.")
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp:
        root = Path(tmp)
        base = root / NAME
        built = write_folder(base, "qwen3", seed=0, **shape)
        args.parameters = sum(p.numel() for p in built.parameters())
        folders = [root / f"lora{i}" for i in range(args.adapters)]
        write_adapters(folders, built, rank=8)
        del built
        spec = from_folder(base, (NAME,))
        args.prompt_tokens = len(chat_prompt(spec))
        bench.section("model and adapters written")
        common = ["--base-model", f"{base}={NAME}", "--device", args.device]
        common += ["--max-num-seqs", str(max(args.concurrency))]
        named = ["--lora-modules", *(f"lora{i}={f}" for i, f in enumerate(folders))]
        bench.logs = [root / name / "server.log" for name in ("plain", "sampling")]
        args.weights = 0
        with (
            served(root / "plain", [*common, *named], {"TOOLKIT_DEVICE_SAMPLING": "0"}) as plain,
            served(root / "sampling", common, {"TOOLKIT_DEVICE_SAMPLING": "device"}) as on_device,
        ):

            def warm_up() -> None:  # the weights load, the caches grow to the largest batch
                for server in (plain, on_device):
                    engine_throughput(server, max(args.concurrency), 2, 1)
                args.weights = health_checks(bench, plain, "plain server", dtype)
                health_checks(bench, on_device, "device-sampling server", dtype)

            bench.run("servers started and warmed up", warm_up)
            model = load_model(spec, placement=placement)
            where = next(model.parameters()).device
            bench.check("generate's model", bench.device.type, where, where.type == bench.device.type)
            held = torch.cuda.memory_allocated(bench.device) if bench.device.type == "cuda" else None
            bench.check(
                "this process's CUDA memory holds generate's weights",
                f">= {args.weights / 2**20:,.0f} MiB",
                "n/a on the CPU" if held is None else f"{held / 2**20:,.0f} MiB",
                None if held is None else held >= args.weights,
            )
            prompt = chat_prompt(spec)
            # the graphs first: in-process and quick, before generate's compilation takes its time
            bench.run("graphs", lambda m=model: graphs(bench, m, prompt, folders, args))
            bench.run("decode", lambda m=model: decode(bench, plain, on_device, m, prompt, args))
            bench.run("sampling", lambda m=model: sampling(bench, m, prompt, args))
            del model
            bench.run("adapters", lambda: adapters(bench, plain, args.adapters, args))
            bench.run("training", lambda: training(bench, plain, base, args))
            bench.memory["plain server at the end"] = process_memory_mib(plain.pid, bench.device)
            bench.memory["device-sampling server at the end"] = process_memory_mib(
                on_device.pid, bench.device
            )
    report(bench, args)


if __name__ == "__main__":
    main()

"""Pre-train the built-in model ``toolkit/tiny-chat-1m`` on the synthetic chat data of
``builtin_chat_data.py`` and write its weights into the package (run once; the weights are committed).

    .venv/bin/python scripts/train_builtin_model.py            # 1,500 steps of 16 conversations
    .venv/bin/python scripts/train_builtin_model.py --random   # toolkit/tiny-random-1m's weights

It starts from the random initialisation the random built-in model (``toolkit/tiny-random-1m``) ships
(seed 0's, which ``--random`` writes into the package, doing nothing else), renders and masks every
conversation exactly as an SFT job does (assistant turns trained, through the model's own chat
template), and ends by printing greedy answers to a few prompts.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parent))
import builtin_chat_data as data
from transformers import LlamaForCausalLM

from toolkit.server.engine.model import (
    BUILTIN_WEIGHTS,
    RANDOM_NAME,
    RANDOM_WEIGHTS,
    builtin_spec,
    load_model,
    save_weights,
    tiny_config,
)
from toolkit.server.training.sequences import ChatFormat, Sample

MAX_LEN = 384


def samples(fmt: ChatFormat, rng: random.Random) -> list[Sample]:
    messages, tools = data.conversation(rng)
    return [s for s in fmt.conversation(messages, tools) if len(s.tokens) <= MAX_LEN]


def batches(fmt: ChatFormat, rng: random.Random, size: int, pad: int) -> Iterator[tuple[Tensor, Tensor]]:
    """Padded batches of ``size`` samples (token ids, labels with -100 where not trained), drawn from
    pools of 16 batches sorted by length so that little of each batch is padding."""
    while True:
        pool: list[Sample] = []
        while len(pool) < 16 * size:
            pool.extend(samples(fmt, rng))
        pool.sort(key=lambda s: len(s.tokens))
        chunks = [pool[i : i + size] for i in range(0, 16 * size, size)]
        rng.shuffle(chunks)
        for rows in chunks:
            width = max(len(s.tokens) for s in rows)
            ids = torch.full((size, width), pad)
            labels = torch.full((size, width), -100)
            for i, s in enumerate(rows):
                tokens = torch.tensor(s.tokens)
                ids[i, : len(s.tokens)] = tokens
                labels[i, : len(s.tokens)] = torch.where(torch.tensor(s.mask), tokens, -100)
            yield ids, labels


@torch.no_grad()
def greedy(model: torch.nn.Module, fmt: ChatFormat, messages: list[dict], tools: list | None) -> str:
    ids = fmt.encode(fmt.render(messages, tools, True))
    out: list[int] = []
    for _ in range(96):
        logits = model(torch.tensor([ids + out])).logits[0, -1]
        token = int(logits.argmax())
        if token in fmt.eos_ids:
            break
        out.append(token)
    return fmt.codec.decode(out)


def copy_skills(model: torch.nn.Module, fmt: ChatFormat, n: int = 20) -> dict[str, float]:
    """Greedy exact-match rates of the copying the data teaches, on fresh random words: repeat a word,
    copy a word into a tool call's argument, answer with a tool's result."""
    rng = random.Random(1234)
    words = [data.random_word(rng, 3, 5) for _ in range(n)]
    pin = [data.TOOLS["pin"]]
    repeat = sum(greedy(model, fmt, [{"role": "user", "content": f"repeat {w}"}], None) == w for w in words)
    calls = [greedy(model, fmt, [{"role": "user", "content": f"pin {w}"}], pin) for w in words]
    argument = sum(f'"arguments": {{"user": "{w}"}}' in call for w, call in zip(words, calls, strict=True))
    codes = [f"{rng.randrange(10000):04d}" for _ in range(n)]
    result = sum(
        greedy(model, fmt, data.tool_exchange("pin", f"pin {w}", {"user": w}, code)[:3], pin) == code
        for w, code in zip(words, codes, strict=True)
    )
    return {"repeat": repeat / n, "call argument": argument / n, "tool result": result / n}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=BUILTIN_WEIGHTS)
    parser.add_argument("--random", action="store_true", help=f"write {RANDOM_WEIGHTS.name} and stop")
    args = parser.parse_args()
    if args.random:
        torch.manual_seed(0)
        save_weights(LlamaForCausalLM(tiny_config()), RANDOM_WEIGHTS)
        return
    torch.set_num_threads(2)
    spec = builtin_spec(Path(tempfile.mkdtemp()), RANDOM_NAME)
    fmt = ChatFormat(spec)
    model = load_model(spec)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.95))
    warmup = max(1, args.steps // 50)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / args.steps))),
    )
    rng = random.Random(args.seed)
    started, smoothed = time.perf_counter(), None
    stream = batches(fmt, rng, args.batch, spec.pad_token_id)
    for step in range(1, args.steps + 1):
        ids, labels = next(stream)
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        smoothed = loss.item() if smoothed is None else 0.98 * smoothed + 0.02 * loss.item()
        if step % 50 == 0 or step == args.steps:
            elapsed = time.perf_counter() - started
            print(f"step {step}  loss {smoothed:.3f}  {elapsed / 60:.1f} min", flush=True)
        if step % 250 == 0 or step == args.steps:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            save_weights(model, args.out)
            model.eval()
            print(f"  copy skills (greedy, fresh words): {copy_skills(model, fmt)}", flush=True)
            model.train()
    model.eval()
    for question, tools in [
        ("hello", None),
        ("who are you?", None),
        ("capital of Japan?", None),
        ("weather in Oslo?", [data.TOOLS["weather"]]),
    ]:
        print(f"{question!r} -> {greedy(model, fmt, [{'role': 'user', 'content': question}], tools)!r}")


if __name__ == "__main__":
    main()

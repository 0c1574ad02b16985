"""What keeping every trajectory costs ``/log``, and how fast the stored ones are listed.

    .venv/bin/python bench/bench_trajectories.py [--trajectories 10000] [--write] [--smoke]

Each ``/log`` call carries one group of 8 agent trajectories of 4 turns (user, a sampled tool call,
the tool's answer, a sampled final answer; each sampled turn with its token ids and logprobs, as
ART sends them).
- In-process, same run, same SQLite settings: the store's ``log`` (facts read from each trajectory,
  the new columns, one ``executemany`` per call, the split metrics recomputed) against the plain
  JSON insert ``/log`` did before (the old columns only, same metrics), each from an empty store
  up to ``--trajectories``: ms per call and the ratio.
- Over HTTP on loopback (``toolkit serve`` in a temporary folder): ``/log`` ms per call and
  trajectories/s, then the p50 of 20 listings (limit 100) with filters at that many stored.
Prints a Markdown table; ``--write`` puts it in docs/performance.md ("## Trajectory store").
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from learning_runs import write_section
from server_process import start_server

from toolkit.server.store.db import Database
from toolkit.server.store.logs import LoggedGroup, TrajectoryLogs
from toolkit.server.store.migrations import MIGRATIONS
from toolkit.server.store.models import Models
from toolkit.server.store.users import Users
from toolkit.server.training.log_metrics import rollup
from toolkit.types.training import LogRequest, LoRAConfig, ModelCreate
from toolkit.types.trajectories import prompt_key

GROUP_SIZE = 8
WORDS = ["zebra", "otter", "falcon", "walrus", "heron", "lynx", "bison", "gecko", "koala", "moose"]
SECTION = "## Trajectory store"


def sampled(
    rng: random.Random, content: str | None, n: int, calls: list[dict[str, Any]] | None
) -> dict[str, Any]:
    ids = [rng.randrange(32000) for _ in range(n)]
    return {
        "finish_reason": "length" if rng.random() < 0.05 else "tool_calls" if calls else "stop",
        "index": 0,
        "message": {"role": "assistant", "content": content, "tool_calls": calls},
        "logprobs": {
            "content": [{"token": f"token_id:{i}", "logprob": -rng.random(), "top_logprobs": []} for i in ids]
        },
        "prompt_token_ids": [rng.randrange(32000) for _ in range(40)],
        "token_ids": ids,
    }


def group(rng: random.Random, g: int) -> dict[str, Any]:
    """One group of 8 four-turn trajectories on one of 50 prompts; one group in four has equal rewards."""
    word = WORDS[g % len(WORDS)]
    question = f"Look up the {word} entry number {g % 50} and summarise it."
    trajectories = []
    for t in range(GROUP_SIZE):
        call = {
            "id": f"call_{g}_{t}",
            "type": "function",
            "function": {"name": "lookup", "arguments": json.dumps({"key": word})},
        }
        trajectories.append(
            {
                "messages_and_choices": [
                    {"role": "user", "content": question},
                    sampled(rng, None, 24, [call]),
                    {"role": "tool", "tool_call_id": call["id"], "content": f"The {word} is an animal. " * 4},
                    sampled(rng, f"The {word} is an animal, says entry {g % 50}.", 16, None),
                ],
                "reward": 0.0 if g % 4 == 0 else float(rng.random() < 0.5),
                "metrics": {"tool_calls": 1, "turns": 2},
                "metadata": {"trace_call_id": f"call-{g}-{t}"},
            }
        )
    return {"trajectories": trajectories}


def plain_log(db: Database, models: Models, model_id: str, req: LogRequest) -> None:
    """``/log`` before trajectories were kept with their facts: the JSON and reward only, and the
    split metrics recomputed from the metrics read out of each stored trajectory's JSON."""
    with db.write() as conn:
        checkpoint = models.latest_checkpoint(model_id)
        for g in req.trajectory_groups:
            data = json.dumps(g.model_dump(mode="json", exclude={"trajectories"}))
            group_id = conn.execute(
                "INSERT INTO log_groups (model_id, split, step, num_trajectories, num_exceptions, data,"
                " created_at) VALUES (?, ?, ?, ?, ?, ?, '')",
                (model_id, req.split, checkpoint.step, len(g.trajectories), len(g.exceptions), data),
            ).lastrowid
            conn.executemany(
                "INSERT INTO trajectories (group_id, model_id, split, step, reward, data)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (group_id, model_id, req.split, checkpoint.step, t.reward, t.model_dump_json())
                    for t in g.trajectories
                ],
            )
        step = checkpoint.step
        groups = conn.execute(
            "SELECT id, num_exceptions, data FROM log_groups WHERE model_id = ? AND split = ? AND step = ?",
            (model_id, req.split, step),
        ).fetchall()
        rows = conn.execute(  # the metrics read out of each whole trajectory, as /log did
            "SELECT group_id, reward, json_extract(data, '$.metrics') FROM trajectories"
            " WHERE model_id = ? AND split = ? AND step = ?",
            (model_id, req.split, step),
        ).fetchall()
        members: dict[int, list[tuple[float, dict[str, object]]]] = {}
        for group_id, reward, metrics in rows:
            members.setdefault(group_id, []).append((reward, json.loads(metrics or "{}")))
        logged = [
            LoggedGroup([r for r, _ in members[g[0]]], [m for _, m in members[g[0]]], {}, g[1])
            for g in groups
        ]
        models.merge_metrics(conn, checkpoint.id, rollup(req.split, logged))


def in_process(requests: list[LogRequest], folder: Path) -> dict[str, float]:
    """ms per call of the store's log and of the plain insert, each from an empty store."""
    out = {}
    for name in ("plain", "kept"):
        db = Database(folder / f"{name}.db", MIGRATIONS)
        models = Models(db)
        user = Users(db).get_or_create("bench")
        model, _ = models.create(user, ModelCreate(project="bench", name=name, base_model="b"), LoRAConfig())
        logs = TrajectoryLogs(db, models, rollup)
        start = time.perf_counter()
        for req in requests:
            if name == "kept":
                logs.log(model.id, req)
            else:
                plain_log(db, models, model.id, req)
        out[name] = (time.perf_counter() - start) * 1000 / len(requests)
        db.close()
    return out


def p50_ms(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def over_http(bodies: list[dict[str, Any]], folder: Path, repeats: int) -> dict[str, float]:
    proc, url, key = start_server(folder)
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=120) as http:
            model = http.post(
                "/v1/preview/models",
                json={"project": "bench", "name": "traj", "base_model": "toolkit/tiny-chat-1m"},
            )
            path = f"/v1/preview/models/{model.json()['id']}"
            start = time.perf_counter()
            for body in bodies:
                http.post(f"{path}/log", json=body).raise_for_status()
            elapsed = time.perf_counter() - start
            out = {"http_ms": elapsed * 1000 / len(bodies), "http_per_s": len(bodies) * GROUP_SIZE / elapsed}
            key_of_prompt = prompt_key(
                [
                    {
                        "role": "user",
                        "content": bodies[0]["trajectory_groups"][0]["trajectories"][0][
                            "messages_and_choices"
                        ][0]["content"],
                    }
                ]
            )
            for name, params in QUERIES.items():
                params = {**params, "prompt_key": key_of_prompt} if params.get("prompt_key") else params
                out[name] = p50_ms(
                    lambda p=params: http.get(f"{path}/trajectories", params=p).raise_for_status(), repeats
                )
            return out
    finally:
        proc.terminate()
        proc.wait(30)


QUERIES: dict[str, dict[str, Any]] = {
    "newest first": {"limit": 100},
    "split + step range + reward range": {
        "split": "train",
        "step_min": 0,
        "step_max": 0,
        "reward_min": 0.5,
        "limit": 100,
    },
    "zero-std groups only": {"zero_std_only": True, "limit": 100},
    "truncated only": {"truncated_only": True, "limit": 100},
    "text search": {"search": "entry 7.", "limit": 100},
    "one prompt over time": {"prompt_key": True, "limit": 100},
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trajectories", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--smoke", action="store_true", help="200 trajectories, 3 repeats")
    parser.add_argument("--write", action="store_true", help="write the table to docs/performance.md")
    args = parser.parse_args()
    total, repeats = (200, 3) if args.smoke else (args.trajectories, args.repeats)
    rng = random.Random(0)
    bodies = [{"split": "train", "trajectory_groups": [group(rng, g)]} for g in range(total // GROUP_SIZE)]
    requests = [LogRequest.model_validate(b) for b in bodies]
    with tempfile.TemporaryDirectory() as tmp:
        store = in_process(requests, Path(tmp))
        http = over_http(bodies, Path(tmp) / "server", repeats)
    stored = len(bodies) * GROUP_SIZE
    lines = [
        f"| measure ({stored:,} trajectories, groups of {GROUP_SIZE} x 4 turns) | value |",
        "|---|---|",
        f"| in-process `/log` store, ms per call, plain JSON insert (before) | {store['plain']:.2f} |",
        f"| in-process `/log` store, ms per call, every trajectory kept (facts) | {store['kept']:.2f} |",
        f"| ratio kept / plain | {store['kept'] / store['plain']:.2f} |",
        f"| `/log` over HTTP, ms per call | {http['http_ms']:.2f} |",
        f"| `/log` over HTTP, trajectories/s | {http['http_per_s']:,.0f} |",
        *(f"| list p50 ms at {stored:,} stored: {name} | {http[name]:.1f} |" for name in QUERIES),
    ]
    table = "\n".join(lines)
    print(table)
    if args.write:
        command = "`.venv/bin/python bench/bench_trajectories.py`"
        write_section(
            SECTION, f"{SECTION}\n\nProduced by {command} (`--smoke`: 200 trajectories).\n\n{table}\n"
        )


if __name__ == "__main__":
    main()

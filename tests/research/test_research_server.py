"""Research functions over HTTP against the real local server: best-of-group SFT, re-scoring (a
callable and the judge) without touching what is stored, evaluation across checkpoints, and the
lossless export of stored RL trajectories that trains again."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import toolkit as tk
from conftest import LocalServer
from support.training_helpers import BASE
from toolkit import research
from toolkit.client.jobs import TrainingJobFailed
from toolkit.research.judge import SCORES
from toolkit.rollouts import gather
from toolkit.tasks import lookup, reverse
from toolkit.types.training import Model, Trajectory, TrajectoryGroup


@dataclass
class Logged:
    client: tk.Client
    source: Model  # its rollouts are logged (split "train", step 0)
    records: list[Any]  # as client.models.trajectories returns them
    trained: Model  # trained by sft_from_best on the best rollouts
    job_id: str


def new_model(client: tk.Client, prefix: str) -> Model:
    return client.models.create(
        project="tests-research", name=f"{prefix}-{uuid.uuid4().hex[:8]}", base_model=BASE
    )


@pytest.fixture(scope="module")
def logged(server: LocalServer) -> Iterator[Logged]:
    with server.client() as client:
        source = new_model(client, "rollouts")
        words = reverse.sample_words(3, seed=7, split="eval")
        groups = gather(
            words, reverse.rollout(client, research.checkpoint_name(source, 0)), group_size=2, progress=False
        )
        client.models.log(source.id, split="train", trajectory_groups=groups)
        records = research.stored_records(client, source.id)
        trained = new_model(client, "best")
        job = research.sft_from_best(
            client,
            trained.id,
            records,
            top_k=1,
            config={"batch_size": 3, "learning_rate": 1e-4},
            name=trained.name,
        )
        job.wait(progress=False)
        yield Logged(client, source, records, trained, job.id)


def test_best_of_group_starts_an_sft_job_that_succeeds(logged: Logged) -> None:
    job = logged.client.training_jobs.retrieve(logged.job_id)
    assert job.status == "succeeded" and job.kind == "sft" and job.result_step == 1
    uploaded = [a.num_records for a in logged.client.artifacts.list() if a.name == logged.trained.name]
    assert uploaded == [3]  # the best trajectory of each of the 3 groups
    assert [c.step for c in logged.client.models.checkpoints.list(logged.trained.id)] == [0, 1]


def test_rescore_with_a_callable_leaves_the_stored_trajectories_alone(logged: Logged) -> None:
    def length(t: Trajectory) -> tuple[float, dict[str, int]]:
        answer = t.choices()[-1].message.content or ""
        return float(len(answer)), {"answer_chars": len(answer)}

    new = research.rescore(logged.records, length)
    old = [t for g in research.as_groups(logged.records) for t in g.trajectories]
    flat = [t for g in new for t in g.trajectories]
    assert [t.reward for t in flat] == [float(len(t.choices()[-1].message.content or "")) for t in old]
    assert [t.metrics["independent_reward"] for t in flat] == [t.reward for t in old]
    frame = research.comparison(new)
    assert list(frame["old_reward"]) == [t.reward for t in old]
    assert list(frame["delta"]) == [n.reward - o.reward for n, o in zip(flat, old, strict=True)]
    fig = research.rescore_figure(frame)
    assert sum(sum(int(c[0]) for c in trace.customdata) for trace in fig.data[:2]) == len(flat)
    assert research.stored_records(logged.client, logged.source.id) == logged.records


def test_rescore_async_awaits_the_reward(logged: Logged) -> None:
    async def constant(t: Trajectory) -> float:
        await asyncio.sleep(0)
        return 0.25

    new = asyncio.run(research.rescore_async(logged.records, constant))
    assert {t.reward for g in new for t in g.trajectories} == {0.25}
    with pytest.raises(TypeError, match="rescore_async"):
        research.rescore(logged.records, constant)


def check_judged(before: list[TrajectoryGroup], after: list[TrajectoryGroup]) -> None:
    for group, judged in zip(before, after, strict=True):
        for old, new in zip(group.trajectories, judged.trajectories, strict=True):
            assert new.reward in SCORES and new.metrics["ruler_score"] == new.reward
            assert new.metrics["independent_reward"] == old.reward
            assert new.logs[-1].startswith("judge: ")
            assert new.messages_and_choices == old.messages_and_choices


def test_judge_ranks_each_group_through_the_chat_endpoint(logged: Logged) -> None:
    groups = research.as_groups(logged.records)[:1]
    check_judged(groups, research.judge(logged.client, groups, model=BASE, max_explanation=4))
    assert research.stored_records(logged.client, logged.source.id) == logged.records


async def test_judge_async_on_an_async_client(server: LocalServer, logged: Logged) -> None:
    groups = research.as_groups(logged.records)[1:2]
    async with server.async_client() as client:
        judged = await research.judge_async(client, groups, model=BASE, max_explanation=4)
    check_judged(groups, judged)


def test_evaluate_runs_every_checkpoint_and_logs_each_at_its_step(logged: Logged) -> None:
    client, model = logged.client, logged.trained
    words = reverse.sample_words(2, seed=3, split="eval")
    result = research.evaluate(client, model.id, words, reverse.rollout, steps=[0, 1], progress=False)
    frame = result.frame
    assert list(frame["step"]) == [0, 1] and list(frame["n"]) == [2, 2]
    assert list(frame["logged"]) == [True, True]
    for step, groups in result.groups.items():
        assert [t.final_policy_version for g in groups for t in g.trajectories] == [step, step]
        rewards = [t.reward for g in groups for t in g.trajectories]
        assert frame.set_index("step").loc[step, "score_mean"] == sum(rewards) / 2
    stored = list(client.models.trajectories(model.id, split="val"))
    assert sorted(r.step for r in stored) == [0, 0, 1, 1]
    metrics = {c.step: c.metrics for c in client.models.checkpoints.list(model.id)}
    for step in (0, 1):  # each step's val metrics are its own evaluation's, not mixed
        assert metrics[step]["val/reward"] == frame.set_index("step").loc[step, "score_mean"]
    assert list(result.figure().data[0].y) == list(frame["score_mean"])


def test_evaluate_on_the_hosted_api_takes_the_model_and_logs_only_the_newest_step(
    server: LocalServer, logged: Logged
) -> None:
    """The hosted API has no ``models.retrieve`` and no ``/log`` step: given the ``Model`` (as
    ``models.create`` returned it, ``latest_step`` 0 by now stale), the newest checkpoint's groups
    are logged and the older step's only scored."""
    stale = logged.trained.model_copy(update={"latest_step": 0})
    with tk.Client(server.url, server.key, deployment="wandb") as hosted:
        assert not hosted.deployment.extensions
        result = research.evaluate(
            hosted, stale, ["cat"], reverse.rollout, steps=[0, 1], split="val-hosted", progress=False
        )
    assert list(result.frame["logged"]) == [False, True]
    assert [r.step for r in logged.client.models.trajectories(stale.id, split="val-hosted")] == [1]


def test_evaluate_with_your_prompts_and_scorer(logged: Logged) -> None:
    def scorer(t: Trajectory) -> float:
        return 1.0 if t.choices()[-1].finish_reason == "length" else 0.5

    task = research.chat_task(scorer, max_tokens=2, ignore_eos=True)
    result = research.evaluate(
        logged.client, logged.trained.id, ["reverse cat"], task, steps=[1], log=False, progress=False
    )
    assert result.frame.to_dict("records") == [
        {
            "step": 1,
            "score_mean": 1.0,
            "score_std": 0.0,
            "score_min": 1.0,
            "score_max": 1.0,
            "n": 1,
            "errors": 0,
            "logged": False,
        }
    ]
    with pytest.raises(ValueError, match="nothing to evaluate"):
        research.evaluate(logged.client, logged.trained.id, [], task, steps=[1], progress=False)


async def test_evaluate_async_defaults_to_every_checkpoint(server: LocalServer, logged: Logged) -> None:
    async with server.async_client() as client:
        result = await research.evaluate_async(
            client, logged.trained.id, ["cat"], reverse.async_rollout, log=False, progress=False
        )
    assert list(result.frame["step"]) == [0, 1] and list(result.frame["n"]) == [1, 1]
    assert not result.frame["logged"].any()
    assert [g.trajectories[0].final_policy_version for g in result.groups[1]] == [1]


def test_stored_multi_turn_trajectories_export_as_they_were_logged(logged: Logged, tmp_path: Path) -> None:
    client = logged.client
    model = new_model(client, "agent")
    rows = [lookup.demonstration(s) for s in lookup.scenarios(2, seed=5)]
    groups = research.from_rows(rows, "openai")
    for g, reward in zip(groups, (1.0, 0.0), strict=True):
        g.trajectories[0].reward = reward
    client.models.log(model.id, split="train", trajectory_groups=groups)
    stored = research.stored_groups(client, model.id)
    assert sorted(stored, key=lambda g: -g.trajectories[0].reward) == groups
    assert research.to_rows(stored, "openai") == [
        {**r, "parallel_tool_calls": True} for r in rows_weighted(rows)
    ]
    path = research.to_parquet(stored, tmp_path / "agent.parquet")
    assert research.read_parquet(path) == stored


def rows_weighted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The demonstrations as the OpenAI export writes them: assistant messages weighted 1."""
    return [
        {**r, "messages": [{**m, "weight": 1} if m["role"] == "assistant" else m for m in r["messages"]]}
        for r in rows
    ]


def test_lossless_jsonl_gives_back_the_stored_rl_trajectories_which_train_again(
    logged: Logged, tmp_path: Path
) -> None:
    """Trajectories an RL job stored -> ``to_jsonl(keep_logprobs=True)`` -> ``read_jsonl``: equal field
    by field, sampler logprobs included, so an RL job trains on them; ART's form (logprobs dropped)
    cannot be RL-trained without ``allow_training_without_logprobs``."""
    client = logged.client
    model = new_model(client, "lossless")
    words = reverse.sample_words(2, seed=11, split="eval")
    groups = gather(
        words, reverse.rollout(client, research.checkpoint_name(model, 0)), group_size=2, progress=False
    )
    for g in groups:  # a reward spread in each group, so both are trained
        g.trajectories[0].reward, g.trajectories[1].reward = 1.0, 0.0
    client.training_jobs.create(model_id=model.id, trajectory_groups=groups).wait(progress=False)
    stored = research.stored_groups(client, model.id, split="train")
    assert [r.trained_step for r in research.stored_records(client, model.id)] == [1] * 4
    choices = [c for g in stored for t in g.trajectories for c in t.choices()]
    assert choices and all(c.logprobs and c.logprobs.content and c.token_ids for c in choices)

    back = research.read_jsonl(research.to_jsonl(stored, tmp_path / "groups.jsonl", keep_logprobs=True))
    originals = [t for g in stored for t in g.trajectories]
    copies = [t for g in back for t in g.trajectories]
    assert len(copies) == len(originals) == 4
    for copy, original in zip(copies, originals, strict=True):
        for name in Trajectory.model_fields:
            assert getattr(copy, name) == getattr(original, name), name
        assert copy.model_extra == original.model_extra
    assert back == stored

    job = client.training_jobs.create(model_id=model.id, trajectory_groups=back)
    assert job.wait(progress=False).step == 2
    events = list(client.training_jobs.events.list(job.id, limit=100))
    assert [e.type for e in events].count("gradient_step") >= 1

    stripped = research.read_jsonl(research.to_jsonl(stored, tmp_path / "art.jsonl"))
    with pytest.raises(TrainingJobFailed, match="no logprobs"):
        client.training_jobs.create(model_id=model.id, trajectory_groups=stripped).wait(progress=False)

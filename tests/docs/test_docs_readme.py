"""The README tells the truth: its "Your own task" example runs as written against a local server,
its table of ``groups_frame`` columns is the frame's, and its intro quotes the built-in model."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from statistics import mean
from typing import Any

import httpx
import pytest

import toolkit as tk
from conftest import LocalServer

README = Path(__file__).resolve().parents[2] / "README.md"
MARK = "<!-- tested by tests/docs/test_docs_readme.py -->"
TESTED_BLOCK = re.compile(re.escape(MARK) + r"\n```python\n(.*?)\n```", re.DOTALL)


def section(title: str) -> str:
    """The README's ``## title`` section, up to the next ``## `` heading."""
    text = README.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


@pytest.fixture(scope="module")
def readme_namespace(server: LocalServer) -> Iterator[dict[str, Any]]:
    """The variables left by running the README's tested blocks in order, as a user would,
    with ``tk.connect()`` pointed at the suite's server through the environment."""
    blocks = TESTED_BLOCK.findall(README.read_text())
    assert len(blocks) == README.read_text().count(MARK) == 3
    namespace: dict[str, Any] = {}
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TOOLKIT_BASE_URL", server.url)
        env.setenv("TOOLKIT_API_KEY", server.key)
        for block in blocks:
            exec(compile(block, str(README), "exec"), namespace)
    yield namespace
    namespace["client"].close()


def test_your_own_task_runs_as_written(readme_namespace: dict[str, Any]) -> None:
    ns = readme_namespace
    groups, model = ns["groups"], ns["model"]
    assert [len(g.trajectories) for g in groups] == [8] * len(ns["words"])
    choice = groups[0].trajectories[0].messages_and_choices[-1]
    assert choice.token_ids and choice.logprobs is not None  # trainable, as the RL job needs
    assert ns["sft_job"].refresh().status == "succeeded"
    assert ns["job"].refresh().status == "succeeded"
    checkpoint = ns["checkpoint"]
    assert checkpoint.step == ns["warm_start"].step + 1
    # trained when a group's answers differ in reward (after the warm start all 64 may be right);
    # else, as the README says, trained is false and the job warns why
    spread = sum(len({t.reward for t in g.trajectories}) > 1 for g in groups)
    assert checkpoint.metrics["data/step_num_groups_trainable"] == spread
    assert checkpoint.trained is (spread > 0) is (checkpoint.metrics["data/step_num_gradient_steps"] >= 1)
    warned = [e.data["code"] for e in ns["job"].events(follow=False) if e.type == "warning"]
    assert ("nothing_trained" in warned) is not checkpoint.trained, warned
    assert checkpoint.metrics["train/reward"] == pytest.approx(
        mean(t.reward for g in groups for t in g.trajectories)
    )
    val = [t.reward for g in ns["val_groups"] for t in g.trajectories]
    assert ns["logged"].metrics["val/reward"] == pytest.approx(mean(val))
    assert ns["latest"] == f"wandb-artifact:///{model.entity}/{model.project}/{model.name}"


def test_the_reward_is_as_documented(readme_namespace: dict[str, Any]) -> None:
    reward = readme_namespace["reward"]
    assert reward("cat", "CAT", "stop") == 1.0
    assert reward("cat", "CAT", "length") == 0.5  # every letter right, but the turn did not end
    assert reward("cat", "CXT", "stop") == pytest.approx(1 / 3)
    assert reward("cat", None, "stop") == 0.0


def test_the_groups_frame_columns_are_the_documented_ones() -> None:
    table = section("Your own task").split("**The columns of `tk.frames.groups_frame(groups)`**")[1]
    documented = re.findall(r"^\| `([^`]+)` \|", table.split("\n\n**")[0], re.MULTILINE)
    assert documented == [*tk.frames.TRAJECTORY_COLUMNS, "metric/<key>", "meta/<key>"]


def test_the_readme_quotes_the_built_in_models_greeting_and_says_a_task_needs_a_warm_start(
    http: httpx.Client,
) -> None:
    intro = README.read_text().split("\n## ")[0]
    quoted = re.search(r"\(`hello` → `([^`]+)`\)", intro)
    assert quoted, "the intro quotes the built-in model's answer to hello"
    body = http.post(
        "/v1/chat/completions",
        json={
            "model": "toolkit/tiny-chat-1m",
            "messages": [{"role": "user", "content": "hello"}],
            "temperature": 0,
        },
    ).json()
    assert body["choices"][0]["message"]["content"] == quoted.group(1)
    assert "SFT warm start" in intro and "toolkit/tiny-random-1m" in intro

"""TrajectoryBrowser over the real local server after two short real RL steps and a traced agent
rollout: quiet init, groups as rows, the server's filters, a trajectory read as a chat, the same
prompt over time, the trace and checkpoint links, and the static HTML a notebook export shows."""

from __future__ import annotations

import threading
from typing import Any

import ipywidgets as w
import pytest
from IPython.display import display

from support.agent_support import Lookup, ScriptedChat, call_then_answer
from support.traces_helpers import new_project
from support.widget_support import click, descendants, group, new_model, recording_client, shell
from toolkit import tracing
from toolkit.rollouts import Agent
from toolkit.types.training import Trajectory, TrajectoryGroup
from toolkit.widgets import CheckpointExplorer, TraceBrowser, TrajectoryBrowser

__all__ = ["shell"]  # the fixture, imported for its tests


def odd(reward: float, *, truncated: bool = False, error: str | None = None) -> Trajectory:
    return Trajectory(
        messages_and_choices=[
            {"role": "user", "content": "spell zebra backwards"},
            {
                "message": {"role": "assistant", "content": "arbez"},
                "finish_reason": "length" if truncated else "stop",
            },
        ],
        reward=reward,
        metadata={"error": error} if error else {},
    )


@pytest.fixture(scope="module")
def run(server: Any) -> dict[str, Any]:
    """Two RL steps on the same prompts (one zero-std group each), then a truncated, a failed and a
    traced tool-using rollout logged as ``val`` at step 2."""
    client = server.client()
    model = new_model(client, "rvbrowser")
    for _ in range(2):
        client.training_jobs.create(
            model_id=model.id,
            trajectory_groups=[group([0.0, 1.0]), group([1.0, 1.0], prompt="3+3?")],
            experimental_config={"allow_training_without_logprobs": True},
        ).wait(progress=False)
    project = new_project()
    tracing.enable(client, project)
    try:
        agent = Agent(ScriptedChat(call_then_answer), "lookup:step2", Lookup).rollout("abc")  # type: ignore[arg-type]
    finally:
        tracing.disable()
    agent.reward = 0.5
    logged = [TrajectoryGroup(trajectories=[odd(0.2, truncated=True), odd(0.1, error="tool blew up"), agent])]
    client.models.log(model.id, split="val", trajectory_groups=logged)
    return {"model": model, "project": project, "call": str(agent.metadata["trace_call_id"])}


def cells(browser: TrajectoryBrowser) -> list[w.Button]:
    return [b for row in browser.grid.children for b in row.children if isinstance(b, w.Button)]


def test_init_is_quiet_and_start_shows_the_groups_as_rows(server: Any, run: Any) -> None:
    client, sent = recording_client(server)
    before = set(threading.enumerate())
    browser = TrajectoryBrowser(client, run["model"].id)
    assert sent == [] and not browser.started
    browser.start()
    assert browser.status_line.text == "" and browser.model.value == run["model"].id
    assert browser.steps.value == (0, 2)
    assert (browser.num_shown, browser.num_groups) == (11, 5)  # 2 steps x 2 groups of 2, and 3 logged
    assert len(browser.grid.children) == 5 and len(cells(browser)) == 11
    rewards = {b.description.split()[0] for b in cells(browser)}
    assert {"0.00", "1.00", "0.50"} <= rewards
    trained = [b.description for b in cells(browser) if " A" in b.description]
    assert (
        len(trained) == 8 and "1.00 A+1.00" in trained and "0.00 A-1.00" in trained
    )  # advantages of the RL jobs
    low, high = [
        next(b.style.button_color for b in cells(browser) if b.description.startswith(r))
        for r in ("0.00", "1.00")
    ]
    assert low != high  # rewards are colored
    browser.close()
    assert set(threading.enumerate()) - before == set()
    assert browser.comm is None and all(d.comm is None for d in descendants(browser))


@pytest.mark.parametrize(
    ("control", "value", "rows"),
    [
        ("zero_std", True, [(0, "train", 2), (1, "train", 2)]),
        ("truncated", True, [(2, "val", 1)]),
        ("errors", True, [(2, "val", 1)]),
        ("search", "zebra", [(2, "val", 2)]),
        ("split", "val", [(2, "val", 3)]),
        ("reward_min", "0.9", [(0, "train", 3), (1, "train", 3)]),
        ("reward_max", "0.15", [(0, "train", 1), (1, "train", 1), (2, "val", 1)]),
        ("steps", (1, 1), [(1, "train", 4)]),
    ],
)
def test_filters_go_to_the_server_and_change_the_rows(
    server: Any, run: Any, control: str, value: Any, rows: list[tuple[int, str, int]]
) -> None:
    browser = TrajectoryBrowser(server.client(), run["model"].id).start()
    getattr(browser, control).value = value
    click(browser, "Apply")
    assert browser.status_line.text == ""
    shown: dict[tuple[int, str], int] = {}
    for t in browser.records:
        shown[(t.step, t.split)] = shown.get((t.step, t.split), 0) + 1
    assert sorted((s, sp, n) for (s, sp), n in shown.items()) == rows
    assert browser.num_shown == sum(n for *_, n in rows) == len(cells(browser))
    browser.close()


def test_a_model_not_of_the_user_is_an_error_line(server: Any) -> None:
    browser = TrajectoryBrowser(server.client(), "no-such-model").start()
    assert browser.status_line.kind == "error"
    assert "no-such-model is not one of yours" in browser.status_line.text
    assert browser.shown_model is None and browser.summary() == "TrajectoryBrowser: no model picked"
    browser.close()


def test_a_bad_reward_bound_is_an_error_line_and_keeps_the_rows(server: Any, run: Any) -> None:
    browser = TrajectoryBrowser(server.client(), run["model"].id).start()
    browser.reward_min.value = "lots"
    click(browser, "Apply")
    assert browser.status_line.kind == "error" and "reward ≥ needs a number" in browser.status_line.text
    assert browser.num_shown == 11
    browser.reward_min.value, browser.reward_max.value = "1", "0"
    click(browser, "Apply")
    assert "422" in browser.status_line.text and browser.num_shown == 11
    browser.close()


def test_clicking_a_trajectory_shows_it_as_a_chat_with_tool_calls_folded(server: Any, run: Any) -> None:
    browser = TrajectoryBrowser(server.client(), run["model"].id).start()
    (agent_cell,) = [
        b for b in cells(browser) if b.description.startswith("0.50") and " A" not in b.description
    ]
    agent_cell.click()
    assert browser.opened is not None and browser.trajectory_id == browser.opened.id
    chat = browser.chat.value
    assert "user: code abc" in chat and "step 2 · val" in chat
    assert chat.count('class="tool-call"') == 2 and chat.count('class="tool-result"') == 2
    assert "assistant: 417" in chat
    (failed,) = [b for b in cells(browser) if "⚠" in b.description]
    failed.click()
    assert "tool blew up" in browser.chat.value and "arbez" in browser.chat.value
    browser.close()


def test_same_prompt_over_time_shows_one_entry_per_step(server: Any, run: Any) -> None:
    browser = TrajectoryBrowser(server.client(), run["model"].id).start()
    browser.steps.value = (1, 1)
    click(browser, "Apply")
    browser.open_trajectory(
        next(t.id for t in browser.records if t.trajectory.messages()[0]["content"] == "2+2?")
    )
    click(browser, "Same prompt over time")
    assert browser.status_line.text == "" and browser.prompt_steps == [0, 1]
    assert [len(v) for _, v in sorted(browser.over_time.items())] == [2, 2]
    assert browser.prompt_view.value.count('class="prompt-step"') == 2
    assert "3+3?" not in browser.prompt_view.value
    assert browser.prompt_view.value.count("</b> · advantage ") == 4  # each rollout, trained on
    browser.close()


def test_links_open_the_trace_call_and_the_checkpoints(server: Any, run: Any) -> None:
    browser = TrajectoryBrowser(server.client(), run["model"].id).start()
    browser.open_trajectory(next(t.id for t in browser.records if t.trace_call_id))
    click(browser, "Open trace")
    assert "give the trace project" in browser.status_line.text
    browser.trace_project.value = run["project"]
    click(browser, "Open trace")
    (traces,) = browser.link_area.children
    assert isinstance(traces, TraceBrowser) and traces.call_id == run["call"]
    assert traces.steps["kind"].tolist() == ["model", "tool", "tool", "model"]
    browser.open_trajectory(next(t.id for t in browser.records if t.step == 1 and t.advantage is not None))
    click(browser, "Open checkpoint")
    (explorer,) = browser.link_area.children
    assert isinstance(explorer, CheckpointExplorer) and traces.comm is None  # the trace view closed
    assert explorer.selection.value == ((run["model"].id, 1), (run["model"].id, 2))
    browser.close()
    assert explorer.comm is None


def test_the_output_carries_a_static_html_copy(server: Any, run: Any, shell: Any) -> None:
    browser = TrajectoryBrowser(server.client(), run["model"].id)
    display(browser)
    browser.open_trajectory(browser.records[0].id)
    browser.same_prompt()
    data = shell.display_pub.outputs[-1]["data"]
    assert data["text/plain"].startswith(f"TrajectoryBrowser: model {run['model'].id[:8]}, 11 trajectories")
    page = data["text/html"]
    assert page.count("<tr>") == 6 and "hsl(" in page  # header and the five groups, colored
    assert browser.chat.value in page and 'class="prompt-step"' in page
    browser.close()

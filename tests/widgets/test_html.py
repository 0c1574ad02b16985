"""Rich HTML reprs of the wire types (attached by ``import toolkit``); text repr unchanged outside Jupyter.
Text that a model wrote shows its control characters as escapes, in the cards, frames and chat views."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import toolkit  # noqa: F401  (installs the reprs)
from support.widget_support import group
from toolkit import _theme, frames
from toolkit._text import visible
from toolkit.types.chat import ChatCompletion
from toolkit.types.service import AcceleratorCheck, ComponentCheck, SystemCheck
from toolkit.types.traces import Call
from toolkit.types.training import Checkpoint, Model, TrainingJob
from toolkit.widgets.conversation import message_html


def test_job_repr_shows_status_and_escaped_error() -> None:
    job = TrainingJob(id="j1", status="failed", kind="rl", num_sequences=3, error="boom <script>")
    out = job._repr_html_()  # type: ignore[attr-defined]
    assert "Training job" in out and ">failed</span>" in out and f"background:{_theme.ERROR}" in out
    assert "boom &lt;script&gt;" in out and "<script>" not in out
    assert repr(job).startswith("TrainingJob(id='j1'")
    waiting = TrainingJob(id="j2", status="queued", queue_position=2)._repr_html_()  # type: ignore[attr-defined]
    assert ">queued</span>" in waiting and re.search(r">queue_position</td><td [^>]*>2</td>", waiting)


def test_model_checkpoint_group_completion_and_call_reprs() -> None:
    model = Model(id="m", entity="e", project="p", name="agent", base_model="tiny")
    assert "Model agent" in model._repr_html_()  # type: ignore[attr-defined]
    ckpt = Checkpoint(id="c", step=3, metrics={"val/reward": 0.5})
    assert "Checkpoint step 3" in ckpt._repr_html_() and "val/reward" in ckpt._repr_html_()  # type: ignore[attr-defined]
    assert "untrained" not in ckpt._repr_html_()  # type: ignore[attr-defined]
    untrained = Checkpoint(id="u", step=4, trained=False)._repr_html_()  # type: ignore[attr-defined]
    assert "Checkpoint step 4 (untrained: the weights of the step before)" in untrained
    out = group([0.0, 1.0])._repr_html_()  # type: ignore[attr-defined]
    assert "Trajectory group (2 trajectories)" in out and "answer 1.0" in out and "1.000" in out
    completion = ChatCompletion.model_validate(
        {
            "id": "x",
            "created": 0,
            "model": "tiny",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "a<b"}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3},
        }
    )
    out = completion._repr_html_()  # type: ignore[attr-defined]
    assert "Completion from tiny" in out and "a&lt;b" in out and "2 prompt + 1 completion" in out
    call = Call(
        id="c1",
        project_id="e/p",
        op_name="agent",
        trace_id="t",
        started_at=datetime(2026, 1, 1, tzinfo=UTC),
        inputs={"q": "2+2?"},
        exception="ValueError",
    )
    out = call._repr_html_()  # type: ignore[attr-defined]
    assert "Call agent" in out and ">error</span>" in out and "2+2?" in out


def test_cards_take_their_colours_from_the_jupyterlab_theme() -> None:
    job = TrainingJob(id="j1", status="succeeded", kind="rl", error="x")
    for out in (job._repr_html_(), group([1.0])._repr_html_()):  # type: ignore[attr-defined]
        assert f"border:1px solid {_theme.BORDER}" in out and f"color:{_theme.TEXT}" in out
        bare = re.sub(r"var\(--jp-[a-z0-9-]+(, [^()]*(\([^()]*\))?)?\)", "", out)
        assert not re.findall(r"#[0-9a-fA-F]{3,6}\b|rgba?\(|:(white|black)\b", bare)


def test_system_check_has_an_html_view(server: Any) -> None:
    """Notebook 01 shows ``client.system_check()``: a card of its components, not a raw repr."""
    out = server.client().system_check()._repr_html_()
    assert out.startswith("<div") and "System check" in out and ">ok</span>" in out and ">failed<" not in out
    for component in ("api", "database", "cpu queue", "gpu queue"):
        assert f">{component}</td>" in out
    assert "device cpu" in out and " ms</td>" in out
    broken = SystemCheck(
        api=True,
        database=ComponentCheck(success=False, error="disk <full>"),
        cpu_queue=ComponentCheck(success=True),
        gpu_queue=AcceleratorCheck(success=True),
    )._repr_html_()  # type: ignore[attr-defined]
    assert "System check <span" in broken and broken.count(">failed</span>") == 2  # the card and its row
    assert "disk &lt;full&gt;" in broken


def test_a_models_control_characters_show_as_escapes(server: Any) -> None:
    """A random model's vertical tabs (byte 11) read as ``\\x0b`` in the card, the frame and the chat
    view, not as blank lines or an empty cell; newlines and tabs stay what they are."""
    client = server.client()
    base = client.served_models().data[0].id
    completion = client.chat.completions.create(
        model=base, messages=[{"role": "user", "content": "hi"}], max_tokens=6, logit_bias={"11": 100}
    )
    content = completion.choices[0].message.content
    assert content == "\x0b" * 6  # the model's text itself is kept as it came
    assert "\\x0b" * 6 in completion._repr_html_() and "\x0b" not in completion._repr_html_()  # type: ignore[attr-defined]
    assert frames.completions_frame([completion])["content"].tolist() == ["\\x0b" * 6]
    shown = message_html(completion.choices[0].message.model_dump())
    assert "assistant: " + "\\x0b" * 6 in shown
    assert visible("a\tb\nc\r\nd\re\x00\x85\u2028") == "a\tb\nc\r\nd\\re\\x00\\x85\\u2028"
    assert (
        frames.frame([{"text": "line\nnext\x1b[31m"}], {"text": frames.STR})["text"][0]
        == "line\nnext\\x1b[31m"
    )

"""Helpers shared by the frame, widget and browser tests: models on the test server, small groups,
a client that records its requests, widget-tree walks and an in-process IPython shell."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import ipywidgets as w
import pytest
from IPython.core.displaypub import CapturingDisplayPublisher
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

import toolkit as tk
from toolkit.types.training import Model, Trajectory, TrajectoryGroup


def base_model(client: tk.Client) -> str:
    """The first base model the server serves."""
    return client.served_models().data[0].id


def new_model(client: tk.Client, project: str = "widgets") -> Model:
    return client.models.create(
        project=project, name=f"m-{uuid.uuid4().hex[:8]}", base_model=base_model(client)
    )


def group(rewards: list[float], prompt: str = "2+2?") -> TrajectoryGroup:
    """A group of one-turn trajectories (trainable choices without logprobs) with the given rewards."""
    return TrajectoryGroup(
        trajectories=[
            Trajectory(
                messages_and_choices=[
                    {"role": "user", "content": prompt},
                    {"message": {"role": "assistant", "content": f"answer {r}"}, "finish_reason": "stop"},
                ],
                reward=r,
                metrics={"correct": r > 0},
                metadata={"task": "math"},
            )
            for r in rewards
        ]
    )


def recording_client(server: Any) -> tuple[tk.Client, list[str]]:
    """A client of the test server and the list of ``"METHOD path"`` it appends each request to."""
    client = server.client()
    sent: list[str] = []

    def record(request: httpx.Request) -> None:
        sent.append(f"{request.method} {request.url.path}")

    client._transport.http.event_hooks = {"request": [record]}
    return client, sent


def descendants(widget: w.Widget) -> Iterator[w.Widget]:
    """Every widget in the tree under ``widget`` (children, depth first)."""
    for child in getattr(widget, "children", ()):
        yield child
        yield from descendants(child)


def html_of(widget: w.Widget) -> str:
    """The HTML of every HTML widget in the tree, joined."""
    return "\n".join(d.value for d in descendants(widget) if isinstance(d, w.HTML))


def click(widget: w.Widget, description: str = "", *, icon: str = "") -> None:
    """Click the one button of the tree with this description (or icon), as the browser would."""
    (found,) = [
        b
        for b in descendants(widget)
        if isinstance(b, w.Button) and (b.icon == icon if icon else b.description == description)
    ]
    found.click()


@pytest.fixture
def shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InteractiveShell]:
    """An in-process IPython shell whose displays are recorded in ``shell.display_pub.outputs``
    (data, transient display id, update flag); set ``shell.execution_count`` to play a cell."""
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    config = Config()
    config.HistoryManager.enabled = False
    shell = InteractiveShell.instance(config=config)
    shell.display_pub = CapturingDisplayPublisher()
    try:
        yield shell
    finally:
        InteractiveShell.clear_instance()


def outputs_of(shell: InteractiveShell, display_id: str) -> list[dict[str, Any]]:
    """The recorded displays and updates of one display id, in order."""
    return [o for o in shell.display_pub.outputs if (o["transient"] or {}).get("display_id") == display_id]

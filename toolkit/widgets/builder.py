"""TrajectoryBuilder: compose trajectories by hand, group them, and hand the groups to a job or ``/log``."""

from __future__ import annotations

import html
import json
from typing import Any

import ipywidgets as w
from traitlets import Int, List

from .. import frames
from ..client import Client
from ..rollouts import missing_rl_data
from ..types.training import LogResponse, Trajectory, TrajectoryGroup
from ._base import ToolkitWidget
from ._common import StatusLine, button, frame_html
from .launcher import JobLauncher

ROLES = ("system", "user", "assistant", "tool")


class TrajectoryBuilder(ToolkitWidget):
    """Compose messages (role, content, tool calls), set reward and metrics, add the trajectory to a
    group; edit, remove, import/export JSONL, and send the groups to ``/log`` or a :class:`JobLauncher`.

    Assistant turns are added as trainable choices (the model outputs of a trajectory); typed by hand
    they carry no logprobs or token ids, so the status line warns that an RL job cannot train on them
    as they are (SFT and ``/log`` can). Nothing loads at start. State traits: ``draft`` (the messages
    being composed) and ``num_trajectories`` (in all groups).
    """

    draft: List[Any] = List()
    num_trajectories = Int(0)

    def __init__(self, client: Client | None = None, groups: list[TrajectoryGroup] | None = None) -> None:
        self.client = client
        self.groups: list[TrajectoryGroup] = list(groups or [])
        self.role = w.Dropdown(options=ROLES, value="user", description="role")
        self.content = w.Textarea(placeholder="content", layout=w.Layout(width="100%"))
        self.tool_name = w.Text(placeholder="tool call name (assistant)", description="tool call")
        self.tool_args = w.Text(placeholder='{"arg": 1}', description="arguments")
        self.tool_call_id = w.Text(placeholder="tool_call_id (tool)", description="call id")
        self.reward = w.FloatText(value=0.0, description="reward")
        self.metrics = w.Text(placeholder='{"correct": 1}', description="metrics")
        self.group = w.BoundedIntText(value=0, min=0, max=0, description="group")
        self.selected = w.Text(placeholder="group.index, e.g. 0.1", description="trajectory")
        self.jsonl = w.Textarea(
            placeholder="JSONL: one trajectory group per line", layout=w.Layout(width="100%")
        )
        self.split = w.Text(value="val", description="split")
        self.log_model = w.Text(placeholder="model id", description="model")
        self.draft_view = w.HTML()
        self.table = w.HTML()
        self.status_line = StatusLine()
        self.launch_area = w.VBox()
        act = self.action
        controls = [
            w.HBox([self.role, button("Add message", act("add message", self.add_message), icon="plus")]),
            self.content,
            w.HBox([self.tool_name, self.tool_args, self.tool_call_id]),
            self.draft_view,
            w.HBox([self.reward, self.metrics]),
            w.HBox(
                [
                    self.group,
                    button("Add trajectory", act("add trajectory", self.add_trajectory), "primary", "plus"),
                    button("Clear", self.clear),
                ]
            ),
            self.table,
            w.HBox(
                [
                    self.selected,
                    button("Edit", act("edit", self.edit), icon="pencil"),
                    button("Remove", act("remove", self.remove), "danger", "trash"),
                ]
            ),
            w.Accordion([self._io_panel()], titles=("Import / export / log",)),
            self.status_line,
            self.launch_area,
        ]
        super().__init__(controls)
        self._render()

    def _io_panel(self) -> w.VBox:
        act = self.action
        return w.VBox(
            [
                self.jsonl,
                w.HBox(
                    [
                        button("Import JSONL", act("import", lambda: self.import_jsonl(self.jsonl.value))),
                        button("Export JSONL", lambda: setattr(self.jsonl, "value", self.to_jsonl())),
                        self.log_model,
                        self.split,
                        button("Log to model", act("log", lambda: self.log_groups(self.log_model.value))),
                        button(
                            "Train on these groups…", act("open launcher", self._train_clicked), "success"
                        ),
                    ]
                ),
            ]
        )

    # ------------------------------------------------------------------ logic

    def add_message(
        self,
        role: str | None = None,
        content: str | None = None,
        tool_calls: list[dict[str, Any]] | None = None,
        tool_call_id: str | None = None,
    ) -> None:
        """Append a message to the draft (arguments default to the form's fields)."""
        role = role or self.role.value
        content = self.content.value if content is None else content
        if tool_calls is None and self.tool_name.value:
            args = self.tool_args.value or "{}"
            json.loads(args)
            tool_calls = [
                {
                    "id": f"call_{len(self.draft)}",
                    "function": {"name": self.tool_name.value, "arguments": args},
                }
            ]
        tool_call_id = tool_call_id or self.tool_call_id.value or None
        msg: dict[str, Any] = {"role": role, "content": content}
        if tool_calls:
            msg["tool_calls"] = tool_calls
        if role == "tool" and tool_call_id:
            msg["tool_call_id"] = tool_call_id
        item = (
            {"message": msg, "finish_reason": "tool_calls" if tool_calls else "stop"}
            if role == "assistant"
            else msg
        )
        self.draft = [*self.draft, item]
        self.content.value = self.tool_name.value = self.tool_args.value = self.tool_call_id.value = ""
        self._render()

    def add_trajectory(
        self, reward: float | None = None, metrics: dict[str, float] | None = None, group: int | None = None
    ) -> Trajectory:
        """Turn the draft into a trajectory of ``group`` (``len(groups)`` starts a new group)."""
        metrics = metrics if metrics is not None else json.loads(self.metrics.value or "{}")
        traj = Trajectory.model_validate(
            {
                "messages_and_choices": self.draft,
                "reward": self.reward.value if reward is None else reward,
                "metrics": metrics,
            }
        )
        index = self.group.value if group is None else group
        if index >= len(self.groups):
            self.groups.append(TrajectoryGroup(trajectories=[]))
            index = len(self.groups) - 1
        self.groups[index].trajectories.append(traj)
        self.draft = []
        self._render()
        missing = missing_rl_data(traj)
        if missing:
            self.status_line.warn(
                f"trajectory {index}.{len(self.groups[index].trajectories) - 1} has no logprobs or token ids "
                f"({missing[0]}): an RL job cannot train on it unless allow_training_without_logprobs is set "
                "(SFT and /log can)"
            )
        else:
            self.status_line.ok(f"added trajectory {index}.{len(self.groups[index].trajectories) - 1}")
        return traj

    def clear(self) -> None:
        self.draft = []
        self._render()

    def _locate(self, ref: str | None) -> tuple[int, int]:
        group, _, index = (ref or self.selected.value).partition(".")
        return int(group), int(index or 0)

    def remove(self, ref: str | None = None) -> Trajectory:
        """Remove trajectory ``"group.index"``; an emptied group goes too."""
        g, i = self._locate(ref)
        traj = self.groups[g].trajectories.pop(i)
        if not self.groups[g].trajectories:
            self.groups.pop(g)
        self._render()
        return traj

    def edit(self, ref: str | None = None) -> None:
        """Move trajectory ``"group.index"`` back into the draft (with its reward and metrics)."""
        g, i = self._locate(ref)
        traj = self.groups[g].trajectories[i]
        self.remove(ref)
        self.draft = traj.model_dump(mode="json", exclude_unset=True)["messages_and_choices"]
        self.reward.value = traj.reward
        self.metrics.value = json.dumps(traj.metrics) if traj.metrics else ""
        self.group.value = min(g, len(self.groups))
        self._render()

    def to_jsonl(self) -> str:
        """The groups, one JSON object per line."""
        return "".join(g.model_dump_json(exclude_unset=True) + "\n" for g in self.groups)

    def import_jsonl(self, text: str) -> int:
        """Append the groups of a JSONL text; returns how many were read."""
        new = [TrajectoryGroup.model_validate_json(line) for line in text.splitlines() if line.strip()]
        self.groups.extend(new)
        self._render()
        return len(new)

    def log_groups(self, model_id: str, split: str | None = None) -> LogResponse:
        """Send the groups to ``/log`` of a model and show the metrics it computed."""
        if self.client is None:
            raise ValueError("TrajectoryBuilder needs a client to log")
        result = self.client.models.log(
            model_id, split=split or self.split.value, trajectory_groups=self.groups
        )
        self.status_line.ok(f"logged {result.num_trajectories} trajectories: {result.metrics}")
        return result

    def launcher(self, **kw: Any) -> JobLauncher:
        """A started :class:`JobLauncher` (models loaded) that trains on these groups."""
        if self.client is None:
            raise ValueError("TrajectoryBuilder needs a client to launch a job")
        return JobLauncher(self.client, groups=self.groups, **kw).start()

    def _train_clicked(self) -> None:
        launcher = self.launcher(model_id=self.log_model.value or None)
        for old in self.launch_area.children:
            old.close()
        self.launch_area.children = [launcher]

    def summary(self) -> str:
        return f"TrajectoryBuilder: {len(self.groups)} group(s), {self.num_trajectories} trajectories"

    # ------------------------------------------------------------------ rendering

    def _render(self) -> None:
        self.num_trajectories = sum(len(g.trajectories) for g in self.groups)
        self.group.max = len(self.groups)
        lines = [f"{m['role']}: {m.get('content') or ''}" for m in (d.get("message", d) for d in self.draft)]
        text = html.escape("\n".join(lines or ["(empty draft)"]))
        self.draft_view.value = f"<pre style='margin:0'>{text}</pre>"
        self.table.value = frame_html(frames.groups_frame(self.groups))

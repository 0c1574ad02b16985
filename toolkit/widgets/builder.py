"""TrajectoryBuilder: compose trajectories by hand, group them, and hand the groups to a job or ``/log``.

Multi-turn agent trajectories too: assistant turns with one or more tool calls, ``tool`` messages that
answer them (by default the first call of the last assistant turn still without a result), and the
trajectory's ``tools``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ipywidgets as w
from traitlets import Int, List

from .. import frames
from ..client import Client
from ..rollouts import missing_rl_data, tool
from ..types.training import LogResponse, Tool, Trajectory, TrajectoryGroup
from ._base import ToolkitWidget
from ._common import StatusLine, button, frame_html
from .conversation import message_html
from .launcher import JobLauncher

ROLES = ("system", "user", "assistant", "tool")


class TrajectoryBuilder(ToolkitWidget):
    """Compose messages (role, content, tool calls), set reward and metrics, add the trajectory to a
    group; edit, remove, import/export JSONL, and send the groups to ``/log`` or a :class:`JobLauncher`.

    Assistant turns are added as trainable choices (the model outputs of a trajectory); typed by hand
    they carry no logprobs or token ids, so the status line warns that an RL job cannot train on them
    as they are (SFT and ``/log`` can). An assistant turn may call tools (:meth:`add_tool_call` adds
    one more call to it); a ``tool`` message answers an open call. ``tools`` (Python functions or
    wire tool dicts) become each trajectory's ``tools``. Nothing loads at start. State traits:
    ``draft`` (the messages being composed) and ``num_trajectories`` (in all groups).
    """

    draft: List[Any] = List()
    num_trajectories = Int(0)

    def __init__(
        self,
        client: Client | None = None,
        groups: list[TrajectoryGroup] | None = None,
        tools: Sequence[Callable[..., Any] | Mapping[str, Any]] = (),
    ) -> None:
        self.client = client
        self.groups: list[TrajectoryGroup] = list(groups or [])
        self.tools = [Tool.model_validate(t) if isinstance(t, Mapping) else tool(t).spec for t in tools]
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
            w.HBox(
                [
                    self.tool_name,
                    self.tool_args,
                    button("Add tool call", act("add tool call", self.add_tool_call), icon="wrench"),
                    self.tool_call_id,
                ]
            ),
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

    def _new_call(self, name: str, arguments: str | None) -> dict[str, Any]:
        arguments = arguments or "{}"
        try:
            json.loads(arguments)
        except json.JSONDecodeError as exc:
            raise ValueError(f"the arguments of {name} are not JSON ({exc.msg})") from None
        number = sum(len(_message(d).get("tool_calls") or []) for d in self.draft) + 1
        return {
            "id": f"call_{number}",
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }

    def open_calls(self) -> list[str]:
        """Ids of the last assistant turn's tool calls that no ``tool`` message answers yet."""
        answered: set[str] = set()
        for item in reversed(self.draft):
            message = _message(item)
            if message.get("role") == "tool":
                answered.add(message.get("tool_call_id") or "")
            elif message.get("role") == "assistant":
                return [c["id"] for c in message.get("tool_calls") or [] if c["id"] not in answered]
            else:
                return []
        return []

    def add_message(
        self,
        role: str | None = None,
        content: str | None = None,
        tool_calls: list[dict[str, Any]] | None = None,
        tool_call_id: str | None = None,
    ) -> None:
        """Append a message to the draft (arguments default to the form's fields). An assistant message
        with the form's tool name calls that tool; a ``tool`` message answers ``tool_call_id``, by
        default the first open call (:meth:`open_calls`)."""
        role = role or self.role.value
        content = self.content.value if content is None else content
        if tool_calls is None and self.tool_name.value and role == "assistant":
            tool_calls = [self._new_call(self.tool_name.value, self.tool_args.value)]
        msg: dict[str, Any] = {"role": role, "content": content}
        if tool_calls:
            msg["tool_calls"] = tool_calls
        if role == "tool":
            open_calls = self.open_calls()
            tool_call_id = tool_call_id or self.tool_call_id.value or (open_calls[0] if open_calls else None)
            if tool_call_id is None:
                raise ValueError(
                    "a tool message answers a tool call of the last assistant turn; none is open"
                )
            if tool_call_id not in open_calls:
                raise ValueError(
                    f"no open tool call has the id {tool_call_id!r} (open: {', '.join(open_calls) or 'none'})"
                )
            msg["tool_call_id"] = tool_call_id
        item = (
            {"message": msg, "finish_reason": "tool_calls" if tool_calls else "stop"}
            if role == "assistant"
            else msg
        )
        self.draft = [*self.draft, item]
        self.content.value = self.tool_name.value = self.tool_args.value = self.tool_call_id.value = ""
        self._render()

    def add_tool_call(self, name: str | None = None, arguments: str | None = None) -> None:
        """One more call in the last assistant turn of the draft (a new assistant turn if the draft
        does not end with one); defaults to the form's tool name and arguments."""
        name = name or self.tool_name.value
        if not name:
            raise ValueError("name the tool to call")
        call = self._new_call(name, self.tool_args.value if arguments is None else arguments)
        last = self.draft[-1] if self.draft else None
        if last is not None and "message" in last:
            message = last["message"]
            updated = {**message, "tool_calls": [*(message.get("tool_calls") or []), call]}
            self.draft = [*self.draft[:-1], {**last, "message": updated, "finish_reason": "tool_calls"}]
            self.tool_name.value = self.tool_args.value = ""
            self._render()
        else:
            self.add_message("assistant", self.content.value, tool_calls=[call])

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
                "tools": self.tools or None,
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
        shown = "".join(
            message_html({"role": "assistant", **_message(d)}) if "message" in d else message_html(d)
            for d in self.draft
        )
        self.draft_view.value = shown or "<i>(empty draft)</i>"
        self.table.value = frame_html(frames.groups_frame(self.groups))


def _message(item: Mapping[str, Any]) -> Mapping[str, Any]:
    """The message of a draft item (a choice's ``message``, or the message itself)."""
    message: Mapping[str, Any] = item.get("message", item)
    return message

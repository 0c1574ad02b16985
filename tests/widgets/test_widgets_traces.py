"""TraceBrowser against the real trace service: filters, pages, call tree, detail, feedback, export."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import toolkit as tk
from support.widget_support import click
from toolkit.widgets import TraceBrowser
from toolkit.widgets.traces import calls_query

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def record_trace(client: tk.Client, project: str, question: str, fail: bool = False) -> str:
    """A root call with a model call and a tool call under it; returns the trace id."""
    trace = str(uuid.uuid4())
    root, llm, tool = (str(uuid.uuid4()) for _ in range(3))
    usage = {"tiny": {"requests": 1, "prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}
    calls = [
        (root, None, "agent", 0, 3000, {"question": question}, "42", None),
        (
            llm,
            root,
            "chat",
            100,
            1200,
            {"messages": [question]},
            {"usage": usage["tiny"], "model": "tiny"},
            None,
        ),
        (tool, root, "search", 1300, 2500, {"q": question}, None, "ValueError: no results" if fail else None),
    ]
    for id_, parent, op, start, end, inputs, output, exc in calls:
        client.traces.call_start(
            start={
                "project_id": project,
                "id": id_,
                "trace_id": trace,
                "parent_id": parent,
                "op_name": op,
                "started_at": (T0 + timedelta(milliseconds=start)).isoformat(),
                "attributes": {},
                "inputs": inputs,
            }
        )
        client.traces.call_end(
            end={
                "project_id": project,
                "id": id_,
                "ended_at": (T0 + timedelta(milliseconds=end)).isoformat(),
                "output": output,
                "exception": exc,
                "summary": {"usage": usage} if op == "chat" else {},
            }
        )
    return trace


def test_calls_query_builds_the_expression() -> None:
    assert calls_query() is None
    assert calls_query(status="error") == {
        "$expr": {"$eq": [{"$getField": "summary.weave.status"}, {"$literal": "error"}]}
    }
    q = calls_query(op="chat", text="paris", since=T0)
    assert q is not None and [next(iter(p)) for p in q["$expr"]["$and"]] == ["$contains", "$or", "$gte"]


def test_browse_filter_open_feedback_export(server) -> None:
    client = server.client()
    project = f"local/browse-{uuid.uuid4().hex[:6]}"
    record_trace(client, project, "capital of France?")
    failing = record_trace(client, project, "meaning of life?", fail=True)
    browser = TraceBrowser(client, project, page_size=4).start()
    assert browser.total == 6 and len(browser.calls) == 4 and "page 1 of 2" in browser.pager.value
    browser.next_page()
    assert len(browser.calls) == 2 and "page 2 of 2" in browser.pager.value
    browser.prev_page()
    assert "6 calls" in browser.pager.value and "6 calls" not in browser.stats.value

    browser.status_filter.value = "error"
    assert len(browser.search()) == 1 and browser.calls["name"].tolist() == ["search"]
    browser.status_filter.value = "any"
    browser.op.value = "chat"
    assert browser.search()["total_tokens"].tolist() == [15, 15]
    browser.op.value = ""
    browser.text.value = "FRANCE"
    assert set(browser.search()["name"]) == {"agent", "chat", "search"}
    browser.text.value = ""
    browser.roots_only.value = True
    assert browser.search()["name"].tolist() == ["agent", "agent"]
    browser.since.value = (T0 + timedelta(hours=1)).replace(tzinfo=None)
    assert browser.search().empty and "no calls" in browser.stats.value
    browser.since.value = None
    browser.roots_only.value = False
    browser.page_size = 10
    assert len(browser.search()) == 6

    root = browser.calls[(browser.calls["trace_id"] == failing) & (browser.calls["name"] == "agent")][
        "id"
    ].iloc[0]
    browser.selection.value = root
    assert browser.call is not None and browser.call.id == browser.call_id == root
    assert browser.trace["name"].tolist() == ["agent", "chat", "search"]
    bar = browser.tree.data[0]
    assert bar.customdata[0] == root and list(bar.base) == [0.0, 100.0, 1300.0]
    assert "meaning of life" in browser.detail.value and "agent" in browser.detail.value

    click(browser, icon="thumbs-up")
    browser.add_note("wrong tool")
    assert browser.status_line.text == f"feedback saved on {root[:8]}" and browser.note.value == ""
    saved = {f["feedback_type"]: f["payload"] for f in browser.feedback()}
    assert saved["wandb.note.1"] == {"note": "wrong tool"} and saved["wandb.reaction.1"]["emoji"] == "👍"
    assert len(saved) == 2

    everything = browser.to_frame()
    assert len(everything) == 6 and everything["latency_ms"].max() == 3000.0
    assert str(everything["started_at"].dtype) == "datetime64[ns, UTC]"


def test_feedback_needs_an_open_call(server) -> None:
    browser = TraceBrowser(server.client(), f"local/empty-{uuid.uuid4().hex[:6]}").start()
    assert browser.total == 0 and browser.calls.empty
    click(browser, icon="thumbs-down")
    assert (browser.status_line.kind, browser.status_line.text) == ("info", "open a call first")

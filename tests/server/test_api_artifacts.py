"""``POST /v1/preview/artifacts``: SFT training data upload (``train.jsonl``, or ``trajectories.jsonl`` +
``metadata.json``) returning the ``wandb-artifact:///`` URL that ``training_data_url`` takes."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest

BUILTIN_NAME = "toolkit/tiny-chat-1m"  # the served base model (toolkit.server.engine.model)

ARTIFACT_KEYS = {"id", "url", "entity", "project", "name", "version", "files", "num_records", "created_at"}


def line(obj: Any) -> bytes:
    return json.dumps(obj).encode() + b"\n"


# Two lines of ART's train.jsonl (0.5.23 _train_sft): messages, plus tools on the second.
TRAIN = line(
    {"messages": [{"role": "user", "content": "find x"}, {"role": "assistant", "content": "x is 4"}]}
) + line(
    {
        "messages": [
            {"role": "user", "content": "find x"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "function": {"arguments": '{"q": "x"}', "name": "search"},
                        "type": "function",
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "result"},
            {"role": "assistant", "content": "done"},
        ],
        "tools": [
            {"function": {"name": "search", "description": "Search", "parameters": {}}, "type": "function"}
        ],
    }
)
CHOICE = {"finish_reason": "stop", "index": 0, "message": {"role": "assistant", "content": "hello"}}
TRAJECTORIES = (
    line({"messages_and_choices": [{"role": "user", "content": "hi"}, CHOICE], "reward": 1.0})
    + b"\n"  # blank lines are skipped
    + line({"messages_and_choices": [{"role": "user", "content": "hey"}, CHOICE]})
    + line(
        {"messages_and_choices": [{"role": "user", "content": "yo"}, {"role": "assistant", "content": "a"}]}
    )
)
METADATA = line({"format": "jsonl", "num_trajectories": 3})


def upload(http: httpx.Client, files: list[tuple[str, bytes]], **form: str) -> httpx.Response:
    return http.post(
        "/v1/preview/artifacts",
        data={"project": "sft", **form},
        files=[("files", (name, data, "application/octet-stream")) for name, data in files],
    )


def test_upload_train_jsonl(http: httpx.Client) -> None:
    name = f"data-{uuid.uuid4().hex[:8]}"
    r = upload(http, [("train.jsonl", TRAIN)], name=name)
    assert r.status_code == 200, r.text
    art = r.json()
    assert set(art) == ARTIFACT_KEYS
    uuid.UUID(art["id"])
    assert {k: v for k, v in art.items() if k not in ("id", "created_at")} == {
        "url": f"wandb-artifact:///local/sft/{name}:v0",
        "entity": "local",
        "project": "sft",
        "name": name,
        "version": 0,
        "files": ["train.jsonl"],
        "num_records": 2,
    }
    assert http.get(f"/v1/preview/artifacts/{art['id']}").json() == art
    assert art in http.get("/v1/preview/artifacts").json()

    again = upload(http, [("train.jsonl", TRAIN[: TRAIN.index(b"\n") + 1])], name=name, entity="team")
    assert again.json()["url"] == f"wandb-artifact:///team/sft/{name}:v0"
    second = upload(http, [("train.jsonl", TRAIN)], name=name)
    assert (second.json()["version"], second.json()["url"]) == (1, f"wandb-artifact:///local/sft/{name}:v1")


def test_upload_trajectories_with_metadata(server: Any, http: httpx.Client) -> None:
    r = upload(http, [("trajectories.jsonl", TRAJECTORIES), ("metadata.json", METADATA)])
    assert r.status_code == 200, r.text
    art = r.json()
    assert art["files"] == ["metadata.json", "trajectories.jsonl"]
    assert art["num_records"] == 3
    assert art["name"].startswith("sft-data-")
    assert art["url"] == f"wandb-artifact:///local/sft/{art['name']}:v0"
    (folder,) = (server.data_dir / "artifacts").glob(f"*/{art['id']}")
    assert (folder / "trajectories.jsonl").read_bytes() == TRAJECTORIES
    assert (folder / "metadata.json").read_bytes() == METADATA


def test_upload_linked_to_a_model(http: httpx.Client) -> None:
    model = http.post(
        "/v1/preview/models",
        json={"project": "sft", "name": f"m-{uuid.uuid4().hex[:8]}", "base_model": BUILTIN_NAME},
    ).json()
    r = upload(http, [("train.jsonl", TRAIN)], model_id=model["id"])
    assert r.status_code == 200
    missing = str(uuid.uuid4())
    r = upload(http, [("train.jsonl", TRAIN)], model_id=missing)
    assert (r.status_code, r.json()) == (404, {"detail": f"Model {missing} not found"})


@pytest.mark.parametrize(
    ("files", "form", "loc", "msg"),
    [
        (
            [("train.jsonl", TRAIN + b'{"messages": [}\n')],
            {},
            ["body", "train.jsonl", 3],
            "invalid JSON (Expecting value)",
        ),
        (
            [("trajectories.jsonl", b"\n" + TRAJECTORIES + b"[1, 2]\n"), ("metadata.json", METADATA)],
            {},
            ["body", "trajectories.jsonl", 6],
            "each line must be a JSON object",
        ),
        (
            [("train.jsonl", line({"messages": [{"role": "user", "content": "q"}]}))],
            {},
            ["body", "train.jsonl", 1],
            "the last message must be an assistant message",
        ),
        (
            [("train.jsonl", line({"messages": []}))],
            {},
            ["body", "train.jsonl", 1],
            "'messages' must be a non-empty list",
        ),
        (
            [("train.jsonl", line({"messages": [{"content": "no role"}]}))],
            {},
            ["body", "train.jsonl", 1],
            "every message needs a string 'role'",
        ),
        (
            [
                ("trajectories.jsonl", line({"messages_and_choices": [], "reward": "x"})),
                ("metadata.json", METADATA),
            ],
            {},
            ["body", "trajectories.jsonl", 1],
            "reward: Input should be a valid number, unable to parse string as a number",
        ),
        ([("train.jsonl", b"\n\n")], {}, ["body", "train.jsonl"], "no training examples"),
        ([("train.jsonl", b"\xff\xfe")], {}, ["body", "train.jsonl"], "not UTF-8 (invalid start byte)"),
        (
            [("data.jsonl", TRAIN)],
            {},
            ["body", "files"],
            "unexpected file 'data.jsonl'; allowed: train.jsonl, trajectories.jsonl, metadata.json",
        ),
        (
            [("trajectories.jsonl", TRAJECTORIES)],
            {},
            ["body", "files"],
            "trajectories.jsonl needs metadata.json beside it",
        ),
        (
            [("metadata.json", METADATA)],
            {},
            ["body", "files"],
            "send exactly one of train.jsonl or trajectories.jsonl",
        ),
        (
            [("train.jsonl", TRAIN), ("trajectories.jsonl", TRAJECTORIES), ("metadata.json", METADATA)],
            {},
            ["body", "files"],
            "send exactly one of train.jsonl or trajectories.jsonl",
        ),
        ([("train.jsonl", TRAIN), ("train.jsonl", TRAIN)], {}, ["body", "files"], "train.jsonl given twice"),
        (
            [("trajectories.jsonl", TRAJECTORIES), ("metadata.json", b"{nope")],
            {},
            ["body", "metadata.json"],
            None,
        ),
        (
            [("trajectories.jsonl", TRAJECTORIES), ("metadata.json", b"[1]")],
            {},
            ["body", "metadata.json"],
            "must be a JSON object",
        ),
        (
            [("train.jsonl", TRAIN)],
            {"name": "a/b"},
            ["body", "name"],
            "use 1-128 letters, digits, '_', '.', '-' (not only dots)",
        ),
        (
            [("train.jsonl", TRAIN)],
            {"project": "x y"},
            ["body", "project"],
            "use 1-128 letters, digits, '_', '.', '-' (not only dots)",
        ),
        (
            [("train.jsonl", TRAIN)],
            {"entity": "e:1"},
            ["body", "entity"],
            "use 1-128 letters, digits, '_', '.', '-' (not only dots)",
        ),
    ],
)
def test_upload_rejects_bad_data(
    http: httpx.Client,
    files: list[tuple[str, bytes]],
    form: dict[str, str],
    loc: list[str | int],
    msg: str | None,
) -> None:
    before = len(http.get("/v1/preview/artifacts").json())
    r = upload(http, files, **form)
    assert r.status_code == 422, r.text
    (item,) = r.json()["detail"]
    assert item["loc"] == loc
    if msg is not None:
        assert item["msg"] == msg
    else:
        assert item["msg"].startswith("invalid JSON (")
    assert len(http.get("/v1/preview/artifacts").json()) == before


def test_upload_needs_files_and_project(http: httpx.Client) -> None:
    r = http.post("/v1/preview/artifacts", data={"project": "sft"})
    assert (r.status_code, [i["loc"] for i in r.json()["detail"]]) == (422, [["body", "files"]])
    r = http.post("/v1/preview/artifacts", files=[("files", ("train.jsonl", TRAIN))])
    assert (r.status_code, [i["loc"] for i in r.json()["detail"]]) == (422, [["body", "project"]])
    r = http.post("/v1/preview/artifacts", json={"project": "sft", "files": []})
    assert r.status_code == 422


def test_artifacts_are_per_user(server: Any, http: httpx.Client) -> None:
    mine = upload(http, [("train.jsonl", TRAIN)]).json()
    model = http.post(
        "/v1/preview/models",
        json={"project": "sft", "name": f"m-{uuid.uuid4().hex[:8]}", "base_model": BUILTIN_NAME},
    ).json()
    other = server.new_user_key(f"artifact-user-{uuid.uuid4().hex[:6]}")
    with server.http(other) as theirs:
        r = theirs.get(f"/v1/preview/artifacts/{mine['id']}")
        assert (r.status_code, r.json()) == (404, {"detail": f"Artifact {mine['id']} not found"})
        assert theirs.get("/v1/preview/artifacts").json() == []
        r = upload(theirs, [("train.jsonl", TRAIN)], model_id=model["id"])
        assert r.status_code == 404
        same_name = upload(theirs, [("train.jsonl", TRAIN)], name=mine["name"], entity="local").json()
        assert same_name["version"] == 0  # versions count per user
        assert [a["id"] for a in theirs.get("/v1/preview/artifacts").json()] == [same_name["id"]]
    assert same_name["id"] not in [a["id"] for a in http.get("/v1/preview/artifacts").json()]

"""Models and checkpoints over real HTTP against ``toolkit serve`` (shapes, validation, pages, cascade)."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from toolkit.server.store.db import Database
from toolkit.server.store.migrations import MIGRATIONS
from toolkit.server.store.models import Models

BUILTIN_NAME = "toolkit/tiny-chat-1m"  # the served base model (toolkit.server.engine.model)
ART_MODEL_KEYS = {"id", "entity", "project", "name", "base_model", "run_id", "created_at", "latest_step"}
MODEL_KEYS = ART_MODEL_KEYS | {"full_finetuning", "lora_config"}  # extensions: how the model trains
CHECKPOINT_KEYS = {"id", "step", "metrics", "created_at", "trained"}  # trained: extension
ENVELOPE_KEYS = {"object", "data", "has_more", "first_id", "last_id"}
DELETE_MODEL_KEYS = {
    "model_id",
    "deleted_checkpoints",
    "deleted_run",
    "deleted_artifacts",
    "deleted_trajectories",
}
TRAIN_LINE = b'{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n'


def unique(prefix: str = "m") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create(http: httpx.Client, **overrides: Any) -> dict[str, Any]:
    body = {"project": "proj", "name": unique(), "base_model": BUILTIN_NAME, **overrides}
    r = http.post("/v1/preview/models", json=body)
    assert r.status_code == 200, r.text
    result: dict[str, Any] = r.json()
    return result


def assert_validation_error(r: httpx.Response, *locs: list[str | int]) -> list[dict[str, Any]]:
    """A 422 in the training API's shape whose items have exactly the given locations (in order)."""
    assert r.status_code == 422, r.text
    body = r.json()
    assert set(body) == {"detail"}
    for item in body["detail"]:
        assert set(item) == {"loc", "msg", "type"}
        assert isinstance(item["msg"], str) and item["msg"]
        assert isinstance(item["type"], str) and item["type"]
    assert [item["loc"] for item in body["detail"]] == [list(loc) for loc in locs]
    detail: list[dict[str, Any]] = body["detail"]
    return detail


@pytest.fixture(scope="module")
def store(server: Any) -> Iterator[Models]:
    """The server's own store module on its SQLite file (WAL allows this second writer)."""
    db = Database(server.data_dir / "toolkit.db", MIGRATIONS)
    yield Models(db)
    db.close()


@pytest.fixture(scope="module")
def other_key(server: Any) -> str:
    return str(server.new_user_key(unique("user")))


# ----------------------------------------------------------------------------- create / read


def test_create_model_exact_shape(http: httpx.Client) -> None:
    name = unique()
    r = http.post(
        "/v1/preview/models",
        json={"entity": None, "project": "my-project", "name": name, "base_model": BUILTIN_NAME},
    )
    assert r.status_code == 200
    model = r.json()
    assert set(model) == MODEL_KEYS
    uuid.UUID(model["id"])
    assert model["entity"] == "local"  # the key's user when entity is null
    assert (model["project"], model["name"], model["base_model"]) == ("my-project", name, BUILTIN_NAME)
    assert isinstance(model["run_id"], str) and model["run_id"]
    assert isinstance(model["created_at"], str)
    assert model["latest_step"] == 0

    got = http.get(f"/v1/preview/models/{model['id']}")
    assert got.status_code == 200
    assert got.json() == model
    listed = http.get("/v1/preview/models")
    assert listed.status_code == 200
    assert [m for m in listed.json() if m["id"] == model["id"]] == [model]

    page = http.get(f"/v1/preview/models/{model['id']}/checkpoints").json()
    assert [c["step"] for c in page["data"]] == [0]
    assert page["data"][0]["metrics"] == {}


def test_create_model_with_entity(http: httpx.Client) -> None:
    model = create(http, entity="my-team")
    assert model["entity"] == "my-team"


def test_return_existing_semantics(http: httpx.Client) -> None:
    name = unique()
    body = {"entity": None, "project": "p", "name": name, "base_model": BUILTIN_NAME}
    first = http.post("/v1/preview/models", json={**body, "return_existing": False})
    assert first.status_code == 200

    again = http.post("/v1/preview/models", json=body)  # return_existing defaults to false
    assert again.status_code == 409
    assert again.json() == {"detail": f"Model local/p/{name} already exists"}

    existing = http.post("/v1/preview/models", json={**body, "return_existing": True})
    assert existing.status_code == 200
    assert existing.json() == first.json()

    other_project = http.post("/v1/preview/models", json={**body, "project": "p2"})
    assert other_project.status_code == 200
    assert other_project.json()["id"] != first.json()["id"]


@pytest.mark.parametrize(
    ("body", "locs"),
    [
        ({}, [["body", "project"], ["body", "name"], ["body", "base_model"]]),
        ({"project": "p", "base_model": BUILTIN_NAME}, [["body", "name"]]),
        ({"project": 3, "name": "n", "base_model": BUILTIN_NAME}, [["body", "project"]]),
        ({"project": "p", "name": ["n"], "base_model": BUILTIN_NAME}, [["body", "name"]]),
        ({"project": "", "name": "n", "base_model": BUILTIN_NAME}, [["body", "project"]]),
        ({"project": "p", "name": "a/b", "base_model": BUILTIN_NAME}, [["body", "name"]]),
        ({"project": "p", "name": "n", "base_model": BUILTIN_NAME, "entity": "a/b"}, [["body", "entity"]]),
        ({"project": "p", "name": "n", "base_model": BUILTIN_NAME, "entity": 5}, [["body", "entity"]]),
        (
            {"project": "p", "name": "n", "base_model": BUILTIN_NAME, "return_existing": "x"},
            [["body", "return_existing"]],
        ),
        ({"project": "p", "name": "n", "base_model": "no/such-model"}, [["body", "base_model"]]),
    ],
)
def test_create_model_rejects_bad_input(
    http: httpx.Client, body: dict[str, Any], locs: list[list[str | int]]
) -> None:
    assert_validation_error(http.post("/v1/preview/models", json=body), *locs)


def test_create_model_rejects_non_object_and_broken_json(http: httpx.Client) -> None:
    assert_validation_error(http.post("/v1/preview/models", json=["project"]), ["body"])
    r = http.post("/v1/preview/models", content=b"{broken", headers={"content-type": "application/json"})
    assert r.status_code == 422
    assert r.json()["detail"][0]["type"] == "json_invalid"


def test_unknown_model_ids_are_404(http: httpx.Client) -> None:
    missing = str(uuid.uuid4())
    body = {"detail": f"Model {missing} not found"}
    for method, path, kw in [
        ("GET", "", {}),
        ("DELETE", "", {}),
        ("GET", "/checkpoints", {}),
        ("DELETE", "/checkpoints", {"json": {"steps": [1]}}),
        ("POST", "/log", {"json": {"split": "val", "trajectory_groups": []}}),
        ("GET", "/trajectories", {}),
    ]:
        r = http.request(method, f"/v1/preview/models/{missing}{path}", **kw)
        assert (method, path, r.status_code, r.json()) == (method, path, 404, body)


# ----------------------------------------------------------------------------- checkpoints


@pytest.fixture(scope="module")
def many(server: Any, store: Models) -> dict[str, Any]:
    """A model with 250 stored checkpoints (steps 0..249; step 0 comes with the model)."""
    with server.http() as http:
        model = create(http)
    with store.db.write():
        for step in range(1, 250):
            store.add_checkpoint(model["id"], step, None, {"train/reward": step / 1000})
    return model


def walk(http: httpx.Client, model_id: str, limit: int, order: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    after: str | None = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": limit, "order": order}
        if after is not None:
            params["after"] = after
        r = http.get(f"/v1/preview/models/{model_id}/checkpoints", params=params)
        assert r.status_code == 200, r.text
        page = r.json()
        pages += 1
        assert set(page) == ENVELOPE_KEYS
        assert page["object"] == "list"
        assert page["first_id"] == page["data"][0]["id"]
        assert page["last_id"] == page["data"][-1]["id"]
        items.extend(page["data"])
        if not page["has_more"]:
            assert 1 <= len(page["data"]) <= limit
            break
        assert len(page["data"]) == limit
        after = page["last_id"]
    assert pages == -(-250 // limit)
    return items


@pytest.mark.parametrize("limit", [1, 7, 100])
@pytest.mark.parametrize("order", ["asc", "desc"])
def test_walk_250_checkpoints_in_pages(
    http: httpx.Client, many: dict[str, Any], limit: int, order: str
) -> None:
    items = walk(http, many["id"], limit, order)
    steps = [c["step"] for c in items]
    assert steps == (list(range(250)) if order == "asc" else list(range(249, -1, -1)))
    assert len({c["id"] for c in items}) == 250
    for c in items:
        assert set(c) == CHECKPOINT_KEYS
        uuid.UUID(c["id"])
        assert c["metrics"] == ({} if c["step"] == 0 else {"train/reward": c["step"] / 1000})


def test_checkpoint_page_defaults_and_current_step(http: httpx.Client, many: dict[str, Any]) -> None:
    page = http.get(f"/v1/preview/models/{many['id']}/checkpoints").json()
    assert [c["step"] for c in page["data"]] == list(range(20))  # limit 20, order asc
    assert page["has_more"] is True
    latest = http.get(f"/v1/preview/models/{many['id']}/checkpoints", params={"limit": 1, "order": "desc"})
    assert [c["step"] for c in latest.json()["data"]] == [249]  # how ART reads the current step
    assert http.get(f"/v1/preview/models/{many['id']}").json()["latest_step"] == 249


@pytest.mark.parametrize(
    ("params", "loc", "type_"),
    [
        ({"limit": 0}, ["query", "limit"], "greater_than_equal"),
        ({"limit": 101}, ["query", "limit"], "less_than_equal"),
        ({"limit": "ten"}, ["query", "limit"], "int_parsing"),
        ({"order": "up"}, ["query", "order"], "literal_error"),
        ({"after": "no-such-checkpoint"}, ["query", "after"], "value_error"),
    ],
)
def test_checkpoint_list_rejects_bad_query(
    http: httpx.Client, many: dict[str, Any], params: dict[str, Any], loc: list[str], type_: str
) -> None:
    r = http.get(f"/v1/preview/models/{many['id']}/checkpoints", params=params)
    (item,) = assert_validation_error(r, loc)
    assert item["type"] == type_


def test_cursor_of_another_model_is_rejected(http: httpx.Client, many: dict[str, Any]) -> None:
    other = create(http)
    foreign = http.get(f"/v1/preview/models/{many['id']}/checkpoints").json()["last_id"]
    r = http.get(f"/v1/preview/models/{other['id']}/checkpoints", params={"after": foreign})
    assert_validation_error(r, ["query", "after"])


def test_delete_checkpoints(server: Any, http: httpx.Client, store: Models) -> None:
    model = create(http)
    folders = {}
    for step in range(1, 6):
        folder = server.data_dir / "checkpoints" / model["id"] / f"step{step}"
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(b"weights")
        folders[step] = folder
        store.add_checkpoint(model["id"], step, str(folder), {})
    path = f"/v1/preview/models/{model['id']}/checkpoints"

    r = http.request("DELETE", path, json={"steps": [3, 1, 9, 3, 7]})
    assert r.status_code == 200
    assert r.json() == {"deleted_count": 2, "not_found_steps": [7, 9], "kept_steps": []}
    assert [c["step"] for c in http.get(path).json()["data"]] == [0, 2, 4, 5]
    assert [s for s, f in folders.items() if f.exists()] == [2, 4, 5]

    r = http.request("DELETE", path, json={"steps": []})
    assert r.json() == {"deleted_count": 0, "not_found_steps": [], "kept_steps": []}
    r = http.request("DELETE", path, json={"steps": [1]})
    assert r.json() == {"deleted_count": 0, "not_found_steps": [1], "kept_steps": []}

    # The current step (the latest checkpoint) stays, training and /log continue from it; the others go.
    r = http.request("DELETE", path, json={"steps": [0, 2, 5, 8]})
    assert r.status_code == 200
    assert r.json() == {"deleted_count": 2, "not_found_steps": [8], "kept_steps": [5]}
    assert [c["step"] for c in http.get(path).json()["data"]] == [4, 5]
    assert [s for s, f in folders.items() if f.exists()] == [4, 5]
    r = http.request("DELETE", path, json={"steps": [5]})
    assert r.json() == {"deleted_count": 0, "not_found_steps": [], "kept_steps": [5]}
    assert [c["step"] for c in http.get(path).json()["data"]] == [4, 5]


@pytest.mark.parametrize(
    ("kw", "locs"),
    [
        ({}, [["body"]]),
        ({"json": {}}, [["body", "steps"]]),
        ({"json": {"steps": "1"}}, [["body", "steps"]]),
        ({"json": {"steps": ["a"]}}, [["body", "steps", 0]]),
        ({"json": {"steps": [-1]}}, [["body", "steps", 0]]),
    ],
)
def test_delete_checkpoints_rejects_bad_body(
    http: httpx.Client, many: dict[str, Any], kw: dict[str, Any], locs: list[list[str | int]]
) -> None:
    r = http.request("DELETE", f"/v1/preview/models/{many['id']}/checkpoints", **kw)
    assert_validation_error(r, *locs)


# ----------------------------------------------------------------------------- deletion cascade


def _count(db_path: Path, table: str, model_id: str) -> int:
    with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as conn:
        row = conn.execute(f"SELECT COUNT(*) FROM {table} WHERE model_id = ?", (model_id,)).fetchone()
    return int(row[0])


def test_delete_model_cascades(server: Any, http: httpx.Client, store: Models) -> None:
    model = create(http)
    mid = model["id"]
    weights = []
    for step in (1, 2):
        folder = server.data_dir / "checkpoints" / mid / f"step{step}"
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(b"weights")
        weights.append(folder)
        store.add_checkpoint(mid, step, str(folder), {})
    group = {"trajectories": [{"reward": 1.0}, {"reward": 0.0}]}
    r = http.post(
        f"/v1/preview/models/{mid}/log",
        json={"split": "val", "trajectory_groups": [group, {"trajectories": [{"reward": 0.5}]}]},
    )
    assert r.status_code == 200
    linked = http.post(
        "/v1/preview/artifacts",
        data={"project": "proj", "model_id": mid},
        files=[("files", ("train.jsonl", TRAIN_LINE))],
    ).json()
    unlinked = http.post(
        "/v1/preview/artifacts", data={"project": "proj"}, files=[("files", ("train.jsonl", TRAIN_LINE))]
    ).json()
    (linked_folder,) = (server.data_dir / "artifacts").glob(f"*/{linked['id']}")
    db_path = server.data_dir / "toolkit.db"
    assert [_count(db_path, t, mid) for t in ("checkpoints", "log_groups", "trajectories", "artifacts")] == [
        3,
        2,
        3,
        1,
    ]

    r = http.delete(f"/v1/preview/models/{mid}")
    assert r.status_code == 200
    body = r.json()
    assert set(body) == DELETE_MODEL_KEYS
    assert body == {
        "model_id": mid,
        "deleted_checkpoints": 3,
        "deleted_run": True,
        "deleted_artifacts": 1,
        "deleted_trajectories": 3,
    }
    assert [_count(db_path, t, mid) for t in ("checkpoints", "log_groups", "trajectories", "artifacts")] == [
        0,
        0,
        0,
        0,
    ]
    assert [w.exists() for w in weights] == [False, False]
    assert not linked_folder.exists()
    assert http.get(f"/v1/preview/artifacts/{linked['id']}").status_code == 404
    assert http.get(f"/v1/preview/artifacts/{unlinked['id']}").status_code == 200
    assert http.get(f"/v1/preview/models/{mid}").status_code == 404
    assert http.get(f"/v1/preview/models/{mid}/checkpoints").status_code == 404
    assert http.get(f"/v1/preview/models/{mid}/trajectories").status_code == 404
    assert mid not in [m["id"] for m in http.get("/v1/preview/models").json()]
    served = [c["id"] for c in http.get("/v1/models").json()["data"]]
    assert model["name"] not in served and f"{model['name']}:step0" not in served
    assert http.delete(f"/v1/preview/models/{mid}").status_code == 404


# ----------------------------------------------------------------------------- tenant isolation


def test_another_users_models_are_invisible(server: Any, http: httpx.Client, other_key: str) -> None:
    mine = create(http, project="shared", name=unique())
    log = http.post(
        f"/v1/preview/models/{mine['id']}/log",
        json={"split": "val", "trajectory_groups": [{"trajectories": [{"reward": 1.0}]}]},
    )
    assert log.status_code == 200
    base = f"/v1/preview/models/{mine['id']}"
    with server.http(other_key) as theirs:
        not_found = {"detail": f"Model {mine['id']} not found"}
        for method, path, kw in [
            ("GET", base, {}),
            ("DELETE", base, {}),
            ("GET", f"{base}/checkpoints", {}),
            ("DELETE", f"{base}/checkpoints", {"json": {"steps": [0]}}),
            ("POST", f"{base}/log", {"json": {"split": "val", "trajectory_groups": []}}),
            ("GET", f"{base}/trajectories", {}),
        ]:
            r = theirs.request(method, path, **kw)
            assert (method, path, r.status_code, r.json()) == (method, path, 404, not_found)
        assert mine["id"] not in [m["id"] for m in theirs.get("/v1/preview/models").json()]
        served = [c["id"] for c in theirs.get("/v1/models").json()["data"]]
        assert mine["name"] not in served
        # Same entity/project/name in the other user's namespace is a different model.
        twin = theirs.post(
            "/v1/preview/models",
            json={"entity": "local", "project": "shared", "name": mine["name"], "base_model": BUILTIN_NAME},
        )
        assert twin.status_code == 200
        assert twin.json()["id"] != mine["id"]
        cursor = http.get(f"{base}/checkpoints").json()["last_id"]
        r = theirs.get(f"/v1/preview/models/{twin.json()['id']}/checkpoints", params={"after": cursor})
        assert r.status_code == 422
    # Nothing of mine changed.
    assert http.get(base).json() == {**mine, "latest_step": 0}
    assert len(http.get(f"{base}/trajectories").json()) == 1
    assert http.get(f"{base}/checkpoints").json()["data"][0]["metrics"]["val/reward"] == 1.0

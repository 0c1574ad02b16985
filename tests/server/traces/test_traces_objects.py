"""Objects, tables, files and refs over loopback HTTP, with the spec's digest test vectors."""

from __future__ import annotations

import httpx
import pytest

from support.traces_helpers import jsonl
from toolkit.server.traces.digests import bytes_digest, table_digest, value_digest

OBJ_DIGEST = "2El9nYJ3CnBykmEJWqmPfvUVTXr0mfgDe2yiUClnhaY"
HELLO_DIGEST = "LPJNulXwow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ"
ROWS = [{"q": "hi", "a": "x"}, {"q": "yo"}]
ROW_DIGESTS = ["cNb8hwkOBJrU1eGEouojXQiGqSOimBohPwD6AYhVXBI", "c2KLXqails8o4TeeXulXnGzYk0XTva9dRhyBSJaF1tE"]
TABLE_DIGEST = "39bea9a7955d91f81d0fb001b63b7de3c4c51f0c7d53d6fb4b89320737642287"
EMPTY_TABLE = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def test_digest_vectors() -> None:
    assert value_digest({"b": 2, "a": 1}) == OBJ_DIGEST
    assert bytes_digest(b"hello") == HELLO_DIGEST
    assert [value_digest(r) for r in ROWS] == ROW_DIGESTS
    assert table_digest(ROW_DIGESTS) == TABLE_DIGEST
    assert table_digest([]) == EMPTY_TABLE


def create_obj(
    tr: httpx.Client, project: str, object_id: str, val: object, **extra: object
) -> httpx.Response:
    return tr.post(
        "/obj/create", json={"obj": {"project_id": project, "object_id": object_id, "val": val, **extra}}
    )


def test_object_versions_and_selectors(tr: httpx.Client, project: str) -> None:
    r = create_obj(tr, project, "my_config", {"b": 2, "a": 1})
    assert r.status_code == 200 and r.json() == {"digest": OBJ_DIGEST, "object_id": "my_config"}
    assert create_obj(tr, project, "my_config", {"a": 1, "b": 2}).json()["digest"] == OBJ_DIGEST
    second = create_obj(tr, project, "my_config", {"a": 2}).json()["digest"]
    latest = tr.post(
        "/obj/read", json={"project_id": project, "object_id": "my_config", "digest": "latest"}
    ).json()
    assert latest["obj"]["digest"] == second
    assert latest["obj"]["version_index"] == 1 and latest["obj"]["is_latest"] == 1
    assert latest["obj"]["kind"] == "object" and latest["obj"]["val"] == {"a": 2}
    v0 = tr.post("/obj/read", json={"project_id": project, "object_id": "my_config", "digest": "v0"}).json()[
        "obj"
    ]
    assert v0["digest"] == OBJ_DIGEST and v0["is_latest"] == 0 and v0["val"] == {"b": 2, "a": 1}
    by_digest = tr.post(
        "/obj/read", json={"project_id": project, "object_id": "my_config", "digest": OBJ_DIGEST}
    )
    assert by_digest.json()["obj"]["version_index"] == 0
    meta = tr.post(
        "/obj/read",
        json={"project_id": project, "object_id": "my_config", "digest": "latest", "metadata_only": True},
    )
    assert meta.json()["obj"]["val"] == {}
    missing = tr.post("/obj/read", json={"project_id": project, "object_id": "nope", "digest": "latest"})
    assert missing.status_code == 404 and "reason" in missing.json()


def test_expected_digest_and_bad_object_ids(tr: httpx.Client, project: str) -> None:
    assert create_obj(tr, project, "a", {"b": 2, "a": 1}, expected_digest=OBJ_DIGEST).status_code == 200
    mismatch = create_obj(tr, project, "a", {"x": 1}, expected_digest=OBJ_DIGEST)
    assert mismatch.status_code == 409 and "reason" in mismatch.json()
    assert create_obj(tr, project, "bad id!", {}).status_code == 400
    assert create_obj(tr, project, "x" * 129, {}).status_code == 400


def test_ops_classes_and_query(tr: httpx.Client, project: str) -> None:
    op_val = {"_type": "CustomWeaveType", "weave_type": {"type": "Op"}, "files": {"obj.py": HELLO_DIGEST}}
    create_obj(tr, project, "my_op", op_val)
    model = {
        "_type": "MyModel",
        "name": "m",
        "_class_name": "MyModel",
        "_bases": ["Model", "Object", "BaseModel"],
    }
    create_obj(tr, project, "my_model", model)
    create_obj(tr, project, "lb", {"columns": []}, builtin_object_class="Leaderboard")
    objs = tr.post("/objs/query", json={"project_id": project}).json()["objs"]
    assert [o["object_id"] for o in objs] == ["my_op", "my_model", "lb"]
    by_id = {o["object_id"]: o for o in objs}
    assert by_id["my_op"]["kind"] == "op"
    assert (by_id["my_model"]["base_object_class"], by_id["my_model"]["leaf_object_class"]) == (
        "Model",
        "MyModel",
    )
    assert (
        by_id["lb"]["leaf_object_class"] == "Leaderboard"
        and by_id["lb"]["val"]["_class_name"] == "Leaderboard"
    )
    ops = tr.post("/objs/query", json={"project_id": project, "filter": {"is_op": True}}).json()["objs"]
    assert [o["object_id"] for o in ops] == ["my_op"]
    models = tr.post(
        "/objs/query", json={"project_id": project, "filter": {"base_object_classes": ["Model"]}}
    )
    assert [o["object_id"] for o in models.json()["objs"]] == ["my_model"]
    sorted_desc = tr.post(
        "/objs/query",
        json={"project_id": project, "sort_by": [{"field": "object_id", "direction": "desc"}], "limit": 2},
    ).json()["objs"]
    assert [o["object_id"] for o in sorted_desc] == ["my_op", "my_model"]


def test_object_delete(tr: httpx.Client, project: str) -> None:
    first = create_obj(tr, project, "thing", {"v": 1}).json()["digest"]
    second = create_obj(tr, project, "thing", {"v": 2}).json()["digest"]
    r = tr.post("/obj/delete", json={"project_id": project, "object_id": "thing", "digests": ["v1"]})
    assert r.status_code == 200 and r.json()["num_deleted"] == 1
    assert r.json()["deleted_versions"][0]["digest"] == second
    gone = tr.post("/obj/read", json={"project_id": project, "object_id": "thing", "digest": second})
    assert gone.status_code == 404 and gone.json()["deleted_at"]
    latest = tr.post(
        "/obj/read", json={"project_id": project, "object_id": "thing", "digest": "latest"}
    ).json()
    assert latest["obj"]["digest"] == first
    latest_only = tr.post("/objs/query", json={"project_id": project, "filter": {"latest_only": True}}).json()
    assert [o["digest"] for o in latest_only["objs"]] == [first]
    assert (
        tr.post("/obj/delete", json={"project_id": project, "object_id": "thing"}).json()["num_deleted"] == 1
    )
    assert tr.post("/obj/delete", json={"project_id": project, "object_id": "thing"}).status_code == 404
    many = tr.post("/obj/delete", json={"project_id": project, "object_id": "thing", "digests": ["x"] * 101})
    assert many.status_code == 400


def test_tables_create_update_query(tr: httpx.Client, project: str) -> None:
    r = tr.post("/table/create", json={"table": {"project_id": project, "rows": ROWS}})
    assert r.json() == {"digest": TABLE_DIGEST, "row_digests": ROW_DIGESTS}
    rows = tr.post("/table/query", json={"project_id": project, "digest": TABLE_DIGEST}).json()["rows"]
    assert rows == [
        {"digest": ROW_DIGESTS[0], "val": ROWS[0], "original_index": 0},
        {"digest": ROW_DIGESTS[1], "val": ROWS[1], "original_index": 1},
    ]
    assert (
        tr.post("/table/query", json={"project_id": project, "digest": TABLE_DIGEST, "limit": 1}).json()[
            "rows"
        ]
        == rows[:1]
    )
    assert tr.post("/table/query_stats", json={"project_id": project, "digest": TABLE_DIGEST}).json() == {
        "count": 2
    }
    sorted_rows = tr.post(
        "/table/query",
        json={
            "project_id": project,
            "digest": TABLE_DIGEST,
            "sort_by": [{"field": "q", "direction": "desc"}],
        },
    ).json()["rows"]
    assert [r["val"]["q"] for r in sorted_rows] == ["yo", "hi"]
    filtered = tr.post(
        "/table/query",
        json={"project_id": project, "digest": TABLE_DIGEST, "filter": {"row_digests": [ROW_DIGESTS[1]]}},
    ).json()["rows"]
    assert [r["original_index"] for r in filtered] == [1]
    update = tr.post(
        "/table/update",
        json={
            "project_id": project,
            "base_digest": TABLE_DIGEST,
            "updates": [
                {"append": {"row": {"q": "new"}}},
                {"pop": {"index": 0}},
                {"insert": {"index": 0, "row": {"q": "z"}}},
            ],
        },
    ).json()
    new_rows = [{"q": "z"}, ROWS[1], {"q": "new"}]
    assert update["digest"] == table_digest([value_digest(r) for r in new_rows])
    assert update["updated_row_digests"] == [
        value_digest({"q": "new"}),
        ROW_DIGESTS[0],
        value_digest({"q": "z"}),
    ]
    streamed = jsonl(tr.post("/table/query_stream", json={"project_id": project, "digest": update["digest"]}))
    assert [r["val"] for r in streamed] == new_rows
    bad = tr.post(
        "/table/update",
        json={"project_id": project, "base_digest": TABLE_DIGEST, "updates": [{"pop": {"index": 9}}]},
    )
    assert bad.status_code == 400
    assert tr.post("/table/query", json={"project_id": project, "digest": "nope"}).status_code == 404
    assert (
        tr.post("/table/create", json={"table": {"project_id": project, "rows": [1, 2]}}).status_code == 422
    )
    empty = tr.post("/table/create", json={"table": {"project_id": project, "rows": []}}).json()
    assert empty == {"digest": EMPTY_TABLE, "row_digests": []}


@pytest.mark.parametrize("prefix", ["/file", "/files"])
def test_files_and_aliases(tr: httpx.Client, project: str, prefix: str) -> None:
    r = tr.post(
        f"{prefix}/create",
        data={"project_id": project, "expected_digest": HELLO_DIGEST},
        files={"file": ("obj.py", b"hello")},
    )
    assert r.status_code == 200 and r.json() == {"digest": HELLO_DIGEST}
    content = tr.post(f"{prefix}/content", json={"project_id": project, "digest": HELLO_DIGEST})
    assert content.content == b"hello" and content.headers["content-type"] == "application/octet-stream"
    missing = tr.post(f"{prefix}/content", json={"project_id": project, "digest": "nope"})
    assert missing.status_code == 404 and "reason" in missing.json()
    mismatch = tr.post(
        f"{prefix}/create", data={"project_id": project, "expected_digest": "x"}, files={"file": ("a", b"b")}
    )
    assert mismatch.status_code == 409


def test_refs_read_batch(tr: httpx.Client, project: str) -> None:
    create_obj(tr, project, "my_config", {"b": 2, "a": [10, {"deep": "yes"}]})
    digest = value_digest({"b": 2, "a": [10, {"deep": "yes"}]})
    tr.post("/table/create", json={"table": {"project_id": project, "rows": ROWS}})
    ds = {"rows": f"weave:///{project}/table/{TABLE_DIGEST}", "name": "ds"}
    ds_digest = create_obj(tr, project, "ds", ds).json()["digest"]
    base = f"weave:///{project}/object/my_config:{digest}"
    refs = [
        base,
        f"{base}/key/b",
        f"{base}/key/a/index/1/key/deep",
        f"weave:///{project}/object/ds:{ds_digest}/attr/rows/id/{ROW_DIGESTS[1]}",
    ]
    r = tr.post("/refs/read_batch", json={"refs": refs})
    assert r.status_code == 200
    assert r.json()["vals"] == [{"b": 2, "a": [10, {"deep": "yes"}]}, 2, "yes", ROWS[1]]
    missing = tr.post("/refs/read_batch", json={"refs": [f"weave:///{project}/object/nope:abc"]})
    assert missing.status_code == 404
    assert tr.post("/refs/read_batch", json={"refs": ["not-a-ref"]}).status_code == 400
    table_ref = tr.post("/refs/read_batch", json={"refs": [f"weave:///{project}/table/{TABLE_DIGEST}"]})
    assert table_ref.status_code == 400
    assert tr.post("/refs/read_batch", json={"refs": [base] * 1001}).status_code == 400
    tr.post("/obj/delete", json={"project_id": project, "object_id": "my_config"})
    assert tr.post("/refs/read_batch", json={"refs": [base]}).json() == {"vals": [None]}

"""Security: hashed keys, tenant isolation on every resource, sandboxed templates, no imports by
name, no path traversal, loopback by default, no keys in the log."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from support.reliability_support import TRAIN_LINE, create_model, rows, upload_artifact
from toolkit.cli import main as cli_main
from toolkit.server.engine.model import BUILTIN_NAME
from toolkit.server.settings import Settings
from toolkit.server.store import users

if TYPE_CHECKING:
    from conftest import LocalServer

MARKER = "/tmp/toolkit-reliability-pwned"
INJECTIONS = [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ cycler.__init__.__globals__.os.popen('touch " + MARKER + "').read() }}",
    "{{ self._TemplateReference__context.joiner.__init__.__globals__.os.system('touch " + MARKER + "') }}",
    "{% for m in messages %}{{ m.__class__.__base__.__subclasses__() }}{% endfor %}",
]


def chat(http: httpx.Client, **extra: Any) -> httpx.Response:
    body = {"model": BUILTIN_NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    return http.post("/v1/chat/completions", json={**body, **extra})


def test_keys_are_stored_hashed_and_looked_up_by_their_hash(server: LocalServer) -> None:
    key = server.new_user_key("hashed-key-owner")
    for db in server.data_dir.glob("*.db*"):
        assert key.encode() not in db.read_bytes(), db
    stored = {r["key_hash"] for r in rows(server.data_dir / "toolkit.db", "SELECT key_hash FROM api_keys")}
    assert users.hash_key(key) in stored
    with server.http(key) as http:
        assert http.get("/v1/health").status_code == 200
    with server.http(key[:-1] + ("0" if key[-1] != "0" else "1")) as http:
        assert http.get("/v1/health").status_code == 401


def test_second_user_gets_404_for_every_resource_of_the_first(server: LocalServer) -> None:
    owner, other = server.new_user_key("owner"), server.new_user_key("intruder")
    with server.http(owner) as http:
        model = create_model(http)
        artifact = upload_artifact(http, model["id"])
        job = http.post(
            "/v1/preview/sft-training-jobs",
            json={"model_id": model["id"], "training_data_url": artifact["url"]},
        ).json()["id"]
        project = f"{model['entity']}/rel"
        call = {
            "project_id": project,
            "id": "c-1",
            "trace_id": "t-1",
            "op_name": "op",
            "started_at": datetime.now(UTC).isoformat(),
        }
        assert http.post("/traces/call/start", json={"start": call}).status_code == 200
        obj = {"project_id": project, "object_id": "secret", "val": {"k": 1}}
        digest = http.post("/traces/obj/create", json={"obj": obj}).json()["digest"]
        file = http.post("/traces/file/create", data={"project_id": project}, files={"file": ("f", b"x")})
        assert file.status_code == 200, file.text
    mid = model["id"]
    with server.http(other) as http:
        for path in (
            f"/v1/preview/models/{mid}",
            f"/v1/preview/models/{mid}/checkpoints",
            f"/v1/preview/models/{mid}/trajectories",
            f"/v1/preview/artifacts/{artifact['id']}",
            f"/v1/preview/training-jobs/{job}",
            f"/v1/preview/training-jobs/{job}/events",
        ):
            assert http.get(path).status_code == 404, path
        assert http.delete(f"/v1/preview/models/{mid}").status_code == 404
        assert http.post(f"/v1/preview/training-jobs/{job}/cancel").status_code == 404
        assert (
            http.post(
                f"/v1/preview/models/{mid}/log", json={"split": "val", "trajectory_groups": []}
            ).status_code
            == 404
        )
        sft = {"model_id": mid, "training_data_url": artifact["url"]}
        assert http.post("/v1/preview/sft-training-jobs", json=sft).status_code == 404
        assert chat(http, model=f"{model['name']}:step0").status_code == 404
        assert all(card["id"] != model["name"] for card in http.get("/v1/models").json()["data"])
        read_call = http.post("/traces/call/read", json={"project_id": project, "id": "c-1"})
        assert read_call.json() == {"call": None}  # Weave's answer for an id that does not exist
        read = {"project_id": project, "object_id": "secret", "digest": digest}
        assert http.post("/traces/obj/read", json=read).status_code == 404
        content = {"project_id": project, "digest": file.json()["digest"]}
        assert http.post("/traces/file/content", json=content).status_code == 404
        stream = http.post("/traces/calls/stream_query", json={"project_id": project})
        assert (stream.status_code, stream.content) == (200, b"")  # another user's project is empty


def test_request_chat_template_refused_unless_trusted(server: LocalServer) -> None:
    with server.http() as http:
        for payload in INJECTIONS:
            r = chat(http, chat_template=payload)
            assert r.status_code == 400 and "untrusted chat template" in r.json()["error"]["message"]


@pytest.fixture
def trusting_server(server: LocalServer, tmp_path: Path) -> Iterator[LocalServer]:
    """A server of its own started with ``--trust-request-chat-template``."""
    srv = type(server)(tmp_path / "data", extra_args=("--trust-request-chat-template",))
    srv.data_dir.mkdir()
    yield srv.start()
    srv.stop()


def test_trusted_chat_templates_render_in_the_sandbox(trusting_server: LocalServer) -> None:
    Path(MARKER).unlink(missing_ok=True)
    with trusting_server.http() as http:
        assert chat(http, chat_template="{{ messages[0].content }}!").status_code == 200
        for payload in INJECTIONS:
            r = chat(http, chat_template=payload)
            assert r.status_code == 400, r.text
            assert "error" in r.json()
    assert not Path(MARKER).exists()


def test_logits_processors_are_never_imported_by_name(server: LocalServer) -> None:
    Path(MARKER).unlink(missing_ok=True)
    with server.http() as http:
        for spec in (
            "os.system",
            "builtins.eval",
            {"qualname": "subprocess.run", "args": [["touch", MARKER]]},
            {"qualname": "os.system", "args": [f"touch {MARKER}"]},
        ):
            r = chat(http, logits_processors=[spec])
            assert r.status_code == 400 and r.json()["error"]["param"] == "logits_processors", r.text
    assert not Path(MARKER).exists()


@pytest.mark.parametrize("name", ["../../escape", "..", "a/b", "/etc/passwd", "x\x00y", "..\\win"])
def test_artifact_names_cannot_escape_the_data_folder(server: LocalServer, name: str) -> None:
    with server.http() as http:
        for field in ("name", "project", "entity"):
            r = http.post(
                "/v1/preview/artifacts",
                data={"project": "rel", field: name},
                files=[("files", ("train.jsonl", TRAIN_LINE))],
            )
            assert r.status_code == 422, (field, r.text)
        r = http.post("/v1/preview/artifacts", data={"project": "rel"}, files=[("files", (name, TRAIN_LINE))])
        assert r.status_code == 422, r.text
    assert not any(p.name == "escape" for p in server.data_dir.parent.rglob("escape"))


def test_trace_file_names_and_digests_cannot_escape(server: LocalServer) -> None:
    project = "local/rel-traversal"
    with server.http() as http:
        for name in ("../../escape", "/etc/passwd"):
            r = http.post("/traces/file/create", data={"project_id": project}, files={"file": (name, b"x")})
            assert r.status_code == 200, r.text
        for digest in ("../../toolkit.db", "../local.key", "/etc/passwd"):
            r = http.post("/traces/file/content", json={"project_id": project, "digest": digest})
            assert r.status_code == 404, r.text
    assert not list(server.data_dir.parent.rglob("escape"))


def test_server_binds_to_loopback_by_default(server: LocalServer) -> None:
    assert Settings(data_dir=Path("x")).host == "127.0.0.1"
    parser_default = inspect.getsource(cli_main)
    assert '"--host", default="127.0.0.1"' in parser_default
    assert httpx.URL(server.url).host == "127.0.0.1"


def test_no_keys_in_the_server_log(server: LocalServer) -> None:
    key = server.new_user_key("log-watcher")
    with server.http(key) as http:
        http.get("/v1/preview/models/nope")
        chat(http, model="nope")
        http.post("/traces/call/read", json={"project_id": "x/y", "id": "nope"})
    with server.http("tk-wrong-key-123") as http:
        assert http.get("/v1/health").status_code == 401
    log = (server.data_dir / "server.log").read_text()
    assert server.key not in log and key not in log and "tk-wrong-key-123" not in log

"""Limits: body size (413 in each service's shape), page sizes, chat length bounds, malformed
compressed bodies, huge integers (bugs the fuzzer found)."""

from __future__ import annotations

import json
import socket
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from support.reliability_support import create_model, error_shape_problem
from toolkit.server.engine.model import BUILTIN_NAME
from toolkit.server.settings import MAX_BODY_BYTES

if TYPE_CHECKING:
    from conftest import LocalServer

PATHS = ["/v1/preview/models", "/v1/chat/completions", "/traces/call/start"]


def raw_post(server: LocalServer, path: str, length: int) -> tuple[int, bytes]:
    """A POST declaring ``length`` body bytes and sending none: the answer must not wait for them."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {server.key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n"
        )
        sock.sendall(head.encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    status = int(data.split(b" ", 2)[1])
    return status, data.split(b"\r\n\r\n", 1)[1]


@pytest.mark.parametrize("path", PATHS)
def test_declared_oversized_body_is_413_in_the_service_shape(server: LocalServer, path: str) -> None:
    status, body = raw_post(server, path, MAX_BODY_BYTES + 1)
    assert status == 413
    assert error_shape_problem(path, 413, json.loads(body)) is None


@pytest.mark.parametrize("path", PATHS)
def test_streamed_oversized_body_is_413_in_the_service_shape(server: LocalServer, path: str) -> None:
    def chunks() -> Iterator[bytes]:
        block = b" " * (1 << 20)
        for _ in range(MAX_BODY_BYTES // len(block) + 1):
            yield block

    with server.http() as http:
        r = http.post(path, content=chunks(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413
    assert error_shape_problem(path, 413, r.json()) is None


def test_page_limits(server: LocalServer) -> None:
    with server.http() as http:
        model = create_model(http)
        for path, limit in (
            (f"/v1/preview/models/{model['id']}/checkpoints", 100),
            (f"/v1/preview/models/{model['id']}/trajectories", 1000),
            ("/v1/preview/training-jobs/nope/events", 100),
        ):
            r = http.get(path, params={"limit": limit + 1})
            assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "limit"], path
            assert http.get(path, params={"limit": 0}).status_code == 422


def test_huge_integers_are_4xx_not_500(server: LocalServer) -> None:
    """Found by the fuzzer: integers beyond SQLite's range answered 500."""
    with server.http() as http:
        model = create_model(http)
        huge = 2**64
        r = http.get(f"/v1/preview/models/{model['id']}/trajectories", params={"step": huge, "offset": huge})
        assert r.status_code == 422
        r = http.request("DELETE", f"/v1/preview/models/{model['id']}/checkpoints", json={"steps": [huge]})
        assert r.status_code == 200 and r.json()["not_found_steps"] == [huge]
        many = list(range(1, 40_000))  # more than SQLite's bound-variable limit
        r = http.request("DELETE", f"/v1/preview/models/{model['id']}/checkpoints", json={"steps": many})
        assert r.status_code == 200 and r.json()["deleted_count"] == 0


def test_chat_length_bounds(server: LocalServer) -> None:
    msg = [{"role": "user", "content": "hi"}]
    with server.http() as http:
        for extra in ({"max_tokens": 10**6}, {"max_tokens": -1}, {"max_completion_tokens": 10**6}):
            r = http.post("/v1/chat/completions", json={"model": BUILTIN_NAME, "messages": msg, **extra})
            assert r.status_code == 400 and error_shape_problem("/v1/chat/", 400, r.json()) is None, r.text
        long = [{"role": "user", "content": "x" * 50_000}]
        r = http.post("/v1/chat/completions", json={"model": BUILTIN_NAME, "messages": long, "max_tokens": 1})
        assert r.status_code == 400 and error_shape_problem("/v1/chat/", 400, r.json()) is None, r.text


def test_malformed_gzip_otlp_body_is_400(server: LocalServer) -> None:
    """A body claiming gzip that is not gzip: a 400 in Weave's shape, not a 500."""
    with server.http() as http:
        r = http.post(
            "/traces/otel/v1/traces",
            content=b"not gzip",
            headers={"Content-Encoding": "gzip", "Content-Type": "application/x-protobuf"},
        )
    assert r.status_code == 400, r.text
    assert error_shape_problem("/traces/otel", 400, r.json()) is None


def gzip_bomb(inflated: int, chunk: int = 8 << 20) -> bytes:
    """A gzip body of ``inflated`` zero bytes (no trailer: nothing reads that far), built from one
    compressed chunk repeated: each chunk ends with a full flush, so every later one compresses to
    the same bytes."""
    deflate, zeros = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS), bytes(chunk)
    first = deflate.compress(zeros) + deflate.flush(zlib.Z_FULL_FLUSH)
    again = deflate.compress(zeros) + deflate.flush(zlib.Z_FULL_FLUSH)
    return first + again * (inflated // chunk - 1)


def peak_rss(pid: int) -> int:
    """The process's peak resident memory (``VmHWM``), bytes."""
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def reset_peak_rss(pid: int) -> int:
    """Set the process's peak resident memory to its current one (Linux ``clear_refs`` 5), bytes: a
    peak reached earlier (by other tests) can no longer hide what comes next."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return peak_rss(pid)


def test_gzip_bomb_otlp_body_is_bounded(server: LocalServer) -> None:
    """A small gzip body inflating to 1 GiB, 16x the body limit, is refused (413) after inflating at
    most the limit: the server's peak memory, reset just before, grows by far less than the bomb."""
    bomb = gzip_bomb(1 << 30)
    assert len(bomb) < 2 * MAX_BODY_BYTES // 64  # about 1 MiB on the wire
    assert server.proc is not None
    before = reset_peak_rss(server.proc.pid)
    with server.http() as http:
        r = http.post(
            "/traces/otel/v1/traces",
            content=bomb,
            headers={"Content-Encoding": "gzip", "Content-Type": "application/x-protobuf"},
        )
    assert r.status_code == 413, r.text
    assert peak_rss(server.proc.pid) - before < 4 * MAX_BODY_BYTES  # 256 MiB, a quarter of the bomb


def test_chat_limits_of_the_spec(server: LocalServer) -> None:
    msg = [{"role": "user", "content": "hi"}]
    with server.http() as http:
        for extra in ({"seed": 2**63 + 2**11}, {"seed": -(2**64)}, {"truncate_prompt_tokens": -2}):
            body = {"model": BUILTIN_NAME, "messages": msg, "max_tokens": 1, **extra}
            r = http.post("/v1/chat/completions", json=body)
            assert r.status_code == 400 and error_shape_problem("/v1/chat/", 400, r.json()) is None, extra


def test_trace_limits_of_the_spec(server: LocalServer) -> None:
    """Weave's limits: op_name <= 128, display_name <= 1024, object names <= 128 of ``[\\w._-]``
    (400), at most 1000 calls per delete (413)."""
    project, now = "local/rel-limits", datetime.now(UTC).isoformat()
    call = {"project_id": project, "trace_id": "t", "started_at": now}
    with server.http() as http:
        for path, body, status in (
            ("/traces/call/start", {"start": {**call, "id": "a", "op_name": "x" * 129}}, 400),
            (
                "/traces/call/start",
                {"start": {**call, "id": "b", "op_name": "o", "display_name": "d" * 1025}},
                400,
            ),
            ("/traces/obj/create", {"obj": {"project_id": project, "object_id": "o" * 129, "val": 1}}, 400),
            ("/traces/obj/create", {"obj": {"project_id": project, "object_id": "a/b", "val": 1}}, 400),
            (
                "/traces/calls/delete",
                {"project_id": project, "call_ids": [str(i) for i in range(1001)]},
                413,
            ),
        ):
            r = http.post(path, json=body)
            assert r.status_code == status, (path, r.status_code, r.text[:200])
            assert error_shape_problem(path, r.status_code, r.json()) is None

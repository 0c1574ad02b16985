"""``weave.init()`` against the local server with environment variables only (``WANDB_BASE_URL``,
``WANDB_API_KEY``): the W&B GraphQL subset it asks first (``POST /graphql``), then Weave's own
``@weave.op`` recording into ``/traces``, in a subprocess so Weave's global state stays there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from weave.compat.wandb.wandb_thin.internal_api import Api

from conftest import LocalServer

# Weave 0.52.38's W&B API client hands gql an ``httpx.BasicAuth``; gql 4.4 runs on ``httpx2`` when it
# is installed (openai and huggingface_hub bring it), and then refuses that object
# (``TypeError: Invalid "auth" argument``) whatever the server. Making ``httpx2`` unimportable in the
# subprocess puts gql back on ``httpx``: a client-side incompatibility, documented in
# docs/interfaces.md, not something a server can answer.
SCRIPT = textwrap.dedent(
    """
    import json, sys
    sys.modules["httpx2"] = None
    import weave

    @weave.op
    def add(a: int, b: int) -> int:
        return a + b

    out = {}
    for project in sys.argv[1:]:
        client = weave.init(project)
        add(2, 3)
        client.flush()
        out[project] = [client.entity, client.project]
    weave.finish()
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def weaver(server: LocalServer) -> tuple[str, str]:
    """A user of its own (its name is its default entity) and its key."""
    name = f"weaver{uuid.uuid4().hex[:8]}"
    return name, server.new_user_key(name)


def graphql(server: LocalServer, key: str | None, query: Any, **variables: Any) -> httpx.Response:
    """POST one of Weave's own GraphQL requests as its client sends it (Basic ``api:<key>``)."""
    auth = ("api", key) if key else None
    body = {**query.payload, "variables": variables}
    return httpx.post(f"{server.url}/graphql", json=body, auth=auth, timeout=30)


def test_graphql_answers_weaves_own_queries(server: LocalServer, weaver: tuple[str, str]) -> None:
    name, key = weaver
    viewer = graphql(server, key, Api.VIEWER_DEFAULT_ENTITY_QUERY)
    assert viewer.status_code == 200, viewer.text
    assert viewer.json() == {"data": {"viewer": {"username": name, "defaultEntity": {"name": name}}}}
    project = graphql(server, key, Api.PROJECT_QUERY, entityName=name, name="rl-runs")
    assert project.json() == {"data": {"project": {"name": "rl-runs"}}}
    upsert = graphql(server, key, Api.UPSERT_PROJECT_MUTATION, name="rl-runs", entity=name)
    assert upsert.json() == {"data": {"upsertModel": {"model": {"name": "rl-runs", "description": None}}}}


def test_graphql_errors(server: LocalServer, weaver: tuple[str, str]) -> None:
    """Without a key: 401. A query that does not parse or names an unknown field, or a project name
    that is not one: GraphQL errors (HTTP 200, ``errors``), as GraphQL over HTTP answers them."""
    _, key = weaver
    assert graphql(server, None, Api.VIEWER_DEFAULT_ENTITY_QUERY).status_code == 401
    for query in ("{ viewer { username }", "{ viewer { password } }", "{" * 5000 + "}" * 5000):
        r = httpx.post(f"{server.url}/graphql", json={"query": query}, auth=("api", key), timeout=30)
        assert r.status_code == 200, r.text
        assert r.json()["data"] is None
        assert [type(e["message"]) for e in r.json()["errors"]] == [str]
    bad = graphql(server, key, Api.PROJECT_QUERY, entityName="e", name="a/b")
    assert bad.json()["data"] == {"project": None}
    assert "Invalid project_id" in bad.json()["errors"][0]["message"]
    missing = httpx.post(f"{server.url}/graphql", json={"variables": {}}, auth=("api", key), timeout=30)
    assert missing.status_code == 422


def test_weave_init_records_weave_ops_here(
    server: LocalServer, weaver: tuple[str, str], tmp_path: Path
) -> None:
    """``weave.init("entity/project")`` and ``weave.init("project")`` (the default entity) with only
    the two variables set; the ``@weave.op`` calls read back from the trace service."""
    name, key = weaver
    with_entity, bare = f"{name}/init-{uuid.uuid4().hex[:6]}", f"bare-{uuid.uuid4().hex[:6]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "WEAVE_", "WF_"))}
    env.update(HOME=str(tmp_path), WANDB_BASE_URL=server.url, WANDB_API_KEY=key)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, with_entity, bare],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    inited = json.loads(done.stdout.strip().splitlines()[-1])
    assert inited == {with_entity: with_entity.split("/"), bare: [name, bare]}
    with server.client(key) as client:
        for project in (with_entity, f"{name}/{bare}"):
            calls = list(client.traces.calls_query(project_id=project))
            assert [(c.inputs, c.output) for c in calls] == [({"a": 2, "b": 3}, 5)]
            assert calls[0].op_name.startswith(f"weave:///{project}/op/add:")
            assert calls[0].ended_at is not None and calls[0].exception is None
            assert calls[0].summary is not None and calls[0].summary["weave"]["status"] == "success"

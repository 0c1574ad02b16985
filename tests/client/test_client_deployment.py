"""Unit tests of deployments (``httpx.MockTransport``): which kind a client talks to, extension
operations refused or discovered absent, ``/log``'s empty hosted body, and the one-line display of
:class:`UnsupportedOperation` in IPython."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

import toolkit as tk
from support.client_helpers import fake_config
from toolkit.client import NotFoundError, UnsupportedOperation
from toolkit.client._transport import AsyncTransport, Config, Op, SyncTransport
from toolkit.client.deployment import Deployment, Extension
from toolkit.client.training_ops import op_list_models, op_log
from toolkit.types.training import LogResponse

LISTING = Extension("model listing", "keep the models you create")


def listing() -> Op[Any]:
    return Op("GET", "/v1/preview/models", lambda body: body, extension=LISTING)


class Server:
    """Answers every request with one response and counts the requests."""

    def __init__(self, status: int, body: Any = None, content: bytes | None = None) -> None:
        self.status, self.body, self.content = status, body, content
        self.paths: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        if self.content is not None:
            return httpx.Response(self.status, content=self.content)
        return httpx.Response(self.status, json=self.body)


@pytest.fixture(params=["sync", "async"])
def run(request: pytest.FixtureRequest) -> Iterator[Any]:
    """``run(config, server, op)``: the op through the sync or the async transport."""

    def sync(cfg: Config, server: Server, op: Op[Any]) -> Any:
        with httpx.Client(transport=httpx.MockTransport(server)) as http:
            return SyncTransport(cfg, http).run(op)

    def async_(cfg: Config, server: Server, op: Op[Any]) -> Any:
        async def go() -> Any:
            async with httpx.AsyncClient(transport=httpx.MockTransport(server)) as http:
                return await AsyncTransport(cfg, http).run(op)

        return asyncio.run(go())

    yield sync if request.param == "sync" else async_


def test_kind_of_deployment_from_the_url_or_the_caller() -> None:
    assert repr(Deployment.for_url("https://api.training.wandb.ai")) == (
        "Deployment(name='wandb', extensions=False)"
    )
    assert repr(Deployment.for_url("http://127.0.0.1:8321")) == "Deployment(name='custom', extensions=True)"
    with tk.Client("https://api.training.wandb.ai/", "k") as hosted:
        assert (hosted.deployment.name, hosted.deployment.extensions) == ("wandb", False)
    with tk.Client("https://cluster.example", "k") as custom:
        assert (custom.deployment.name, custom.deployment.extensions) == ("custom", True)
    with tk.Client("http://127.0.0.1:9", "k", deployment="local") as local:
        assert (local.deployment.name, local.deployment.extensions) == ("local", True)
        assert repr(local) == "Client(base_url='http://127.0.0.1:9', deployment='local')"


def test_hosted_refuses_an_extension_without_sending_it(run: Any) -> None:
    server = Server(200, [])
    with pytest.raises(UnsupportedOperation) as err:
        run(fake_config("wandb"), server, listing())
    assert str(err.value) == (
        "the hosted W&B Training API has no model listing (a local-server extension); "
        "keep the models you create"
    )
    assert server.paths == []
    # the rest is sent
    assert run(fake_config("wandb"), server, Op("GET", "/v1/health", lambda body: body)) == []


@pytest.mark.parametrize(("status", "reason"), [(404, "Not Found"), (405, "Method Not Allowed")])
def test_custom_learns_that_extension_routes_are_absent(run: Any, status: int, reason: str) -> None:
    cfg = fake_config("custom")
    server = Server(status, {"detail": reason})
    with pytest.raises(UnsupportedOperation) as err:
        run(cfg, server, listing())
    assert str(err.value).startswith("the deployment at http://api.test has no model listing")
    assert isinstance(err.value.__cause__, NotFoundError if status == 404 else tk.client.APIStatusError)
    assert cfg.deployment.extensions is False
    with pytest.raises(UnsupportedOperation):
        run(cfg, server, listing())
    assert server.paths == ["/v1/preview/models"]  # the second one was not sent


def test_a_missing_resource_is_not_a_missing_route(run: Any) -> None:
    cfg = fake_config("custom")
    with pytest.raises(NotFoundError) as err:
        run(cfg, Server(404, {"detail": "Model m-1 not found"}), listing())
    assert str(err.value) == "Error code: 404 - Model m-1 not found"
    assert cfg.deployment.extensions is True
    plain = Op("GET", "/v1/preview/models/m-1/checkpoints", lambda body: body)
    with pytest.raises(NotFoundError):  # not an extension: never an UnsupportedOperation
        run(cfg, Server(404, {"detail": "Not Found"}), plain)
    assert cfg.deployment.extensions is True


@pytest.mark.parametrize(("status", "content"), [(200, b""), (204, b""), (200, b"{}")])
def test_log_accepts_the_hosted_empty_body(run: Any, status: int, content: bytes) -> None:
    result = run(fake_config("wandb"), Server(status, content=content), op_log("m-1", "val", []))
    assert result == LogResponse()
    assert (result.model_id, result.step, result.num_trajectories, result.metrics) == (None, None, None, None)


def test_model_listing_op_is_marked_as_an_extension() -> None:
    op = op_list_models()
    assert op.extension is not None and op.extension.what == "model listing"


def test_unsupported_operation_is_one_line_in_ipython() -> None:
    shell = InteractiveShell.instance()
    try:
        shell.user_ns["UnsupportedOperation"] = UnsupportedOperation
        with capture_output() as captured:
            shell.run_cell("raise UnsupportedOperation('the hosted W&B Training API has no job cancel')")
    finally:
        InteractiveShell.clear_instance()
    assert captured.stdout.strip() == "UnsupportedOperation: the hosted W&B Training API has no job cancel"
    assert tk.UnsupportedOperation is UnsupportedOperation
    assert issubclass(UnsupportedOperation, tk.client.APIError)

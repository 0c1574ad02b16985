"""Checkpoint download at unit level (``httpx.MockTransport``): a file that does not arrive as the
server listed it (size or SHA-256) fails the download and leaves the target as it was, no staging
folder behind; a listed name that is not a plain file name is refused before anything is written."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import httpx
import pytest

from toolkit.client._errors import StreamError
from toolkit.client._transport import Config, SyncTransport
from toolkit.client.deployment import Deployment
from toolkit.client.training import Checkpoints

LISTING = "/v1/preview/models/m/checkpoints/1/files"


def checkpoints(
    files: dict[str, bytes], served: dict[str, bytes], listed_names: list[str] | None = None
) -> Checkpoints:
    """Checkpoints over a fake server that lists ``files`` and serves ``served`` for them."""
    names = listed_names or list(files)
    listing = {
        "model_id": "m",
        "step": 1,
        "base_model": "b",
        "format": "peft-lora",
        "files": [
            {"name": n, "size": len(files[n]), "sha256": hashlib.sha256(files[n]).hexdigest()} for n in names
        ],
    }

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == LISTING:
            return httpx.Response(200, json=listing)
        return httpx.Response(200, content=served[request.url.path.rsplit("/", 1)[-1]])

    cfg = Config(
        base_url="http://api.test",
        api_key="k",
        inference_url="http://api.test/v1",
        trace_url="http://api.test/traces",
        deployment=Deployment("custom", "http://api.test"),
        max_retries=0,
    )
    return Checkpoints(SyncTransport(cfg, httpx.Client(transport=httpx.MockTransport(handler))))


FILES = {"adapter_config.json": b"{}", "adapter_model.safetensors": b"weights"}


def test_an_intact_download_writes_every_file(tmp_path: Path) -> None:
    folder = checkpoints(FILES, FILES).download("m", 1, tmp_path / "out")
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == FILES


@pytest.mark.parametrize("served", [b"weightz", b"weights!"], ids=["digest", "size"])
def test_a_file_that_differs_from_the_listing_fails_and_writes_nothing(tmp_path: Path, served: bytes) -> None:
    target = tmp_path / "out"
    target.mkdir()
    (target / "old.txt").write_text("kept")
    fake = checkpoints(FILES, {**FILES, "adapter_model.safetensors": served})
    with pytest.raises(StreamError, match=r"adapter_model.safetensors arrived with \d+ bytes and SHA-256"):
        fake.download("m", 1, target, overwrite=True)
    assert [p.name for p in target.iterdir()] == ["old.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_a_listed_name_with_a_path_is_refused(tmp_path: Path) -> None:
    files = {**FILES, "../escape": b"x"}
    with pytest.raises(StreamError, match=re.escape("a file name that is not a plain name: '../escape'")):
        checkpoints(files, files, ["../escape"]).download("m", 1, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []

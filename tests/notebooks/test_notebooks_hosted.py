"""Every notebook runs against the hosted W&B Training API as well, or says plainly what it lacks.

The hosted fake (``tests/support/hosted_fake.py``) stands in front of the suite's local server and answers
as the hosted API does: no local-server extensions, an empty ``/log`` body, a bare job record. The
notebooks run with ``TOOLKIT_PRESET=wandb`` pointed at it, so ``client.deployment`` is the hosted
one; a cell that needs an extension must say so in a sentence, never raise. They run as a quick
pass (``TOOLKIT_NOTEBOOK_QUICK=1``: a few training steps): what is checked here is that each cell
runs under the hosted preset; nbval's run checks the learning.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.hosted_fake import HostedFake, serve_hosted_fake
from support.notebook_support import NOTEBOOKS, run_notebook

from conftest import LocalServer


@pytest.fixture(scope="module")
def hosted(server: LocalServer) -> Iterator[tuple[str, HostedFake]]:
    with serve_hosted_fake(server.url) as (url, app):
        yield url, app


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_against_the_hosted_api(
    path: Path, hosted: tuple[str, HostedFake], server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = hosted
    monkeypatch.setenv("TOOLKIT_PRESET", "wandb")
    monkeypatch.setenv("TOOLKIT_BASE_URL", url)
    monkeypatch.setenv("TOOLKIT_API_KEY", server.key)
    monkeypatch.setenv("TOOLKIT_INFERENCE_URL", f"{url}/v1")
    monkeypatch.setenv("TOOLKIT_TRACE_URL", f"{server.url}/traces")
    monkeypatch.setenv("TOOLKIT_NOTEBOOK_QUICK", "1")
    notebook = run_notebook(path)  # raises on a cell that fails
    printed = [
        output.get("text", "")
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if output.get("output_type") == "stream"
    ]
    assert not any("Traceback" in text for text in printed), path.name

"""The suite's session folder (the root ``conftest.py`` points ``$TOOLKIT_DATA_DIR`` at a temporary
folder): at the session's end its servers, nested ones included, are stopped and the folder is
removed, so no run leaves a server or its data behind."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import LocalServer


def test_the_session_folder_and_its_servers_are_gone_after_the_session(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    root_conftest = Path(__file__).resolve().parents[2] / "conftest.py"
    (plugin,) = [
        p
        for p in request.config.pluginmanager.get_plugins()
        if getattr(p, "__file__", "") == str(root_conftest)
    ]
    folder = tmp_path / "session"
    nested = folder / "notebook-11" / "server"  # a server a notebook started in a folder of its own
    nested.mkdir(parents=True)
    servers = [LocalServer(folder).start(), LocalServer(nested).start()]
    try:
        plugin.pytest_unconfigure(SimpleNamespace(**{plugin._DATA_DIR: str(folder)}))
        assert not folder.exists()
        assert all(s.proc is not None and s.proc.poll() is not None for s in servers)  # each had ended
    finally:
        for server in servers:
            server.stop()

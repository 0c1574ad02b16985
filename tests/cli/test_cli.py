"""The command line's argument handling (``toolkit lab`` hands unknown arguments to jupyter lab)."""

from __future__ import annotations

from typing import Any

import pytest

from toolkit import cli


def test_lab_passes_other_arguments_to_jupyter(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    calls: list[list[str]] = []
    monkeypatch.setenv("TOOLKIT_DATA_DIR", str(tmp_path))  # `lab` sets it; restored after the test
    monkeypatch.setattr(cli, "local_server", lambda folder: ("http://127.0.0.1:1", "key"))
    monkeypatch.setattr(cli.os, "execvp", lambda file, args: calls.append(args))
    cli.main(["lab", "--data-dir", str(tmp_path), "--no-browser", "--ServerApp.port=8899"])
    (cmd,) = calls
    assert cmd[:2] == ["jupyter", "lab"] and cmd[-2:] == ["--no-browser", "--ServerApp.port=8899"]


def test_other_commands_reject_unknown_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["keys", "create", "--user", "u", "--bogus"])
    assert exc.value.code == 2 and "unrecognized arguments: --bogus" in capsys.readouterr().err

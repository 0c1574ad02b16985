"""``toolkit serve --request-timeout`` and ``--stall-warning-seconds``: bad values are one argparse
error (exit 2) before anything starts; the environment variables are their defaults."""

from __future__ import annotations

import argparse

import pytest

from toolkit import cli


def serve_settings(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> argparse.Namespace:
    """The parsed ``serve`` arguments (the server itself is not started)."""
    seen: dict[str, argparse.Namespace] = {}

    def fake_serve(args: argparse.Namespace) -> int:
        seen["args"] = args
        return 0

    monkeypatch.setattr(cli, "_serve", fake_serve)
    assert cli.main(["serve", *argv]) == 0
    return seen["args"]


def test_defaults_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOLKIT_REQUEST_TIMEOUT", raising=False)
    monkeypatch.delenv("TOOLKIT_STALL_WARNING_SECONDS", raising=False)
    args = serve_settings(monkeypatch, [])
    assert (args.request_timeout, args.stall_warning_seconds) == (600.0, 60.0)
    monkeypatch.setenv("TOOLKIT_REQUEST_TIMEOUT", "0")
    monkeypatch.setenv("TOOLKIT_STALL_WARNING_SECONDS", "2.5")
    args = serve_settings(monkeypatch, [])
    assert (args.request_timeout, args.stall_warning_seconds) == (0.0, 2.5)
    args = serve_settings(monkeypatch, ["--request-timeout", "30", "--stall-warning-seconds", "9"])
    assert (args.request_timeout, args.stall_warning_seconds) == (30.0, 9.0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--request-timeout", "-1"], "expected a finite number of seconds >= 0, got '-1'"),
        (["--request-timeout", "soon"], "not a number of seconds: 'soon'"),
        (["--request-timeout", "inf"], "expected a finite number of seconds >= 0, got 'inf'"),
        (["--stall-warning-seconds", "0"], "expected a number of seconds > 0, got 0"),
        (["--stall-warning-seconds", "nan"], "expected a finite number of seconds >= 0, got 'nan'"),
    ],
)
def test_bad_values_are_one_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    monkeypatch.setattr(cli, "_serve", lambda args: pytest.fail("the server must not start"))
    with pytest.raises(SystemExit) as exc:
        cli.main(["serve", *argv])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err

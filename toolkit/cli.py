"""Command line: ``toolkit serve``, ``toolkit status``, ``toolkit stop``, ``toolkit keys create``,
``toolkit lab`` (also ``python -m toolkit``)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType

from .client.local_server import (
    EXIT_MISSING_EXTRA,
    MissingServerExtra,
    ServerInfo,
    data_dir,
    local_server,
    missing_extra_message,
    running,
    stop,
)


@contextlib.contextmanager
def _server_extra() -> Iterator[None]:
    """Turn a missing third-party module of the server into :class:`MissingServerExtra`."""
    try:
        yield
    except ModuleNotFoundError as exc:
        if (exc.name or "toolkit").partition(".")[0] == "toolkit":
            raise
        raise MissingServerExtra(missing_extra_message(exc.name)) from exc


def _serve(args: argparse.Namespace) -> int:
    with _server_extra():
        from .server.app import serve
        from .server.settings import Settings

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = Settings(
        data_dir=data_dir(args.data_dir),
        host=args.host,
        port=args.port,
        api_key=args.api_key,
        base_model=Path(args.base_model).resolve() if args.base_model else None,
        trust_request_chat_template=args.trust_request_chat_template,
        priority_scheduling=args.scheduling_policy == "priority",
        max_num_seqs=args.max_num_seqs,
    )
    serve(settings)
    return 0


def _keys_create(args: argparse.Namespace) -> int:
    with _server_extra():
        from .server.settings import Settings
        from .server.store.db import Database
        from .server.store.migrations import MIGRATIONS
        from .server.store.users import Users

    settings = Settings(data_dir=data_dir(args.data_dir))
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    users = Users(Database(settings.db_path, MIGRATIONS))
    print(users.create_key(users.get_or_create(args.user)))
    return 0


def _duration(seconds: float) -> str:
    minutes, s = divmod(int(seconds), 60)
    hours, m = divmod(minutes, 60)
    days, h = divmod(hours, 24)
    if days:
        return f"{days} d {h} h"
    if hours:
        return f"{hours} h {m:02d} min"
    return f"{minutes} min {s:02d} s" if minutes else f"{s} s"


def _describe(info: ServerInfo) -> str:
    return f"{info.url} (pid {info.pid}, version {info.version or 'unknown'}, up {_duration(info.uptime)})"


def _status(args: argparse.Namespace) -> int:
    folder = data_dir(args.data_dir)
    info = running(folder)
    if info is None:
        print(f"toolkit server: not running (data: {folder})")
        return 1
    print(f"toolkit server: running at {_describe(info)}; data: {folder}")
    return 0


def _stop(args: argparse.Namespace) -> int:
    folder = data_dir(args.data_dir)
    info = stop(folder, timeout=args.timeout)
    if info is None:
        print(f"toolkit server: not running (data: {folder})")
        return 1
    print(f"toolkit server: stopped {info.url} (pid {info.pid})")
    return 0


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def jupyter_command(notebooks: Path, jupyter_args: Sequence[str], *, root: bool) -> list[str]:
    """``jupyter lab`` on ``notebooks``; as root with ``--allow-root``, which JupyterLab needs there."""
    cmd = ["jupyter", "lab", f"--notebook-dir={notebooks}", *jupyter_args]
    if root and "--allow-root" not in jupyter_args:
        print("toolkit lab: running as root, so JupyterLab gets --allow-root", flush=True)
        cmd.append("--allow-root")
    return cmd


def run_forwarding_signals(cmd: list[str], env: dict[str, str]) -> int:
    """Run ``cmd`` to its end. Ctrl-C reaches it from the terminal (JupyterLab asks to confirm), so
    this process ignores it; SIGTERM and SIGHUP are passed on."""
    proc = subprocess.Popen(cmd, env=env)

    def forward(signum: int, frame: FrameType | None) -> None:
        proc.send_signal(signum)

    handled = [signal.SIGTERM, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])]
    previous = {sig: signal.signal(sig, forward) for sig in handled}
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _lab(args: argparse.Namespace) -> int:
    folder = data_dir(args.data_dir)
    already = running(folder)
    url, _ = local_server(folder)
    note = "already running, left running" if already else "stops with JupyterLab"
    print(f"toolkit server: {url} (data: {folder}; {note})", flush=True)
    cmd = jupyter_command(Path(args.notebooks).resolve(), args.jupyter_args, root=is_root())
    try:
        return run_forwarding_signals(cmd, {**os.environ, "TOOLKIT_DATA_DIR": str(folder)})
    finally:
        if already is None:
            stopped = stop(folder)
            if stopped is not None:
                print(f"toolkit server: stopped {stopped.url}", flush=True)


DATA_DIR_HELP = "data folder (default: $TOOLKIT_DATA_DIR or ~/.toolkit)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="toolkit", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the embedded server (training API, chat completion, traces)")
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    serve.add_argument("--port", type=int, default=8321, help="port; 0 picks a free one (default: 8321)")
    serve.add_argument("--data-dir", default=None, help=DATA_DIR_HELP)
    serve.add_argument(
        "--api-key", default=None, help="key of the local user (default: kept in the data folder)"
    )
    serve.add_argument("--base-model", default=None, help="serve this Hugging Face causal-LM folder instead")
    serve.add_argument(
        "--trust-request-chat-template",
        action="store_true",
        help="accept chat_template in requests (always rendered in jinja2's sandbox)",
    )
    serve.add_argument("--scheduling-policy", choices=["fcfs", "priority"], default="fcfs")
    serve.add_argument(
        "--max-num-seqs",
        type=int,
        default=32,
        help="sequences decoded at once; more requests wait (default: 32)",
    )
    serve.set_defaults(func=_serve)

    keys = sub.add_parser("keys", help="manage API keys")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    create = keys_sub.add_parser("create", help="print a new key for a user (created if needed)")
    create.add_argument("--data-dir", default=None, help=DATA_DIR_HELP)
    create.add_argument("--user", required=True)
    create.set_defaults(func=_keys_create)

    status = sub.add_parser("status", help="URL, pid, version and uptime of the local server (exit 1: none)")
    status.add_argument("--data-dir", default=None, help=DATA_DIR_HELP)
    status.set_defaults(func=_status)

    stop_cmd = sub.add_parser("stop", help="stop the local server gracefully and wait for it (exit 1: none)")
    stop_cmd.add_argument("--data-dir", default=None, help=DATA_DIR_HELP)
    stop_cmd.add_argument("--timeout", type=float, default=30.0, help="seconds to wait (default: 30)")
    stop_cmd.set_defaults(func=_stop)

    lab = sub.add_parser(
        "lab",
        help="JupyterLab on the notebooks with the local server; a server this started stops with it",
    )
    lab.add_argument("--data-dir", default=None, help=DATA_DIR_HELP)
    lab.add_argument("--notebooks", default="notebooks")
    lab.set_defaults(func=_lab)  # any other argument of `toolkit lab` goes to jupyter lab

    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "lab":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.jupyter_args = extra
    try:
        result: int = args.func(args)
    except MissingServerExtra as exc:
        print(exc, file=sys.stderr)  # one line; `tk.connect()` shows it when the server it starts exits
        return EXIT_MISSING_EXTRA
    return result


if __name__ == "__main__":
    sys.exit(main())

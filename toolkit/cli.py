"""Command line: ``toolkit serve``, ``toolkit keys create``, ``toolkit lab`` (also ``python -m toolkit``)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from .client.connect import data_dir, local_server


def _serve(args: argparse.Namespace) -> int:
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
    from .server.settings import Settings
    from .server.store.db import Database
    from .server.store.migrations import MIGRATIONS
    from .server.store.users import Users

    settings = Settings(data_dir=data_dir(args.data_dir))
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    users = Users(Database(settings.db_path, MIGRATIONS))
    print(users.create_key(users.get_or_create(args.user)))
    return 0


def _lab(args: argparse.Namespace) -> int:
    folder = data_dir(args.data_dir)
    url, _ = local_server(folder)
    print(f"toolkit server: {url} (data: {folder})", flush=True)
    notebooks = Path(args.notebooks).resolve()
    os.environ["TOOLKIT_DATA_DIR"] = str(folder)
    cmd = ["jupyter", "lab", f"--notebook-dir={notebooks}", *args.jupyter_args]
    os.execvp(cmd[0], cmd)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="toolkit", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the embedded server (training API, chat completion, traces)")
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    serve.add_argument("--port", type=int, default=8321, help="port; 0 picks a free one (default: 8321)")
    serve.add_argument(
        "--data-dir", default=None, help="data folder (default: $TOOLKIT_DATA_DIR or ~/.toolkit)"
    )
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
    create.add_argument("--data-dir", default=None)
    create.add_argument("--user", required=True)
    create.set_defaults(func=_keys_create)

    lab = sub.add_parser("lab", help="start the local server (if needed) and JupyterLab on the notebooks")
    lab.add_argument("--data-dir", default=None)
    lab.add_argument("--notebooks", default="notebooks")
    lab.set_defaults(func=_lab)  # any other argument of `toolkit lab` goes to jupyter lab

    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "lab":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.jupyter_args = extra
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())

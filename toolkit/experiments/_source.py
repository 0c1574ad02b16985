"""Where an experiment runs: its notebook or script, that file's git commit and whether the work tree
was dirty, and the installed packages."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import distributions
from pathlib import Path

from ..types.experiments import Source

GIT_TIMEOUT = 10.0


def _notebook() -> str | None:
    """The notebook of this kernel: Jupyter Server's ``JPY_SESSION_NAME``, or VS Code's ``__session__``."""
    main = sys.modules.get("__main__")
    for value in (os.environ.get("JPY_SESSION_NAME"), getattr(main, "__session__", None)):
        if isinstance(value, str) and value.endswith(".ipynb"):
            return value
    return None


def _git(folder: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=GIT_TIMEOUT
        )
    except (OSError, subprocess.TimeoutExpired):  # no git, or it hangs
        return None
    return out.stdout if out.returncode == 0 else None


def source() -> Source:
    """The running notebook (else script, else an interactive session) and its git state; the commit
    and dirty flag are None outside a repository (dirty: a tracked file differs from the commit, or
    a file git does not ignore is untracked, as a notebook not yet committed is)."""
    path: str | None = _notebook()
    kind = "notebook" if path else "interactive"
    script = sys.argv[0] if sys.argv and sys.argv[0] else ""
    if path is None and script and Path(script).is_file() and "ipykernel" not in Path(script).name:
        path, kind = str(Path(script).resolve()), "script"
    folder = Path(path).expanduser().resolve().parent if path else Path.cwd()
    commit = _git(folder, "rev-parse", "HEAD")
    status = _git(folder, "status", "--porcelain", "--untracked-files=normal") if commit else None
    return Source(
        path=path,
        kind=kind,
        git_commit=commit.strip() if commit else None,
        git_dirty=bool(status.strip()) if status is not None else None,
    )


def packages() -> dict[str, str]:
    """Every installed distribution and its version, by name."""
    found = {d.metadata["Name"]: d.version for d in distributions() if d.metadata["Name"]}
    return dict(sorted(found.items(), key=lambda item: item[0].lower()))

"""What a user's environment holds: the distributions ``scripts/lab`` installs (the project with the
extras of its ``EXTRAS=`` line, followed through every requirement, markers evaluated, extras
followed), which distribution provides an imported module, the imports of the notebooks and of the
docs' ``python`` blocks, and a virtual environment that sees only those distributions.

The closure is read from the installed metadata (``importlib.metadata``), so it is the one pip
resolved for the suite's ``.venv``; the suite installs the ``dev`` extra on top, which is why a
notebook that imports a test tool passes nbval and fails for a user.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import json
import re
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "rl-notebook-toolkit"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def lab_extras() -> list[str]:
    """The extras of ``scripts/lab``'s ``EXTRAS=`` line: what the README's main job installs."""
    found = re.search(r"^EXTRAS=([\w,-]+)$", (ROOT / "scripts" / "lab").read_text(), re.MULTILINE)
    assert found, "scripts/lab sets EXTRAS=<extra>,<extra>"
    return found.group(1).split(",")


def closure(project: str, extras: Iterable[str]) -> set[str]:
    """The canonical names of ``project[extras]`` and every distribution it requires, transitively,
    with each requirement's marker evaluated for this interpreter and the extras asked of it."""
    names: set[str] = set()
    done: set[tuple[str, frozenset[str]]] = set()
    todo = [(project, frozenset(extras))]
    while todo:
        name, wanted = todo.pop()
        key = (canonicalize_name(name), wanted)
        if key in done:
            continue
        done.add(key)
        names.add(key[0])
        try:
            requires = md.distribution(name).requires or []
        except md.PackageNotFoundError as missing:
            wanted_by = f"{project}[{','.join(extras)}]"
            raise AssertionError(f"{name} is required by {wanted_by} but not installed") from missing
        for line in requires:
            req = Requirement(line)
            envs = [{"extra": e} for e in sorted(wanted)] or [{"extra": ""}]
            if req.marker is None or any(req.marker.evaluate(env) for env in envs):
                todo.append((req.name, frozenset(req.extras)))
    return names


def user_closure() -> set[str]:
    return closure(PROJECT, lab_extras())


@cache
def _top_level_owners() -> dict[str, list[str]]:
    return md.packages_distributions()


@cache
def _module_owners() -> dict[str, frozenset[str]]:
    """Dotted module or package name -> the distributions whose files hold it (namespace packages,
    such as ``opentelemetry``, are shared by several; their subpackages are not)."""
    owners: dict[str, set[str]] = defaultdict(set)
    for dist in md.distributions():
        name = canonicalize_name(dist.metadata["Name"])
        for file in dist.files or []:
            parts = file.parts
            if parts[0] == ".." or not parts[-1].endswith((".py", ".so", ".pyd")):
                continue
            stem = parts[-1].split(".")[0]
            dotted = [*parts[:-1]] if stem == "__init__" else [*parts[:-1], stem]
            for depth in range(1, len(dotted) + 1):
                owners[".".join(dotted[:depth])].add(name)
    return {k: frozenset(v) for k, v in owners.items()}


def providers(module: str) -> frozenset[str]:
    """The distributions that provide ``module`` (``a.b.c``): those of its top-level name
    (``importlib.metadata.packages_distributions``), narrowed along the dotted path where the
    top level is a namespace shared by several."""
    top = module.split(".")[0]
    found = frozenset(canonicalize_name(d) for d in _top_level_owners().get(top, ()))
    parts = module.split(".")
    for depth in range(2, len(parts) + 1):
        if len(found) <= 1:
            break
        narrower = _module_owners().get(".".join(parts[:depth]))
        if not narrower:
            break
        found = narrower
    return found


def imports(source: str) -> set[str]:
    """The absolute modules a cell or block imports (IPython's ``%`` and ``!`` lines left out)."""
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    found: set[str] = set()
    for node in ast.walk(ast.parse("\n".join(lines))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def sources() -> Iterator[tuple[str, str]]:
    """(where, code) of every notebook code cell and every ``python`` block of the README and docs/."""
    for path in NOTEBOOKS:
        for i, cell in enumerate(json.loads(path.read_text())["cells"]):
            if cell["cell_type"] == "code":
                yield f"{path.name} cell {i}", "".join(cell["source"])
    for path in DOCS:
        for i, block in enumerate(PYTHON_BLOCK.findall(path.read_text())):
            yield f"{path.relative_to(ROOT)} python block {i}", block


def unprovided(source: str, provided: set[str]) -> list[str]:
    """The modules ``source`` imports that neither the standard library nor a distribution of
    ``provided`` holds, each with the distributions that do hold it here."""
    missing = []
    for module in sorted(imports(source)):
        if module.split(".")[0] in sys.stdlib_module_names:
            continue
        owners = providers(module)
        if not owners & provided:
            missing.append(f"{module} (from {', '.join(sorted(owners)) or 'nothing installed'})")
    return missing


def user_venv(folder: Path) -> Path:
    """A virtual environment in ``folder`` whose site-packages links to the suite's installed copies
    of the user closure's distributions only (their files and metadata; nothing the ``dev`` extra
    alone brings); returns its python. Built in seconds: nothing is installed or copied."""
    base_python = sys._base_executable
    subprocess.run([base_python, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    where = "import site; print(site.getsitepackages()[0])"
    site = Path(subprocess.check_output([python, "-c", where], text=True).strip())
    wanted = user_closure()
    owners: dict[tuple[str, ...], set[str]] = defaultdict(set)
    files: list[tuple[Path, tuple[str, ...]]] = []
    for dist in md.distributions():
        name = canonicalize_name(dist.metadata["Name"])
        base = Path(str(dist.locate_file("")))
        for file in dist.files or []:
            if file.parts[0] == "..":
                continue  # scripts and data outside site-packages
            for depth in range(1, len(file.parts) + 1):
                owners[file.parts[:depth]].add(name)
            if name in wanted:
                files.append((base, file.parts))
    linked: set[tuple[str, ...]] = set()
    for base, parts in files:
        # the shortest path that only wanted distributions use: a whole package folder, or single
        # files inside a namespace (opentelemetry/) that an unwanted distribution shares
        depth = next(d for d in range(1, len(parts) + 1) if owners[parts[:d]] <= wanted)
        prefix = parts[:depth]
        if prefix in linked:
            continue
        linked.add(prefix)
        target = site.joinpath(*prefix)
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            target.symlink_to(base.joinpath(*prefix))
    return python

"""Running a notebook the way nbval does, in a fresh kernel of this interpreter (nbclient), and what a
second run of one must show (:func:`check_second_run`)."""

from __future__ import annotations

import copy
import re
import sys
from html import escape
from pathlib import Path

import nbformat
from ipykernel.kernelspec import RESOURCES, get_kernel_dict
from jupyter_client import AsyncKernelManager
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from nbclient import NotebookClient
from nbconvert import HTMLExporter
from traitlets import Unicode

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))
SEEDED = [p for p in NOTEBOOKS if p.stem in ("03_rl_loop", "07_agent", "10_reproducibility")]
"""The notebooks with a ``SEED`` that drives their whole run; their second run is
tests/reproducibility's, which also compares it with the first."""
CELL_TIMEOUT = 1800.0  # seconds; notebook 03 runs its whole RL loop in one cell
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WARNING_LINE = re.compile(r"^(?P<path>\S.*?):\d+: (?P<category>\w*Warning): ", re.MULTILINE)
HOUSEKEEPING = {"FutureWarning", "DeprecationWarning", "PendingDeprecationWarning"}
STATIC_WIDGETS = {"TrajectoryBrowser", "RunHealth", "RunCompare"}  # widgets that carry a static copy


class CurrentPython(KernelSpecManager):
    """Kernels of this interpreter, whatever kernels are installed (nbval's ``--nbval-current-env``),
    or of the interpreter ``python`` names."""

    python = Unicode(sys.executable)

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
        spec = get_kernel_dict()
        return KernelSpec(resource_dir=RESOURCES, **{**spec, "argv": [self.python, *spec["argv"][1:]]})


def run_notebook(path: Path, python: Path | None = None) -> nbformat.NotebookNode:
    """Run every cell in a new kernel started in the notebook's folder; raises on the first error.
    The kernel runs this interpreter, or ``python`` (e.g. :func:`user_extras.user_venv`'s), and
    inherits this process's environment. Returns the notebook with its outputs."""
    specs = CurrentPython(python=str(python or sys.executable))
    kernel = AsyncKernelManager(kernel_name="python3", kernel_spec_manager=specs)
    notebook = nbformat.read(path, as_version=4)
    return NotebookClient(
        notebook, km=kernel, timeout=CELL_TIMEOUT, resources={"metadata": {"path": str(path.parent)}}
    ).execute(cleanup_kc=True)  # shuts the kernel down (nbclient leaves a kernel it did not create running)


def check_second_run(notebook: nbformat.NotebookNode) -> set[str]:
    """What a notebook's second run (a new kernel, the same data folder, the user's python) must show:
    no third-party warning in any cell, and every toolkit widget's static copy in the export without a
    kernel. Returns the widgets that showed one."""
    assert third_party_warnings(notebook) == []
    return check_static_export(notebook)


def third_party_warnings(notebook: nbformat.NotebookNode) -> list[str]:
    """The warnings a cell's stderr shows that come from an installed package (site-packages), or that
    are a library's deprecation notice: none of them is the toolkit's to say or the reader's to fix."""
    found = []
    for i, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []):
            if output.get("name") == "stderr":
                for m in WARNING_LINE.finditer(output["text"]):
                    if "site-packages" in m["path"] or m["category"] in HOUSEKEEPING:
                        found.append(f"cell {i}: {m.group()}")
    return found


def check_static_export(notebook: nbformat.NotebookNode) -> set[str]:
    """Read without a kernel (nbconvert's HTML, no widget state saved): every toolkit widget shows
    its static copy, e.g. notebook 09's TrajectoryBrowser, RunHealth and RunCompare."""
    notebook = copy.deepcopy(notebook)
    notebook.metadata.pop("widgets", None)  # saved without widget state: no live view to draw
    html, _ = HTMLExporter().from_notebook_node(notebook)
    shown: set[str] = set()
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            name = data.get("text/plain", "").split(":")[0]
            if WIDGET_VIEW in data and name in STATIC_WIDGETS:
                static = data.get("text/html", "")
                summary = f"<b>{escape(data['text/plain'])}</b>"  # the static copy's header
                assert summary in static and summary in html, data["text/plain"]
                shown.add(name)
    return shown

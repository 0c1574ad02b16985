"""Running a notebook the way nbval does, in a fresh kernel of this interpreter (nbclient)."""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from ipykernel.kernelspec import RESOURCES, get_kernel_dict
from jupyter_client import AsyncKernelManager
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from nbclient import NotebookClient
from traitlets import Unicode

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT = 1800.0  # seconds; notebook 03 runs its whole RL loop in one cell


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

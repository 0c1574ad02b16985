"""The notebooks and the docs' code run where users run them: every module they import comes from the
project with the extras ``scripts/lab`` installs (the README's main job), not from the ``dev`` extra
the suite adds. The closure is the installed metadata's (see ``tests/support/user_extras.py``)."""

from __future__ import annotations

import tomllib

from support.user_extras import ROOT, imports, lab_extras, providers, sources, unprovided, user_closure


def test_scripts_lab_installs_user_extras_only() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    extras = lab_extras()
    assert set(extras) <= set(declared) and "dev" not in extras
    assert {"server", "lab"} <= set(extras)


def test_every_notebook_and_docs_import_comes_from_the_user_extras() -> None:
    provided = user_closure()
    found = {where: missing for where, code in sources() if (missing := unprovided(code, provided))}
    assert found == {}, f"not installed by scripts/lab's extras {lab_extras()}: {found}"


def test_the_check_catches_what_only_dev_brings() -> None:
    """Modules of the test tools, of a dev-only distribution inside a shared namespace, and of
    nothing installed fail; the project itself, the stdlib and the user extras' modules pass."""
    provided = user_closure()
    assert "pytest" not in provided and "rl-notebook-toolkit" in provided
    code = (
        "import os, pytest\nfrom hypothesis import given\nimport toolkit.plots\n"
        "from IPython.display import display\n%matplotlib inline\nimport torch, pandas as pd\n"
        "from openai import OpenAI\nimport no_such_module\n"
    )
    assert unprovided(code, provided) == [
        "hypothesis (from hypothesis)",
        "no_such_module (from nothing installed)",
        "pytest (from pytest)",
    ]
    assert imports("from . import x\nfrom a.b import c\nimport d.e as f") == {"a.b", "d.e"}


def test_a_namespace_package_resolves_to_the_distribution_of_the_subpackage() -> None:
    """``opentelemetry`` is shared by several distributions: ``opentelemetry.proto`` is the server
    extra's, ``opentelemetry.sdk`` the lab extra's; a shared top-level name alone would pass both."""
    assert len(providers("opentelemetry")) > 2
    assert providers("opentelemetry.proto.trace.v1") == {"opentelemetry-proto"}
    assert providers("opentelemetry.sdk.trace") == {"opentelemetry-sdk"}
    assert unprovided(
        "from opentelemetry.sdk.trace import TracerProvider", user_closure() - {"opentelemetry-sdk"}
    )

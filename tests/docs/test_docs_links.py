"""README, docs and notebooks stand alone: every relative link resolves inside the repository
(anchors included), and no text points at files outside it (private notes, absolute paths)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "notebooks").glob("*.ipynb")),
]

FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s*\[[^\]\n]+\]:\s*<?(\S+?)>?\s*$", re.MULTILINE)
HTML_LINK = re.compile(r"""\b(?:href|src)=["']([^"']+)["']""")
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)
OUTSIDE = re.compile(r"\.\./shared|(?<![\w.-])spec/[\w.-]+\.md|/work/[\w./-]+")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def cells(path: Path, kind: str | None = None) -> list[str]:
    notebook = json.loads(path.read_text())
    return ["".join(c["source"]) for c in notebook["cells"] if kind is None or c["cell_type"] == kind]


def markdown(path: Path) -> str:
    """The markdown of a document: a .md file, or the markdown cells of a notebook."""
    return "\n\n".join(cells(path, "markdown")) if path.suffix == ".ipynb" else path.read_text()


def full_text(path: Path) -> str:
    return "\n\n".join(cells(path)) if path.suffix == ".ipynb" else path.read_text()


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = INLINE_CODE.sub(lambda m: m.group(0).strip("`"), heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    return {slug(h) for h in HEADING.findall(FENCE.sub("", text))}


def links(text: str) -> list[str]:
    prose = INLINE_CODE.sub("", FENCE.sub("", text))
    return [*LINK.findall(prose), *REFERENCE_LINK.findall(prose), *HTML_LINK.findall(prose)]


def problems(path: Path, root: Path = ROOT) -> list[str]:
    """Every link of ``path`` that leaves ``root`` or names a missing file or heading, and every
    mention of a file outside the repository."""
    found = [f"mentions {m.group(0)!r} (outside the repository)" for m in OUTSIDE.finditer(full_text(path))]
    text = markdown(path)
    for target in links(text):
        if SCHEME.match(target):
            if target.lower().startswith("file:"):
                found.append(f"links to {target} (a local file)")
            continue
        location, _, anchor = unquote(target).partition("#")
        location = location.split("?", 1)[0]
        if location.startswith("/"):
            found.append(f"links to {target} (an absolute path)")
            continue
        resolved = (path.parent / location).resolve() if location else path
        if not resolved.is_relative_to(root.resolve()):
            found.append(f"links to {target}, outside the repository")
        elif not resolved.exists():
            found.append(f"links to {target}, which does not exist")
        elif anchor and resolved.suffix in (".md", ".ipynb") and anchor not in anchors(markdown(resolved)):
            found.append(f"links to {target}, a heading {resolved.name} does not have")
    return found


def test_the_documents_are_found() -> None:
    names = {p.name for p in DOCUMENTS}
    assert {"README.md", "references.md", "interfaces.md"} <= names
    assert any(p.suffix == ".ipynb" for p in DOCUMENTS)


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_stay_inside_the_repository(path: Path) -> None:
    assert problems(path) == []


def test_the_check_finds_what_leaves_the_repository(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "other.md").write_text("# Other page\n\n## A section\n")
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "# Page\n\n"
        "[fine](other.md#a-section) [here](#page) [web](https://example.org/x.md)\n"
        "[gone](missing.md) [no heading](other.md#nowhere) [up](../../outside.md)\n"
        "[absolute](/etc/hosts) ![image](pictures/none.png)\n"
        "See ../shared/spec/interface.md and spec/trace-api.md.\n\n"
        "```python\nx = y[0](z)  # not a link\n```\n"
    )
    assert problems(page, tmp_path) == [
        "mentions '../shared' (outside the repository)",
        "mentions 'spec/interface.md' (outside the repository)",
        "mentions 'spec/trace-api.md' (outside the repository)",
        "links to missing.md, which does not exist",
        "links to other.md#nowhere, a heading other.md does not have",
        "links to ../../outside.md, outside the repository",
        "links to /etc/hosts (an absolute path)",
        "links to pictures/none.png, which does not exist",
    ]


def test_notebook_markdown_cells_are_checked(tmp_path: Path) -> None:
    notebook = tmp_path / "n.ipynb"
    source = {"cells": [{"cell_type": "markdown", "source": ["[gone](nowhere.md)"]}]}
    notebook.write_text(json.dumps(source))
    assert problems(notebook, tmp_path) == ["links to nowhere.md, which does not exist"]

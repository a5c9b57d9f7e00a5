"""The documentation site and docs/ agree, and the pages are for users.

- mkdocs.yml's nav lists every page under docs/ and nothing that is not there (the site is
  built by .ci/run with ``mkdocs build --strict``; this test only reads the nav);
- README.md and the pages carry no internal issue numbers: what changed goes to CHANGELOG.md.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
ISSUE = re.compile(r"\bissues? #?\d+", re.I)


def nav_pages(mkdocs_yml: str) -> list[str]:
    """The ``.md`` paths of the ``nav:`` section of ``mkdocs_yml`` (``- Title: path.md`` or
    ``- path.md`` lines, up to the next top-level key)."""
    nav = re.search(r"^nav:\n((?:[ \t]+.*\n?|\n)*)", mkdocs_yml, re.M)
    assert nav, "mkdocs.yml has no nav"
    return re.findall(r"^\s*-\s*(?:[^:\n]+:\s*)?([\w./-]+\.md)\s*$", nav[1], re.M)


def test_the_nav_lists_every_page_once():
    listed = nav_pages((ROOT / "mkdocs.yml").read_text())
    assert len(listed) == len(set(listed)), f"listed twice: {sorted(p for p in listed if listed.count(p) > 1)}"
    assert sorted(listed) == PAGES, (f"in docs/ but not in mkdocs.yml's nav: {sorted(set(PAGES) - set(listed))}; "
                                     f"in the nav but not in docs/: {sorted(set(listed) - set(PAGES))}")


def test_nav_pages_reads_nested_sections():
    yml = "site_name: x\nnav:\n  - Home: index.md\n  - Guides:\n      - A page: howto/a.md\n      - b.md\nplugins:\n  - c.md\n"
    assert nav_pages(yml) == ["index.md", "howto/a.md", "b.md"]


@pytest.mark.parametrize("page", ["README.md", *(f"docs/{p}" for p in PAGES)])
def test_no_internal_issue_numbers(page):
    text = (ROOT / page).read_text()
    found = [f"{page}:{text.count(chr(10), 0, m.start()) + 1}: {m[0]!r}" for m in ISSUE.finditer(text)]
    assert not found, "internal issue numbers (history goes to CHANGELOG.md):\n" + "\n".join(found)


@pytest.mark.parametrize("text", ["as issue 36 measured", "Issue 26: the corpus", "see issues #12", "(issue #4)"])
def test_the_issue_pattern_catches(text):
    assert ISSUE.search(text)

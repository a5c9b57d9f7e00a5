"""Every backticked ``zopt.…`` name in README.md and docs/*.md names something that exists
(issue 37): the longest importable module of the name is imported and the rest looked up on it
with ``getattr`` (``zopt.recompress`` through the package's lazy public names). A name written
as a call, ``zopt.x.y(...)``, must be callable (a module is not: ``zopt.readback.info(store)``
meant ``zopt.info(store)``). A registered codec's name (``zopt.lorenzo``) is not Python and is
looked up in zarr's codec registry instead. A failure lists each stale name with its file and line.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
SPAN = re.compile(r"`([^`\n]+)`")
NAME = re.compile(r"(?<![\w.\-/])zopt(?:\.[A-Za-z_]\w*)+(?P<call>\()?")


def _names(path: Path) -> list[tuple[int, str, bool]]:
    """``(line, name, written as a call)`` of every ``zopt.…`` name in inline code of ``path``
    (fenced blocks are left out: tests/test_docs.py runs them)."""
    text = FENCE.sub(lambda m: "\n" * m[0].count("\n"), path.read_text())
    out = []
    for span in SPAN.finditer(text):
        line = text.count("\n", 0, span.start()) + 1
        for m in NAME.finditer(span[1]):
            out.append((line, m[0].removesuffix("("), m["call"] is not None))
    return out


def _codec_name(name: str) -> bool:
    from zarr.registry import get_codec_class

    try:
        get_codec_class(name)
    except Exception:  # KeyError on zarr 3.1, UnknownCodecError on 3.4
        return False
    return True


def _resolve(name: str) -> object:
    """The object ``name`` names; raises ImportError or AttributeError when there is none."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:n]))
        except ModuleNotFoundError as exc:
            if exc.name is not None and not ".".join(parts[:n]).startswith(exc.name):
                raise  # the module exists but imports something missing
            continue
        for attr in parts[n:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(name)


def _problem(name: str, call: bool) -> str | None:
    try:
        obj = _resolve(name)
    except (ImportError, AttributeError) as exc:
        return None if _codec_name(name) else f"does not resolve ({type(exc).__name__}: {exc})"
    if call and not callable(obj):
        return f"is written as a call but is a {type(obj).__name__}"
    return None


def test_the_pages_name_zopt_things():
    assert sum(len(_names(p)) for p in FILES) > 100  # the pattern finds them


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_backticked_zopt_name_resolves(path):
    stale = [f"{path.relative_to(ROOT)}:{line}: `{name}` {why}"
             for line, name, call in _names(path) if (why := _problem(name, call))]
    assert not stale, "stale names:\n" + "\n".join(stale)


def test_a_stale_name_is_reported_with_its_file_and_line(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("Fine: `zopt.recompress(src, dst)`, `zopt.lorenzo`.\n\n```python\nzopt.gone\n```\n"
                    "Stale: `zopt.readback.info(store)` and `zopt.job.nothing_here`.\n")
    found = [(line, name, why) for line, name, call in _names(page) if (why := _problem(name, call))]
    assert [(line, name) for line, name, _ in found] == [(6, "zopt.readback.info"), (6, "zopt.job.nothing_here")]
    assert "call" in found[0][2] and "AttributeError" in found[1][2]

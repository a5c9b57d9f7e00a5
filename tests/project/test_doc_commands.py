"""Every shell command a user would paste from README.md, docs/ and recipes/README.md names
things that exist (issue 28, "stale docs").

tests/project/test_docs.py runs the ```bash blocks; this test also reads what it cannot run: synopses
(```text), unlabelled fences, skipped blocks and `inline code` in the prose. Each command is
split at ``&&``, ``|`` and ``;``, and each part checked:

- ``zopt SUBCOMMAND … --option``: the subcommand exists and has every option given;
- ``python benchmarks/X.py --opt`` / ``python recipes/X.py --opt``: the script exists and
  defines every option given;
- ``pip install``: never ``zopt`` or ``"zopt[…]"`` (zopt is not on a package index: install
  from a clone with ``pip install ".[extra]"``), and every extra named exists in pyproject.toml.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import click
import pytest

from zopt.cli.commands import main

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "recipes" / "README.md"]
FENCE = re.compile(r"```(?P<lang>[\w-]*)\n(?P<code>.*?)```", re.S)
INLINE = re.compile(r"`([^`\n]+)`")
STARTS = ("zopt ", "python ", "python3 ", "pip ", ".venv")
EXTRAS = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])


def _looks_like_command(line: str) -> bool:
    return line.startswith(STARTS) or line.startswith(("../", ".venv313/"))


def _fence_commands(code: str, shell: bool) -> list[str]:
    """Commands of a fence: every command line of a shell block; of any other block (a synopsis,
    or a command and its output) the leading command lines, with their indented continuations."""
    out: list[str] = []
    taking = True
    for raw in code.replace("\\\n", " ").splitlines():
        line = raw.strip()
        if line.startswith("$ "):
            line = line[2:]
        if _looks_like_command(line) and (shell or taking):
            out.append(line)
        elif not shell and out and taking and raw[:1].isspace() and line:
            out[-1] += " " + line  # a synopsis continued on an indented line
        elif not shell:
            taking = False
    return out


def commands(page: Path) -> list[str]:
    """Command lines of ``page``: from every fence but python/json ones, and inline spans that
    start like a command."""
    text = page.read_text()
    found = []
    for m in FENCE.finditer(text):
        if m["lang"] not in ("python", "json", "toml", "yaml"):
            found += _fence_commands(m["code"], shell=m["lang"] in ("bash", "sh", "shell", "console"))
    prose = FENCE.sub("", text)
    for span in INLINE.findall(prose):
        span = span.strip()
        # a table row's label such as `zopt keepbits:K` is a name, not a command
        if span.startswith(STARTS) and not re.match(r"^zopt (?![a-z][a-z-]*(\s|$))", span):
            found.append(span)
    return found


def _parts(command: str) -> list[list[str]]:
    tokens = shlex.split(command, comments=True)
    parts, current = [], []
    for t in tokens:
        if t in ("&&", "||", "|", ";"):
            parts.append(current)
            current = []
        else:
            current.append(t)
    return [p for p in [*parts, current] if p]


def _options(tokens: list[str]) -> list[str]:
    """Option names among ``tokens`` of a synopsis or command (``[--a X|--b]``, ``--c=V``,
    ``--d/--no-d`` included; negative numbers are values)."""
    out = []
    for t in tokens:
        if t == "--":
            break
        for piece in re.split(r"[|/]", t.strip("[](){}…,")):
            piece = piece.strip("[](){}…,.")
            if re.match(r"^--?[A-Za-z]", piece):
                out.append(piece.split("=")[0])
    return out


def check_zopt(tokens: list[str]) -> None:
    command: click.Command = main
    rest = tokens[1:]
    while isinstance(command, click.Group) and rest and not rest[0].startswith("-"):
        name = rest[0]
        if name in command.commands:
            command, rest = command.commands[name], rest[1:]
        elif isinstance(command, click.Group) and command.name == "plan":  # zopt plan STORE … = plan create
            command = command.commands["create"]
        else:
            raise AssertionError(f"{' '.join(tokens)!r}: zopt has no subcommand {name!r} "
                                 f"(it has {sorted(command.commands)})")
    if isinstance(command, click.Group) and command is main and not rest:
        return
    known = {"--help", "-h"} | {o for p in command.params for o in (*p.opts, *getattr(p, "secondary_opts", []))}
    for name in _options(rest):
        assert name in known, f"{' '.join(tokens)!r}: 'zopt {command.name}' has no option {name} (it has {sorted(known)})"


def check_script(tokens: list[str]) -> None:
    script = next((t for t in tokens[1:] if t.endswith(".py")), None)
    if script is None or not script.startswith(("benchmarks/", "recipes/")):
        return
    path = ROOT / script
    assert path.is_file(), f"{' '.join(tokens)!r}: {script} does not exist"
    source = path.read_text()
    after = tokens[tokens.index(script) + 1:]
    for name in _options(after):
        assert f'"{name}"' in source or name in ("--help", "-h"), f"{' '.join(tokens)!r}: {script} has no option {name}"


def check_pip(tokens: list[str]) -> None:
    if "install" not in tokens:
        return
    for t in tokens[tokens.index("install") + 1:]:
        if t.startswith("-"):
            continue
        assert not re.match(r"^zopt(\[.*\])?$", t), (
            f"{' '.join(tokens)!r}: zopt is not on a package index; from a clone: pip install \".[extra]\"")
        m = re.match(r"^\.\[(.*)\]$", t)
        if m:
            missing = set(m[1].split(",")) - EXTRAS
            assert not missing, f"{' '.join(tokens)!r}: pyproject.toml has no extra {sorted(missing)} (it has {sorted(EXTRAS)})"


def check(command: str) -> None:
    for tokens in _parts(command):
        head = Path(tokens[0]).name
        if head == "zopt":
            check_zopt(tokens)
        elif head.startswith("python") and tokens[1:3] == ["-m", "zopt"]:
            check_zopt(["zopt", *tokens[3:]])
        elif head.startswith("python"):
            check_script(tokens)
        elif head in ("pip", "pip3") or (head.startswith("python") and "pip" in tokens[:3]):
            check_pip(tokens)


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_pasted_command_names_what_exists(page):
    for command in commands(page):
        check(command)


def test_the_pages_hold_commands_to_check():
    found = [c for page in PAGES for c in commands(page)]
    zopt = [c for c in found if c.startswith("zopt ")]
    assert len(zopt) >= 40 and any(c.startswith("python benchmarks/") for c in found)
    assert any(" --lossy " in c for c in zopt) and any(c.startswith("zopt plan show") for c in zopt)


@pytest.mark.parametrize(("command", "problem"), [
    ('pip install "zopt[data]"', "not on a package index"),
    ("pip install zopt", "not on a package index"),
    ('pip install ".[nope]"', "no extra ['nope']"),
    ("zopt recompres SRC DST", "no subcommand 'recompres'"),
    ("zopt recompress SRC DST --vs-defaults", "has no option --vs-defaults"),
    ("zopt recompress SRC DST [--preset default|fast] [--lossy VAR=abs:E|--in-place|--nope]", "has no option --nope"),
    ("zopt plan show P --pgn x.png", "has no option --pgn"),
    ("zopt plan SRC -o P --polcy smallest", "has no option --polcy"),
    ("python benchmarks/cast.py --mb 64", "has no option --mb"),
    ("python benchmarks/nothing.py", "does not exist"),
])
def test_the_check_catches_stale_commands(command, problem):
    with pytest.raises(AssertionError, match=re.escape(problem)):
        check(command)


def test_presets_md_says_which_readers_read_a_preset():
    """docs/presets.md: the menu presets write what plain zarr-python reads; the chain presets
    (and every preset's own chain) wrap their codecs in conditional, which zarrs and tensorstore
    do not read; zopt.planning.readers refuses such a chain for them, and the page says so."""
    from zopt.planning.presets import presets
    from zopt.planning.readers import check_readers

    text = " ".join((ROOT / "docs" / "presets.md").read_text().split())
    assert "`conditional` is read by no other library today" in text and "read by zarrs and tensorstore" not in text
    for p in presets():
        assert ("zarr-python ≥ 3.1 + pcodec, no zopt" in p.readers) == (p.menu is not None), p.name
        assert (f"| `{p.name}` |" in text) and (p.menu is not None or "zopt's conditional" in p.summary), p.name
        chain = p.chain()
        assert any(c["name"] == "conditional" for c in chain), p.name
        for reader in ("zarrs", "tensorstore"):
            with pytest.raises(ValueError, match=f"{reader} cannot read 'conditional'"):
                check_readers({"v": chain}, [reader])
        check_readers({"v": chain}, ["zopt"])

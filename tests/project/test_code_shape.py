"""The shape of zopt's functions (issue 37): typed parameters, and few of them.

- A parameter annotated with bare ``Any`` says nothing to a reader or to mypy: fewer than 100 in
  ``zopt/`` (positional, keyword-only, ``*args`` and ``**kwargs``; ``self``/``cls`` left out).
- A function with more than 8 parameters wants a typed piece of the job instead; only the public
  entry points (``zopt.recompress``, ``zopt.recompress_in_place``, ``zopt.analyze``, ``zopt.plan``)
  and the click commands of ``zopt/cli`` take every option one by one.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "zopt"

#: (module, function) of the public entry points, which take each option as a parameter
PUBLIC = {
    ("zopt.job.api", "recompress"),
    ("zopt.job.in_place", "recompress_in_place"),
    ("zopt.job.analyze", "analyze"),
    ("zopt.job.analyze", "plan"),
    # the public API of docs/recompress.md and docs/xarray.md: keywords a user passes
    ("zopt.readback.verify", "verify"),
    ("zopt.xarray", "encoding"),
    ("zopt.xarray", "recompress"),
    ("zopt.xarray", "to_zarr"),
}
ANY_LIMIT = 100
#: bare-Any parameters today: the count may only fall (lower it as annotations land)
ANY_NOW = 0
PARAM_LIMIT = 8


def _functions() -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                out.append((module, node))
    return out


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    a = fn.args
    every = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x is not None)]
    return [x for x in every if x.arg not in ("self", "cls")]


def _is_any(annotation: ast.expr | None) -> bool:
    return (isinstance(annotation, ast.Name) and annotation.id == "Any") or (
        isinstance(annotation, ast.Attribute) and annotation.attr == "Any")


def _is_click_command(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Decorated ``@….command(…)`` or ``@….group(…)`` (click)."""
    for d in fn.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        if isinstance(target, ast.Attribute) and target.attr in ("command", "group"):
            return True
    return False


def bare_any_parameters() -> list[str]:
    return [f"{m}.{fn.name}({p.arg})" for m, fn in _functions() for p in _params(fn) if _is_any(p.annotation)]


def long_signatures() -> list[str]:
    return sorted(
        f"{m}.{fn.name}: {len(_params(fn))}" for m, fn in _functions()
        if len(_params(fn)) > PARAM_LIMIT and (m, fn.name) not in PUBLIC
        and not (m.startswith("zopt.cli") and _is_click_command(fn)))


def test_the_counters_see_what_they_count() -> None:
    """The walk finds the public entry points and the click commands (an empty walk passes anything)."""
    names = {(m, fn.name) for m, fn in _functions()}
    assert names >= PUBLIC
    assert any(m.startswith("zopt.cli") and _is_click_command(fn) for m, fn in _functions())
    fn = ast.parse("def f(self, a: Any, *b: typing.Any, c: int, **d: Any) -> None: ...").body[0]
    assert isinstance(fn, ast.FunctionDef)
    assert [p.arg for p in _params(fn) if _is_any(p.annotation)] == ["a", "b", "d"]


def test_bare_any_parameters_do_not_grow() -> None:
    found = bare_any_parameters()
    assert len(found) <= ANY_NOW, (
        f"{len(found)} parameters annotated bare Any (at most {ANY_NOW}): give the new ones a real type "
        "(numpy.typing, zarr's types, a Protocol, a TypedDict, or object where it is opaque)")


def test_bare_any_parameters_under_100() -> None:
    found = bare_any_parameters()
    assert len(found) < ANY_LIMIT, f"{len(found)} parameters annotated bare Any, e.g. {found[:10]}"


def test_no_private_function_takes_more_than_8_parameters() -> None:
    found = long_signatures()
    assert not found, f"{len(found)} functions outside the public entry points take more than {PARAM_LIMIT} parameters: {found}"

"""Every exception class zopt defines derives from ``zopt.errors.ZoptError`` (callers catch one family)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import zopt
from zopt.errors import ZoptError


def _exception_classes() -> list[type]:
    found = {}
    for info in pkgutil.walk_packages(zopt.__path__, "zopt."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__.startswith("zopt"):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return list(found.values())


def test_every_zopt_exception_is_a_zopt_error():
    classes = _exception_classes()
    names = {c.__name__ for c in classes}
    assert {"PlanMismatchError", "ShardIndexError", "CastError", "OverlapError", "ResumeMismatchError"} <= names
    assert [c.__qualname__ for c in classes if not issubclass(c, ZoptError)] == []


def test_they_keep_the_builtin_base_callers_catch():
    from zopt.codecs.exact_cast import CastError
    from zopt.planning.plan import PlanMismatchError
    from zopt.store.shards import ShardIndexError

    assert all(issubclass(c, ValueError) for c in (CastError, PlanMismatchError, ShardIndexError))

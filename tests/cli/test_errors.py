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


def test_an_option_error_names_its_option_for_callers_and_the_cli(tmp_path):
    """``OptionError`` carries the option's name: callers (and the CLI, mapping it to a flag) read
    ``exc.option``, not the message; it stays a ``ValueError`` with the message "option: …"."""
    import pickle

    import pytest
    from click.testing import CliRunner

    from zopt.cli.commands import main
    from zopt.errors import OptionError
    from zopt.job.options import RecompressJob

    for kwargs, option in (({"budget": "x"}, "budget"), ({"chunks": "a=1,2"}, "chunks"), ({"layout": "x"}, "layout"),
                           ({"preset": "tiny"}, "preset"), ({"max_memory": "lots"}, "max_memory")):
        with pytest.raises(OptionError) as info:
            RecompressJob.parse(str(tmp_path), str(tmp_path / "out"), **kwargs)
        assert isinstance(info.value, ValueError | ZoptError) and info.value.option == option
        assert str(info.value) == f"{option}: {info.value.message}"
        copy = pickle.loads(pickle.dumps(info.value))  # raised in a Dask worker, re-raised in the client
        assert (type(copy), copy.option, str(copy)) == (OptionError, option, str(info.value))
    both = OptionError("preset", "names a codec chain", conflicts=("codecs",))
    assert str(both) == "preset: names a codec chain; give preset or codecs, not both"
    res = CliRunner().invoke(main, ["recompress", str(tmp_path), str(tmp_path / "b"), "--preset", "fast", "--codecs", "[]"])
    assert res.exit_code == 2 and "Invalid value for --preset: names a codec chain; give --preset or --codecs, not both" \
        in res.output, res.output

"""What this installation of zopt runs on: the compiled loops (on, or off and why), and the zstd
and blosc libraries numcodecs bundles (``zopt --version``, ``zopt info``).

Read-only: it asks ``zopt.compat.loops`` and ``zopt.compat.libzstd`` whether they loaded (loading
them if nothing did yet) and changes nothing. The loops are off when ``ZOPT_NO_LOOPS`` is set,
when the library was not built at install (no working C compiler, or a platform without POSIX:
the build says so), when the library found is of another ABI version or does not load, or when
numcodecs' zstd extension exports no ``ZSTD_*`` symbols (zopt then calls numcodecs per chunk).
Either way the output bytes are the same; only the speed differs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Engine", "engine", "engine_line"]


@dataclass(frozen=True)
class Engine:
    """loops: the compiled loops are loaded. why: why not (empty when they are). zstd, blosc: the
    versions of the libraries numcodecs bundles ("?" when unknown). zstd_direct: zopt calls
    numcodecs' zstd library directly (``zopt.compat.libzstd``), without a context per chunk."""

    loops: bool
    why: str
    zstd: str
    blosc: str
    zstd_direct: bool


def _library_files() -> list[Path]:
    """The compiled loops' files where ``zopt.compat.loops`` looks for them."""
    from zopt.compat import loops

    find = getattr(loops, "_paths", None)  # beside the module, then in the installed distribution
    if find is not None:
        return list(find())
    path = Path(loops.__file__).with_name("_loops.so.1")
    return [path] if path.is_file() else []


def _why_off(zstd_direct: bool) -> str:
    if os.environ.get("ZOPT_NO_LOOPS"):
        return "ZOPT_NO_LOOPS is set"
    files = _library_files()
    if not files:
        return "not built at install, no working C compiler or no POSIX"
    if not zstd_direct:
        return "numcodecs' zstd library exports no ZSTD_* symbols"
    from zopt.compat import loops

    return f"{files[0]} did not load (another ABI version than {loops.VERSION}, or not for this platform)"


def _zstd_version() -> str:
    try:
        import numcodecs.zstd as nz

        n = int(nz.VERSION_NUMBER)
        return f"{n // 10000}.{n // 100 % 100}.{n % 100}"
    except (ImportError, AttributeError, ValueError):
        return "?"


def _blosc_version() -> str:
    try:
        from numcodecs import blosc

        return str(blosc.VERSION_STRING)
    except (ImportError, AttributeError):
        return "?"


def engine() -> Engine:
    """The engine of this process (``Engine``)."""
    from zopt.compat import libzstd, loops

    try:
        zstd_direct = bool(libzstd.available())
    except Exception:  # noqa: BLE001 - a report: a failing probe is "off", never an error
        zstd_direct = False
    on = loops.available()
    return Engine(on, "" if on else _why_off(zstd_direct), _zstd_version(), _blosc_version(), zstd_direct)


def engine_line(e: Engine | None = None) -> str:
    """One line, e.g. ``engine: compiled loops on; zstd 1.5.7, blosc 1.21.6 (numcodecs 0.16.6)``
    or ``engine: compiled loops off (ZOPT_NO_LOOPS is set; the same bytes, slower); ...``."""
    import numcodecs

    e = engine() if e is None else e
    loops = "compiled loops on" if e.loops else f"compiled loops off ({e.why}; the same bytes, slower)"
    return f"engine: {loops}; zstd {e.zstd}, blosc {e.blosc} (numcodecs {numcodecs.__version__})"

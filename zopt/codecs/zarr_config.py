"""zopt's codec pipeline and ``bytes`` codec in zarr-python: inside zopt's jobs, or where asked.

Installing or importing zopt changes no zarr setting: zarr keeps its own default codec pipeline,
its ``bytes`` codec and its decoding for every program that does not use zopt. zopt's codecs and
data types are only *registered* (entry points; ``register()``), which adds names zarr did not know
and replaces none. The one setting an import writes keeps zarr as it is without zopt: where zarr
(3.2+) ships its own ``scale_offset``/``cast_value`` and names no implementation, zarr's own is
named (``zopt.compat.zarr_compat.keep_zarrs_own_codecs``), so zopt's registration beside it does not
make zarr warn and pick zopt's.

zopt's ``ChunkIndexCodecPipeline`` (chunk coordinates for ``conditional`` decisions, chunk keys in
errors, bounded decoding) and its ``BytesCodec`` (zopt's data types as zarrs and tensorstore store
them) are selected:

- inside zopt's own jobs: ``zopt_pipeline()`` is a context around a job (recompress, verify,
  analyze, compact, info and their tasks on a worker). It is counted, so nested and concurrent
  jobs in one process share one change, undone when the last one ends. While a job runs the
  setting is process-wide (zarr's configuration is), so an array another thread opens meanwhile
  gets zopt's pipeline too;
- where the user opts in: ``use_pipeline()`` (``zopt.use_pipeline()``) selects them for the rest of
  the process.

Either way a setting is changed only while it still holds zarr's default, so an explicit choice
such as the zarrs pipeline is kept. Reading zopt's codecs (``conditional``, ``shuffle``, …) needs
neither: the pipeline is an optimisation and a source of chunk keys in errors.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import Any, ParamSpec, TypeVar

import zarr

from zopt.compat.zarr_compat import SHARED_CODEC_NAMES, ZARRS_OWN_SELECTED, codec_registry
from zopt.dtypes import register_data_types

__all__ = ["ZARR_DEFAULTS", "ZOPT_SETTINGS", "register", "settings", "use_pipeline",
           "with_zopt_pipeline", "zopt_pipeline"]

ZARR_DEFAULTS = {
    "codec_pipeline.path": "zarr.core.codec_pipeline.BatchedCodecPipeline",
    "codecs.bytes": "zarr.codecs.bytes.BytesCodec",
}
ZOPT_SETTINGS = {
    "codec_pipeline.path": "zopt.codecs.pipeline.ChunkIndexCodecPipeline",
    "codecs.bytes": "zopt.codecs.bytes.BytesCodec",
}

P = ParamSpec("P")
R = TypeVar("R")


def register() -> None:
    """Register zopt's pipeline, its ``bytes`` codec (beside zarr's, selected by no one) and its
    data types with zarr. Changes no setting; idempotent."""
    from zarr.registry import register_codec

    import zopt.codecs.pipeline  # noqa: F401  (registers the pipeline under its qualified name)
    from zopt.codecs.bytes import BytesCodec

    register_codec("bytes", BytesCodec)
    register_data_types()


def settings() -> dict[str, str]:
    """The settings that select zopt's pipeline, ``bytes`` codec and shared codec names, for
    every key whose value is still zarr's default (empty when the user chose them all)."""
    changed = {}
    for key, value in ZOPT_SETTINGS.items():
        if zarr.config.get(key, None) in (ZARR_DEFAULTS[key], None):
            changed[key] = value
    changed.update(select_shared_codec_names())
    return changed


def use_pipeline() -> dict[str, str]:
    """Select zopt's codec pipeline and ``bytes`` codec in zarr for the rest of the process
    (where zarr's defaults are still set); returns the settings changed.

    Opt-in: nothing calls it on import. Arrays opened afterwards publish chunk coordinates to
    ``conditional`` decisions that need them (``MaskGrid``), name the chunk key in decoding
    errors, and write zopt's data types as zarrs and tensorstore do (int4 -8 as ``0xF8``).
    """
    register()
    changed = settings()
    if changed:
        zarr.config.set(changed)
    return changed


_lock = threading.Lock()
_depth = 0
_undo: Any = None
_quiet: Any = None

#: zarr-python 3.1-3.3 warns each time a job creates or opens an array with a ``numcodecs.*`` codec
#: (pcodec, numcodecs' shuffle: the menu's portable chains); a job's readers line says who reads them
NUMCODECS_WARNING = "Numcodecs codecs are not in the Zarr version 3 specification"


@contextmanager
def zopt_pipeline() -> Iterator[None]:
    """zopt's settings (``settings()``) for the duration of the block: a zopt job's context.

    Counted: the first of nested or concurrent blocks applies them, the last one to end restores
    what was there before (donfig's ``set`` undone). Arrays must be opened inside the block; an
    array keeps the pipeline it was opened with. zarr's warning about the ``numcodecs.*`` codecs
    the job writes (``NUMCODECS_WARNING``) is not shown inside the block: the job's readers line
    names who reads them."""
    global _depth, _undo, _quiet
    with _lock:
        if _depth == 0:
            register()
            changed = settings()
            _undo = zarr.config.set(changed) if changed else None
            _quiet = warnings.catch_warnings()
            _quiet.__enter__()
            warnings.filterwarnings("ignore", message=NUMCODECS_WARNING)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _undo is not None:
                _undo.__exit__(None, None, None)
                _undo = None
            if _depth == 0 and _quiet is not None:
                _quiet.__exit__(None, None, None)
                _quiet = None


def with_zopt_pipeline(func: Callable[P, R]) -> Callable[P, R]:
    """``func`` run inside ``zopt_pipeline()`` (a job's public function or a worker's task)."""

    @wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with zopt_pipeline():
            return func(*args, **kwargs)

    return wrapper


def select_shared_codec_names() -> dict[str, str]:
    """Settings that select zopt's implementation of the codec names zarr-python >= 3.2 also
    ships (``scale_offset``, ``cast_value``), where zarr's config names none.

    zarr would otherwise warn "Codec 'scale_offset' not configured in config. Selecting any
    implementation" and pick by registration order. zopt's is chosen because it serves every
    data type zarr's does plus zopt's sub-byte and ML types, writes the same bytes where both
    apply (tested), and needs no ``cast-value-rs``. zarr's own stays one setting away:
    ``zarr.config.set({"codecs.cast_value": "zarr.codecs.cast_value.CastValue"})``.
    """
    out = {}
    for name in SHARED_CODEC_NAMES:
        chosen = zarr.config.get(f"codecs.{name}", None)
        if chosen is not None and chosen != ZARRS_OWN_SELECTED.get(name):
            continue  # the user chose (not zarr's own as zopt's import named it)
        registry = codec_registry(name)
        if registry is None:
            continue
        ours = [q for q in registry if q.startswith("zopt.")]
        if ours and len(registry) > 1:
            out[f"codecs.{name}"] = ours[0]
    return out

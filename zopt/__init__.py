"""zopt: smaller Zarr v3 stores, written chunk by chunk in parallel with Dask.

The public functions, one per job (each documented where it lives; ``help(zopt.recompress)``):

====================================  ============================================================
``zopt.recompress(src, dst, ...)``    rewrite a Zarr v2/v3 store or netCDF file as Zarr v3
``zopt.recompress_in_place(store)``   re-decide the ``conditional`` masks of a store, shard by shard
``zopt.verify(src, dst)``             compare every array bit for bit or within its lossy bound
``zopt.analyze(store)``               per-chunk measurements and trial encodings (a Dask graph)
``zopt.plan(store, policy=...)``      a mask per chunk from an analysis, optionally saved
``zopt.compact(store)``               pack a store's fixed-slot shards
``zopt.info(store)``                  layouts, slot fill, masks and sizes of a store's arrays
====================================  ============================================================

The codecs and data types register with zarr-python through entry points (no import needed).
Importing ``zopt`` changes no zarr setting: zopt's codec pipeline and ``bytes`` codec apply inside
zopt's jobs, in a ``with zopt.pipeline():`` block, or everywhere after ``zopt.use_pipeline()``
(``zopt.codecs.zarr_config``). Importing
``zopt`` stays light: the codecs load on first use, the job functions load Dask and xarray. The layers,
bottom to top (``docs/architecture.md``): ``errors`` → ``compat/`` → ``dtypes/`` → ``codecs/`` →
``store/`` → ``io/`` → ``planning/`` → ``lossy/`` → ``job/`` → ``readback/`` → ``cli/``,
``xarray``.
"""

from __future__ import annotations

import importlib
from typing import Any

from zopt._version import __version__
from zopt.compat.zarr_compat import keep_zarrs_own_codecs as _keep_zarrs_own_codecs
from zopt.dtypes import register_data_types as _register_data_types
from zopt.errors import ChunkDecodeError, ZoptError

_register_data_types()  # zarr 3.1-3.3 never load the zarr.data_type entry points
_keep_zarrs_own_codecs()  # zarr >= 3.2 keeps its own scale_offset/cast_value, as without zopt

#: public name → (module, attribute), imported on first use (PEP 562)
_LAZY = {
    "BytesCodec": ("zopt.codecs.bytes", "BytesCodec"),
    "ConditionalCodec": ("zopt.codecs.conditional", "ConditionalCodec"),
    "ShuffleCodec": ("zopt.codecs.shuffle", "ShuffleCodec"),
    "CompressIfSmaller": ("zopt.codecs.decisions", "CompressIfSmaller"),
    "DecisionFunction": ("zopt.codecs.decisions", "DecisionFunction"),
    "FixedMask": ("zopt.codecs.decisions", "FixedMask"),
    "MaskGrid": ("zopt.codecs.decisions", "MaskGrid"),
    "current_chunk_index": ("zopt.codecs.context", "current_chunk_index"),
    "use_pipeline": ("zopt.codecs.zarr_config", "use_pipeline"),
    "pipeline": ("zopt.codecs.zarr_config", "zopt_pipeline"),
    "recompress": ("zopt.job.api", "recompress"),
    "recompress_in_place": ("zopt.job.in_place", "recompress_in_place"),
    "RecompressJob": ("zopt.job.options", "RecompressJob"),
    "RecompressReport": ("zopt.job.reports", "RecompressReport"),
    "verify": ("zopt.readback.verify", "verify"),
    "analyze": ("zopt.job.analyze", "analyze"),
    "plan": ("zopt.job.analyze", "plan"),
    "Plan": ("zopt.planning.plan", "Plan"),
    "compact": ("zopt.job.compact", "compact"),
    "info": ("zopt.readback.info", "store_info"),
}

__all__ = ["ChunkDecodeError", "ZoptError", "__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'zopt' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

"""The recompress engine, by its former name: a re-export of ``zopt.recompress``.

``recompress(src, dst)`` copies every variable of a Zarr v2/v3 store or netCDF file into a new
Zarr v3 store whose arrays use a target codec chain; ``recompress_in_place(store)`` re-decides
the masks of a store's ``conditional`` codecs shard by shard. The job lives in the
``zopt.recompress`` package, one module per step (``docs/architecture.md``); this module keeps
the names code and tests import from ``zopt.engine``.
"""

from __future__ import annotations

from zopt.paths import PARTIAL_SUFFIX
from zopt.recompress.api import parse_max_memory, recompress, recompress_in_place
from zopt.recompress.chains import DEFAULT_CHAIN, parse_chain, split_chain, with_decision
from zopt.recompress.reports import ArrayReport, RecompressReport
from zopt.recompress.targets import chunk_bytes_stored, stored_sizes
from zopt.recompress.tasks import (
    ShardJob,
    finalize_shard,
    rewrite_chunk_in_place,
    rewrite_shard_in_place,
    write_packed_shard,
    write_region,
    write_slot_part,
)
from zopt.recompress.work import LAYOUTS, SLOT_TASK_BYTES, projected_task_bytes, slot_parts
from zopt.sources import SourceVariable, open_source, read_source, source_variables

__all__ = [
    "DEFAULT_CHAIN",
    "LAYOUTS",
    "PARTIAL_SUFFIX",
    "SLOT_TASK_BYTES",
    "ArrayReport",
    "RecompressReport",
    "SourceVariable",
    "chunk_bytes_stored",
    "open_source",
    "parse_chain",
    "parse_max_memory",
    "projected_task_bytes",
    "read_source",
    "recompress",
    "recompress_in_place",
    "source_variables",
    "split_chain",
    "with_decision",
]

# the worker functions under the names tests and benchmarks import (zopt.recompress.tasks has them public)
_ShardJob = ShardJob
_finalize_shard = finalize_shard
_rewrite_chunk_in_place = rewrite_chunk_in_place
_rewrite_shard_in_place = rewrite_shard_in_place
_slot_parts = slot_parts
_stored_sizes = stored_sizes
_write_packed_shard = write_packed_shard
_write_region = write_region
_write_slot_part = write_slot_part

"""The recompress engine: a Dask graph with one task per output shard.

``recompress(src, dst)`` copies every variable of a Zarr v2/v3 store or netCDF file into a new
Zarr v3 store whose arrays use a target codec chain — by default ``bytes`` +
``conditional([shuffle, zstd])`` deciding ``compress_if_smaller`` per inner chunk.

How the work is split:

- Values are copied bit for bit (no CF decoding) and CF attributes (``_FillValue``,
  ``scale_factor``, ``units`` …) travel as they are, so ``xarray.open_zarr(dst)`` equals
  ``xarray.open_dataset(src)``. A Zarr v3 source is described and read through zarr, and the
  destination's metadata is copied at the Zarr level (arrays not rewritten: file for file);
  Zarr v2 and netCDF/HDF5 sources are opened by xarray, which writes the destination's
  metadata as ``Dataset.to_zarr`` would.
- Every variable of one dimension or more is written by Dask tasks that each read only their
  region of the source. A sharded target gets one task per shard that encodes the shard's inner
  chunks with ``zopt.codecs.chain.ChunkEncoder`` and writes the shard file packed
  (``layout="compact"``), or several slot-writer tasks per shard plus a finalize task
  (``layout="fixed-slot"``, see ``zopt.shards``). Decisions are attached on the worker
  (they are runtime objects and are not pickled with codecs). An unsharded target gets one
  task per chunk writing through zarr.
- The store is written under ``<dst>.zopt-partial`` and renamed to ``dst`` when every task has
  finished; a failed run removes the partial store, and an interrupted one leaves only that
  clearly named directory. The source is only read. A destination store without positional
  writes or rename (a zarr ``Store``, an fsspec URL) gets packed shards, written in place.

``recompress_in_place(store)`` re-decides the masks of a store whose arrays already have a
``conditional`` codec, replacing each shard atomically without changing any metadata.

Size: over ~500 lines on purpose for now. It holds the job end to end (checks, target
creation, the task graph, publish, the in-place rewrite) and its worker tasks; source reading,
chunk choice, grid maths, scheduling and graph layers already live in ``zopt.sources``,
``zopt.chunking``, ``zopt.grid``, ``zopt.scheduling`` and ``zopt.graph``. The split into a pure
plan of work, targets and tasks (issue 17) is the next step.
"""

from __future__ import annotations

import collections
import json
import math
import os
import shutil
import time
import uuid
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr
import zarr

from zopt import locations as loc
from zopt._zarr_compat import open_array
from zopt.chunk_feed import AlignedChunkReader
from zopt.chunking import (
    parse_shape,
    unused_shape_notes,
    variable_layout,
)
from zopt.codecs.chain import ChunkEncoder, chunk_spec
from zopt.codecs.conditional import conditional_codecs_in, with_decision_in
from zopt.decisions import Decision
from zopt.graph import shard_tasks
from zopt.grid import is_fill, padded
from zopt.grid import regions as _regions
from zopt.journal import JOURNAL_DIR, Journal, fingerprint, keeps_partial, mark, remove_temporaries
from zopt.lock import store_lock
from zopt.menu import default_chain
from zopt.paths import (
    PARTIAL_SUFFIX,
    check_no_overlap,
    check_replaceable,
    check_store_replaceable,
    publish,
    recover,
    resolve,
    store_text,
)
from zopt.rewrite import (
    GRACE_SECONDS,
    has_inner_checksum,
    rewrite_shard,
    same_chunks,
    shrink_after_grace,
    unchecked_note,
)
from zopt.scheduling import compute as _compute
from zopt.shards import (
    ShardLayout,
    finalize_slots,
    is_packed,
    layout_of,
    pack_parts,
    read_shard,
    remove_temp_files,
    tmp_path,
    write_packed,
    write_slots,
)
from zopt.sources import (
    SourceVariable,
    children_to_copy,
    is_zarr,
    open_source,
    read_source,
    release,
    root_array_metadata,
    source_variables,
    zarr_v3_group,
)

__all__ = [
    "ArrayReport",
    "DEFAULT_CHAIN",
    "RecompressReport",
    "SourceVariable",
    "open_source",
    "read_source",
    "recompress",
    "recompress_in_place",
    "source_variables",
    "with_decision",
]

#: the default target chain for types of 2 bytes and more (``zopt.menu.default_chain`` gives
#: each data type's): raw bytes, then shuffle+zstd where they make the chunk smaller
DEFAULT_CHAIN: list[dict[str, Any]] = [
    {"name": "bytes", "configuration": {"endian": "little"}},
    {
        "name": "conditional",
        "configuration": {"codecs": [{"name": "shuffle"}, {"name": "zstd", "configuration": {"level": 3}}]},
    },
]
#: shard layouts ``recompress`` writes (see ``zopt.shards``)
LAYOUTS = ("compact", "fixed-slot")
#: default raw bytes per fixed-slot writer task
SLOT_TASK_BYTES = 16 * 1024 * 1024


# -- reports ---------------------------------------------------------------------------------------


@dataclass
class ArrayReport:
    """What the rewrite of one array did. Sizes in bytes, time in seconds."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    chunks: int  # inner chunks in the grid
    chunks_written: int  # inner chunks stored (the rest equal the fill value)
    logical_bytes: int
    stored_before: int | None
    stored_after: int = 0
    masks: collections.Counter = field(default_factory=collections.Counter)
    seconds: float = 0.0
    layout: str = "compact"  # compact, fixed-slot or unsharded
    allocated_after: int = 0  # bytes on disk (less than stored_after for sparse slot files)
    projected_task_bytes: int = 0  # projected peak memory of one task (see projected_task_bytes)
    units: int = 0  # write units (shards; chunks when unsharded), each one marked done in the journal
    units_resumed: int = 0  # units an interrupted run of the same job had finished: skipped
    tasks: int = 0  # Dask tasks of this array in this run

    @property
    def ratio(self) -> float:
        return self.logical_bytes / self.stored_after if self.stored_after else math.inf


@dataclass
class RecompressReport:
    """Per-array reports, the destination (a path, or a store's URL), wall time in seconds of the
    whole run and of the Dask graph alone (``graph_seconds``: reading, encoding and writing,
    without metadata and setup), the source's bytes, and ``notes`` on what was done differently
    from what was asked."""

    dst: str
    arrays: list[ArrayReport]
    seconds: float
    source_bytes: int | None = None
    graph_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)  # what the run did differently from what was asked, and why

    @property
    def logical_bytes(self) -> int:
        return sum(a.logical_bytes for a in self.arrays)

    @property
    def stored_after(self) -> int:
        return sum(a.stored_after for a in self.arrays)

    @property
    def mb_per_s(self) -> float:
        return self.logical_bytes / 1e6 / self.seconds if self.seconds else math.inf

    def masks(self) -> collections.Counter:
        total: collections.Counter = collections.Counter()
        for a in self.arrays:
            total.update(a.masks)
        return total


# -- sources ----------------------------------------------------------------------------------------


_is_zarr = is_zarr


def _source_nbytes(src: str) -> int:
    return loc.total_bytes(src)


def chunk_bytes_stored(store: str, name: str) -> int:
    """Bytes of chunk (or shard) files of array ``name`` in a local store, metadata excluded."""
    return _stored_sizes(store, name)[0]


def _stored_sizes(store: Any, name: str) -> tuple[int, int]:
    """(apparent, allocated) bytes of the chunk files of array ``name`` in a local store (a path),
    or of its chunk keys in a zarr Store (allocated = apparent)."""
    from zopt.shards import allocated_bytes

    if not isinstance(store, str | os.PathLike):
        from zarr.core.sync import sync

        async def total() -> int:
            return sum([await store.getsize(k) async for k in store.list_prefix(f"{name}/c/" if name else "c/")])

        n = sync(total())
        return n, n
    apparent = allocated = 0
    for dirpath, _, files in os.walk(Path(store) / name):
        for f in files:
            if f not in ("zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"):
                p = os.path.join(dirpath, f)
                apparent += os.path.getsize(p)
                allocated += allocated_bytes(p)
    return apparent, allocated


def _stored_bytes_of(src: str, name: str) -> int | None:
    if not _is_zarr(src):
        return None
    if loc.is_url(src):
        return sum(n for p, n in loc.files(loc.join(src, name) if name else src)
                   if p.rsplit("/", 1)[-1] not in ("zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"))
    return chunk_bytes_stored(src, name)


# -- codec chain and chunking -----------------------------------------------------------------------


def parse_chain(chain: Sequence[dict[str, Any]] | str | None) -> list[dict[str, Any]]:
    """The target codec chain as a list of codec JSON objects (a JSON string is parsed).

    Raises ValueError naming ``codecs`` if it is not a list of codec objects.
    """
    if chain is None:
        return json.loads(json.dumps(DEFAULT_CHAIN))
    if isinstance(chain, str):
        try:
            chain = json.loads(chain)
        except json.JSONDecodeError as exc:
            raise ValueError(f"codecs: not valid JSON: {exc}") from exc
    if not isinstance(chain, list) or not all(isinstance(c, dict) and "name" in c for c in chain):
        raise ValueError(
            "codecs: expected a JSON list of codec objects such as "
            '[{"name": "bytes"}, {"name": "conditional", "configuration": {"codecs": [...]}}]'
        )
    return chain


def split_chain(chain: list[dict[str, Any]]) -> dict[str, Any]:
    """Codec objects for ``filters``/``serializer``/``compressors`` from a JSON chain.

    A ``bytes`` codec given without ``endian`` is written little-endian, as zarr's default
    chain is: zarr 3.1 would take the machine's order and 3.4 refuses it for multi-byte types,
    so the same command gives the same store on every zarr (zarr drops ``endian`` again for
    1-byte types). Raises ValueError naming ``codecs[i]``.
    """
    from zarr.abc.codec import ArrayArrayCodec, ArrayBytesCodec, BytesBytesCodec
    from zarr.registry import get_codec_class

    from zopt._zarr_compat import resolve_codec

    filters, serializer, compressors = [], None, []
    for i, c in enumerate(chain):
        try:
            cls = get_codec_class(c["name"])
        except (KeyError, ValueError):  # unknown: resolve_codec names it below
            cls = None
        if serializer is None and isinstance(cls, type) and issubclass(cls, BytesBytesCodec):
            raise ValueError(f"codecs: the chain needs an array→bytes codec such as {{\"name\": \"bytes\"}} first; "
                             f"codecs[{i}] {c['name']!r} is a bytes→bytes codec, which comes after it")
        if c.get("name") == "bytes" and not (c.get("configuration") or {}).get("endian"):
            c = {"name": "bytes", "configuration": {**(c.get("configuration") or {}), "endian": "little"}}
        codec = resolve_codec(c, where=f"codecs[{i}]")
        if isinstance(codec, ArrayArrayCodec):
            filters.append(codec)
        elif isinstance(codec, ArrayBytesCodec):
            if serializer is not None:
                raise ValueError("codecs: the chain has more than one array→bytes codec")
            serializer = codec
        elif isinstance(codec, BytesBytesCodec):
            compressors.append(codec)
    if serializer is None:
        raise ValueError("codecs: the chain needs an array→bytes codec such as 'bytes'")
    return {"filters": filters or None, "serializer": serializer, "compressors": compressors or None}


def _with_checksum(split: dict[str, Any]) -> dict[str, Any]:
    """``split`` with zarr's ``crc32c`` codec appended to the bytes→bytes codecs (unless last)."""
    from zarr.codecs import Crc32cCodec

    compressors = list(split["compressors"] or [])
    if not (compressors and isinstance(compressors[-1], Crc32cCodec)):
        compressors.append(Crc32cCodec())
    return {**split, "compressors": compressors}


# -- decisions on opened arrays ----------------------------------------------------------------------


def with_decision(array: zarr.Array, decision: Any, trial_encode: bool | None = None) -> zarr.Array:
    """The same array, with ``decision`` attached to all its ``conditional`` codecs.

    Use this to write with a decision into an array opened from a store (decisions are runtime
    objects and are not stored). Raises ValueError if the array has no conditional codec.
    """
    from dataclasses import replace

    from zarr.core.array import AsyncArray

    meta = array.metadata
    if not conditional_codecs_in(meta.codecs):
        raise ValueError(f"array {array.path!r} has no conditional codec to attach a decision to")
    new_meta = replace(meta, codecs=with_decision_in(meta.codecs, decision, trial_encode))
    aa = array._async_array
    return zarr.Array(AsyncArray(metadata=new_meta, store_path=aa.store_path, config=aa.config))


@dataclass
class _Recorder(Decision):
    """Wraps a decision and records each chunk's mask and payload size (bytes)."""

    inner: Decision | None
    log: list = field(default_factory=list)

    @property
    def needs_chunk_index(self) -> bool:  # type: ignore[override]
        return bool(self.inner and self.inner.needs_chunk_index)

    def choose(self, chunk_index, codecs, data, run):
        if self.inner is None:
            mask, payload = 0, data
        else:
            mask, payload = self.inner.choose(chunk_index, codecs, data, run)
        self.log.append((chunk_index, mask, int(payload.size)))
        return mask, payload


# -- tasks ------------------------------------------------------------------------------------------


def _write_region(
    src: str, name: str, dst: str, region: tuple[slice, ...], decision: Any, plan: Any = None, token: str | None = None,
    marker: str | None = None,
    lossy: Any = None,
) -> tuple[collections.Counter, int]:
    """Dask task (unsharded targets): write one chunk region through zarr; then its journal ``marker``."""
    data = read_source(src, name, region, token)
    array = zarr.open_array(dst, path=name, mode="r+")
    if lossy is not None:  # zopt.lossy: check the bound or bitround, per chunk
        index = tuple(r.start // c for r, c in zip(region, array.chunks, strict=True))
        data = lossy.prepare(index, data, f"chunk {index}")
    if plan is not None:  # one chunk per task here: check its content against the plan
        index = tuple(r.start // c for r, c in zip(region, array.chunks, strict=True))
        plan.check_chunk(index, data, array.fill_value)
        decision = plan
    conditional = conditional_codecs_in(array.metadata.codecs)
    recorder = None
    if conditional:
        resolved = conditional[0].with_decision(decision).decision
        recorder = _Recorder(resolved)
        array = with_decision(array, recorder)
    array[region] = data
    masks: collections.Counter = collections.Counter()
    if recorder is not None:
        masks.update(mask for _, mask, _ in recorder.log)
    result = masks, len(recorder.log) if recorder else 0
    if marker is not None:
        mark(marker, *result)
    return result


@dataclass(frozen=True)
class _ShardJob:
    """What every shard task of one array needs (picklable for distributed workers)."""

    src: str
    name: str
    shard_dir: str  # directory of the array in the destination store
    layout: ShardLayout
    shape: tuple[int, ...]
    decision: Any
    job: str  # identifies this run's temporary shard files and its open sources (zopt.sources)
    chunk_key_encoding: Any  # the array's zarr ChunkKeyEncoding: where each shard's key is
    plan: Any = None  # zopt.plan.ArrayPlan: its masks decide, its digests check the content
    store: Any = None  # a zarr Store without positional writes; shard_dir is then the array's key prefix
    lossy: Any = None  # zopt.lossy.prepare.LossyVariable: checks (abs) or bitrounds each inner chunk

    def path(self, shard_coords: tuple[int, ...]) -> str:
        return os.path.join(self.shard_dir, *self.chunk_key_encoding.encode_chunk_key(shard_coords).split("/"))

    def write_packed(self, shard_coords: tuple[int, ...], data: bytes | list | None) -> None:
        """Write (or, for None, delete) a whole packed shard (bytes, or ``pack_parts``' pieces):
        atomically into a local directory, with one ``set`` into a store."""
        if self.store is None:
            write_packed(self.path(shard_coords), data)
            return
        if isinstance(data, list):
            data = b"".join(data)
        from zarr.core.buffer import default_buffer_prototype
        from zarr.core.sync import sync

        key = "/".join(p for p in (self.shard_dir, self.chunk_key_encoding.encode_chunk_key(shard_coords)) if p)
        if data is None:
            sync(self.store.delete(key))
        else:
            sync(self.store.set(key, default_buffer_prototype().buffer.from_bytes(data)))

    def encode(self, shard_coords: tuple[int, ...], part: tuple[int, int] | None, limit: bool):
        """Read the region of a shard (or of part ``[start, stop)`` of its first split axis)
        and yield ``(i, EncodedChunk)`` for its inner chunks that differ from the fill value."""
        layout = self.layout
        region = list(layout.shard_region(shard_coords, self.shape))
        axis = _split_axis(layout)
        if part is not None:
            lo = region[axis].start + part[0] * layout.inner_shape[axis]
            hi = min(region[axis].start + part[1] * layout.inner_shape[axis], self.shape[axis])
            region[axis] = slice(lo, hi)
        origin = [r.start for r in region]
        encoder = layout.inner_encoder().with_decision(self.plan if self.plan is not None else self.decision)
        native = encoder.spec.dtype.to_native_dtype()
        fill = np.asarray(layout.fill_value, dtype=native)
        # issue 19: source chunks that are the inner chunks are decoded one by one into a reused buffer
        direct = AlignedChunkReader.open(self.src, self.name, layout.inner_shape, native)
        if direct is None:
            data = np.asarray(read_source(self.src, self.name, tuple(region), self.job)).astype(native, copy=False)
        slot = layout.slot_size if limit else None
        for i, index, chunk_region in layout.inner_chunks(shard_coords, self.shape):
            r = chunk_region[axis]
            if r.start < region[axis].start or r.start >= region[axis].stop:
                continue
            if direct is not None:
                local = direct.read(index, fill)[tuple(slice(0, c.stop - c.start) for c in chunk_region)]
            else:
                local = data[tuple(slice(c.start - o, c.stop - o) for c, o in zip(chunk_region, origin, strict=True))]
            if self.plan is not None:
                self.plan.check_chunk(index, local, fill)
            if self.lossy is not None:
                local = self.lossy.prepare(index, local, f"inner chunk {index} (shard {tuple(shard_coords)})")
            chunk = padded(local, layout.inner_shape, fill)
            if is_fill(chunk, fill):
                continue
            encoded = encoder.encode(chunk, index, limit=slot)
            if direct is not None and np.may_share_memory(encoded.data, chunk):  # e.g. a [bytes] chain: no copy made
                encoded = type(encoded)(encoded.data.copy(), encoded.masks)
            yield i, encoded


def _parse_bytes(value: int | str | None) -> int | None:
    if value is None:
        return None
    from dask.utils import parse_bytes

    try:
        n = parse_bytes(value) if isinstance(value, str) else int(value)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"max_memory: {value!r} is not a size such as 2GiB or 500MB") from exc
    if n <= 0:
        raise ValueError(f"max_memory: {value!r} must be positive")
    return n


def projected_task_bytes(array: zarr.Array, shard_layout: ShardLayout | None, layout: str, slot_parts: int | None) -> int:
    """Projected peak memory (bytes) of one write task of ``array``, computed before running.

    Like cubed's ``projected_mem``: decoded input region + compressed input (bounded by the
    decoded size) + encoded output (the slot bound of every inner chunk the task holds; twice
    for a packed shard, which is joined into one buffer) + per-chunk buffers (padded chunk, its
    bytes and two trial encodings: 4 inner chunks).
    """
    itemsize = array.dtype.itemsize
    if shard_layout is None:
        chunk = math.prod(array.chunks) * itemsize
        return 2 * chunk + chunk + 4 * chunk
    inner = math.prod(shard_layout.inner_shape) * itemsize
    try:
        slot = shard_layout.slot_size
    except ValueError:
        slot = 2 * inner  # compressors without a known bound: assume they at most double
    if layout == "fixed-slot":
        parts = _slot_parts(shard_layout, slot_parts)
        rows = max(b - a for a, b in parts)
        n_rows = shard_layout.chunks_per_shard[_split_axis(shard_layout)]
        n_chunks = math.ceil(shard_layout.n_inner * rows / n_rows)
        region = n_chunks * inner
        return 2 * region + n_chunks * slot + 4 * inner
    region = shard_layout.n_inner * inner
    return 2 * region + 2 * shard_layout.n_inner * slot + 4 * inner


def _memory_message(name: str, needed: int, limit: int) -> str:
    from dask.utils import format_bytes

    return (
        f"max_memory: a write task of array {name!r} needs ~{format_bytes(needed)} (projected: input region "
        f"twice, encoded output, buffers), more than the limit of {format_bytes(limit)}; use smaller --shards, "
        "or --layout fixed-slot with more --slot-parts, or raise --max-memory"
    )


def _plan_for(plan: Any, name: str, array: zarr.Array, inner: tuple[int, ...]) -> Any:
    """The plan of array ``name``, checked against the destination array (PlanMismatchError)."""
    from zopt.plan import PlanMismatchError

    if name not in plan.arrays:
        raise PlanMismatchError(
            f"plan: no masks for array {name!r} (the plan covers {sorted(plan.arrays)}); "
            "plan every rewritten array or restrict the rewrite with --variable"
        )
    ap = plan.arrays[name]
    found = conditional_codecs_in(array.metadata.codecs)
    if not found:
        raise PlanMismatchError(f"plan: the target chain of {name!r} has no conditional codec to apply masks to")
    ap.check(tuple(array.shape), inner, [c.to_dict() for c in found[0].codecs], found[0].header_bits, str(array.dtype))
    ap.validate()
    return ap


def _split_axis(layout: ShardLayout) -> int:
    cps = layout.chunks_per_shard
    return next((a for a, n in enumerate(cps) if n > 1), 0)


def _masks_of(encoded: list) -> collections.Counter:
    return collections.Counter(e.mask for _, e in encoded if e.mask is not None)


def _write_packed_shard(job: _ShardJob, shard_coords: tuple[int, ...], marker: str | None = None
                        ) -> tuple[collections.Counter, int]:
    """Dask task (compact layout): encode a whole shard and write it packed, atomically; then its journal ``marker``."""
    encoded = list(job.encode(shard_coords, None, limit=False))
    job.write_packed(shard_coords, pack_parts(job.layout, ((i, e.data) for i, e in encoded)))
    result = _masks_of(encoded), len(encoded)
    if marker is not None:
        mark(marker, *result)
    return result


def _write_slot_part(job: _ShardJob, shard_coords: tuple[int, ...], part: tuple[int, int]):
    """Dask task (fixed-slot layout): encode part of a shard and write it into its slots."""
    encoded = list(job.encode(shard_coords, part, limit=True))
    tmp = tmp_path(job.path(shard_coords), job.job)
    written = write_slots(tmp, job.layout, ((i, e.data) for i, e in encoded))
    return _masks_of(encoded), written


def _finalize_shard(job: _ShardJob, shard_coords: tuple[int, ...], *parts, marker: str | None = None
                    ) -> tuple[collections.Counter, int]:
    """Dask task (fixed-slot layout): write the shard's index and rename it into place; then its journal ``marker``."""
    path = job.path(shard_coords)
    written = [w for _, ws in parts for w in ws]
    tmp = tmp_path(path, job.job)
    if written:
        finalize_slots(tmp, path, job.layout, written)
    else:
        Path(tmp).unlink(missing_ok=True)
        Path(path).unlink(missing_ok=True)
    masks: collections.Counter = collections.Counter()
    for m, _ in parts:
        masks.update(m)
    if marker is not None:
        mark(marker, masks, len(written))
    return masks, len(written)


def _slot_parts(layout: ShardLayout, parts: int | None) -> list[tuple[int, int]]:
    """Split a shard's inner-chunk rows along its first split axis into ``parts`` slabs.

    Default: slabs of about ``SLOT_TASK_BYTES`` of raw data, at least 2 when possible."""
    n_rows = layout.chunks_per_shard[_split_axis(layout)]
    if parts is None:
        itemsize = layout.inner_encoder().spec.dtype.to_native_dtype().itemsize
        shard_bytes = math.prod(layout.shard_shape) * itemsize
        parts = max(2, math.ceil(shard_bytes / SLOT_TASK_BYTES))
    parts = max(1, min(parts, n_rows))
    bounds = np.linspace(0, n_rows, parts + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]



# -- the job ----------------------------------------------------------------------------------------


def recompress(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    *,
    codecs: Sequence[dict[str, Any]] | str | None = None,
    chunks: tuple[int, ...] | str | None = None,
    shards: tuple[int, ...] | str | None = None,
    decision: Any = "compress_if_smaller",
    variables: Sequence[str] | None = None,
    scheduler: str | None = None,
    overwrite: bool = False,
    progress: Callable[[Any], Any] | None = None,
    layout: str = "compact",
    slot_parts: int | None = None,
    plan: Any = None,
    max_memory: int | str | None = None,
    dry_run: bool = False,
    lossy: Any = None,
    readers: Sequence[str] | str | None = None,
    checksum: bool | None = None,
    before_publish: Callable[[Any, list[str]], None] | None = None,
) -> RecompressReport:
    """Rewrite ``src`` into a new Zarr v3 store ``dst`` with the target codec chain.

    Parameters
    ----------
    src : a Zarr v2/v3 store (a group, whose child groups are rewritten too, each like a store of
        its own; or a root array, giving a root array) or a netCDF/HDF5 file (without groups): a
        local path (resolved here, not on Dask workers) or an fsspec URL (``s3://…``, ``gs://…``,
        ``memory://…``, ``file://…``; see ``zopt.locations``). Only read.
    dst : the new Zarr v3 store: a local directory path (written under ``dst.zopt-partial`` and
        renamed into place at the end), or a ``zarr.abc.store.Store`` / fsspec URL such as
        ``s3://bucket/x.zarr`` or ``memory://x.zarr``. A store has no positional writes and no
        rename: it is written in place (cleared first, and again on failure), and a
        ``fixed-slot`` layout falls back to packed shards assembled inside one task each, which
        ``RecompressReport.notes`` says. A ``MemoryStore`` is shared by threads only: use the
        threaded or synchronous scheduler with it.
    codecs : target codec chain (list of codec JSON objects or a JSON string); inside
        ``sharding_indexed`` when sharded. Default: ``zopt.menu.default_chain`` of each
        variable's data type (``DEFAULT_CHAIN`` for types of 2 bytes and more).
    chunks, shards : inner chunk and shard shapes: by dimension name (``"y=32,x=32"`` or a dict;
        unnamed dimensions whole, for every variable having one of the names) or positional
        (``"1,32,32"``, for every variable with that many dimensions). Defaults: ~256 KiB inner
        chunks, ~64 MiB shards; shards are rounded down to a multiple of the inner chunks.
    decision : how ``conditional`` codecs pick masks (see ``zopt.decisions``).
    variables : names to rewrite (default every numeric variable of one dimension or more), a
        child group's as ``"group/name"``; the others are still copied unchanged.
    scheduler : None for Dask's local threaded scheduler, ``"processes"``/``"synchronous"``, or a
        ``dask.distributed`` scheduler address (``tcp://host:8786``).
    overwrite : replace an existing ``dst`` that is a Zarr store: it is renamed to
        ``dst.zopt-replaced``, the new store renamed into place, then the old one deleted
        (``zopt.paths.publish``; a job killed in between is finished by the next one on ``dst``).
    progress : a context-manager factory wrapping the compute (e.g. a progress bar), called
        with the number of shards (chunks when unsharded).
    layout : shard layout, ``"compact"`` (each shard encoded and written packed by one task)
        or ``"fixed-slot"`` (inner chunks of a shard written into fixed slots by
        ``slot_parts`` concurrent tasks, then indexed and renamed by a finalize task; see
        ``zopt.shards``). Unsharded arrays ignore it.
    slot_parts : tasks per shard in the fixed-slot layout (default: ~``SLOT_TASK_BYTES`` of
        raw data each, at least 2).
    plan : a ``zopt.plan.Plan`` (or a path to one) deciding the masks instead of ``decision``:
        no trial encoding at write time. Checked before anything is written against each
        rewritten array (grid, codec list, header_bits, shape, dtype), and chunk by chunk
        against the content it was made for while writing (the partial store is then removed).
    max_memory : refuse the job (ValueError, before anything is written) when a task's projected
        peak memory exceeds this many bytes (an int, or a string such as ``"2GiB"``).
    lossy : per-variable lossy recompression (``zopt.lossy``): ``["tos=abs:0.01", …]`` or
        ``{"tos": "abs:0.01"}`` (also ``keepbits:K``, ``info:L``, ``info:L:chunk``,
        ``plan:PATH``). Analysed and validated before anything is written; each such variable gets
        its own chain and a ``zopt_lossy`` attribute, and every chunk is checked as written.
    readers : refuse (ValueError, before anything is written) a target chain that one of these
        readers cannot read: ``zopt``, ``zarr-python``, ``tensorstore``, ``zarrs``
        (``zopt.readers``).

    checksum : end the inner chain of sharded arrays with ``crc32c`` (4 bytes a chunk), so a
        reader that pairs an old shard index with a rewritten file (``zopt compact``,
        ``--in-place``) gets an error instead of wrong values; default: for ``fixed-slot``
        (the layout written to be rewritten), not for ``compact``. See docs/reliability.md.
    before_publish : ``before_publish(partial, names)``, called once everything is written, right
        before publishing: ``partial`` is the partial store (a local path string; the destination
        store itself for a ``Store``/URL ``dst``), ``names`` the arrays rewritten (``GROUP/NAME``
        in child groups). If it raises, nothing is published, the partial output stays (with
        its journal) and the error propagates (``recompress --verify`` runs ``zopt.verify`` here).
    dry_run : build the plan of work (target metadata in memory, the Dask graph) and return it
        without writing anything: the report's arrays give shapes, units (shards), tasks,
        logical and source bytes, projected memory per task, and units an interrupted run of
        the same job already finished (``units_resumed``); ``stored_after`` stays 0.

    Resuming (local directory destinations): the job keeps a journal in ``dst.zopt-partial``
    (``zopt.journal``). A run killed, preempted or failed for a reason outside the job's inputs
    (a lost worker, an I/O error, Ctrl-C) leaves it; the same call again skips the shards
    already written and publishes as usual. Other options or a changed source raise
    ``zopt.journal.ResumeMismatchError`` before anything is touched.

    Returns a ``RecompressReport``. Raises OverlapError (before anything is written) if ``src``
    and ``dst`` overlap; FileExistsError if ``dst`` exists and not ``overwrite``;
    NotAZarrStoreError if it exists and is not a Zarr store; ValueError for a bad codec chain, shape or layout (also for ``fixed-slot``
    with an inner chain whose encoded size has no known bound, naming the codec). On any error the partial store is
    removed and ``dst`` is left as it was.
    """
    import dask

    if layout not in LAYOUTS:
        raise ValueError(f"layout: {layout!r} is not one of {list(LAYOUTS)}")
    if plan is not None and not (isinstance(decision, str) and decision == "compress_if_smaller"):
        raise ValueError("decision: a plan decides every chunk's mask; give a plan or a decision, not both")
    src = os.fspath(src) if loc.is_url(src) else resolve(loc.local_path(src))  # on the client: workers may run elsewhere
    store, dst = _destination(dst)
    notes: list[str] = []
    if store is None:
        dst = resolve(dst)
        if not loc.is_url(src):
            check_no_overlap(src, dst)
        recovered = recover(dst)
        if recovered:
            notes.append(recovered)
        check_replaceable(dst, overwrite)
    else:
        from zarr.core.sync import sync

        _check_no_url_overlap(src, store)
        check_store_replaceable(store, overwrite, store_text(store))
        if layout == "fixed-slot":
            layout = "compact"
            notes.append(f"layout: fixed slots need positional writes (a local directory store); {store_text(store)} "
                         "has none, so each shard was assembled packed inside one task and written with one put")
    chain = parse_chain(codecs)
    split = split_chain(chain)
    if checksum not in (None, True, False):
        raise ValueError(f"checksum: {checksum!r} is not one of [None, True, False]")
    want_checksum = layout == "fixed-slot" if checksum is None else checksum
    if isinstance(plan, str | os.PathLike):
        from zopt.plan import Plan

        plan = Plan.load(plan)
    limit = _parse_bytes(max_memory)
    chunk_arg = parse_shape(chunks, "chunks")
    shard_arg = parse_shape(shards, "shards")

    t0 = time.perf_counter()
    children = children_to_copy(src, store, plan)
    source_group = zarr_v3_group(src)  # opened once: variables, target metadata
    root_meta = root_array_metadata(src)
    job_id = uuid.uuid4().hex[:12]  # names temp files and tasks; the token of the sources this job opens
    try:
        source = _root_array_variable(src, root_meta) if root_meta else source_variables(src, source_group, job_id)
        names = _names_to_rewrite(source, variables, children)
        notes.extend(unused_shape_notes(source, names, {"chunks": chunk_arg, "shards": shard_arg}))
    except BaseException:
        release(job_id)  # nothing written yet; close what was opened
        raise
    if root_meta and not names:
        notes.append("the source is a root array that is not numeric; copied as it is")
    lossy_vars: dict[str, Any] = {}
    try:  # refused here, before anything is written; the sources opened so far are closed
        if lossy:  # zopt.lossy: analysed here; own chain, attributes and a per-chunk step per variable
            from zopt.lossy.prepare import prepare_for_recompress

            lossy_vars = prepare_for_recompress(src, source, names, lossy, chunk_arg, shard_arg, scheduler, variables)
        if readers:
            from zopt.readers import check_readers

            check_readers({n: lossy_vars[n].chain(chain) if n in lossy_vars else chain for n in names}, readers)
    except BaseException:
        release(job_id)
        raise

    journal, record = None, None
    if store is None:
        partial: Any = dst.rstrip("/") + PARTIAL_SUFFIX
        journal = Journal(partial)
        fp = fingerprint(src, names, {"codecs": chain, "chunks": chunks, "shards": shards, "decision": decision,
                                      "variables": variables, "layout": layout, "slot_parts": slot_parts, "plan": plan,
                                      "lossy": lossy, "readers": readers, "checksum": want_checksum})
        record = journal.read()
        if record is not None:
            journal.check(record, fp, dst)  # ResumeMismatchError: nothing touched
        elif not dry_run:
            shutil.rmtree(partial, ignore_errors=True)  # no journal: a job killed before its plan of work was recorded
        if record is not None and not dry_run:
            remove_temporaries(partial)
    dst_text = dst if store is None else store_text(store)
    done_by = journal if record is not None else None  # its markers: the units an interrupted run finished
    checking = False  # before_publish is running: if it raises, the partial output stays
    if dry_run:  # the target's metadata in memory: nothing written
        journal, store = None, zarr.storage.MemoryStore()
        partial = store
    elif store is not None:  # no rename in a store: written in place, cleared first and on failure
        partial = store
        sync(store.delete_dir(""))
    try:
        splits = {n: _split_for(source[n], codecs, split) for n in names}
        splits.update({n: split_chain(lv.chain(chain)) for n, lv in lossy_vars.items()})  # zopt.lossy
        if record is None or dry_run:
            layouts = _create_target(src, source_group, partial, source, names, chunk_arg, shard_arg, splits,
                                     root_meta=root_meta, plan=plan if chunks is None else None, explicit=variables,
                                     token=job_id, attrs={n: lv.attributes() for n, lv in lossy_vars.items()},
                                     fills={n: lv.fill_value for n, lv in lossy_vars.items()}, checksum=want_checksum)
            if journal is not None:
                journal.begin(fp, job_id, layouts)
        else:
            layouts = Journal.layouts(record)
            notes.append(f"resumed the interrupted job in {partial}")
        tasks, reports = [], {}
        for name in names:
            var = source[name]
            inner, shard = layouts[name]
            rep = reports[name] = ArrayReport(
                name=name,
                shape=tuple(var.shape),
                dtype=str(var.dtype),
                chunks=math.prod(math.ceil(s / c) for s, c in zip(var.shape, inner, strict=True)),
                chunks_written=0,
                logical_bytes=int(var.size * var.dtype.itemsize),
                stored_before=_stored_bytes_of(src, name),
                layout=layout if shard else "unsharded",
            )
            dst_array = zarr.open_array(partial, path=name, mode="r")
            shard_layout = layout_of(dst_array) if shard else None
            array_plan = _plan_for(plan, name, dst_array, inner) if plan is not None else None
            rep.projected_task_bytes = projected_task_bytes(dst_array, shard_layout, layout, slot_parts)
            if limit is not None and rep.projected_task_bytes > limit:
                raise ValueError(_memory_message(name, rep.projected_task_bytes, limit))
            done = done_by.done(name) if done_by is not None else {}
            n_tasks = len(tasks)
            if shard_layout is None:
                for region in _regions(tuple(var.shape), inner):
                    coords = tuple(r.start // c for r, c in zip(region, inner, strict=True))
                    rep.units += 1
                    if _resumed(rep, done, coords):
                        continue
                    key = f"zopt-chunk-{name}-{'.'.join(map(str, coords))}-{job_id}"
                    marker = journal.marker(name, coords) if journal is not None else None
                    tasks.append((name, dask.delayed(_write_region, pure=False)(
                        src, name, partial, region, decision, array_plan, job_id, marker=marker,
                        lossy=lossy_vars.get(name), dask_key_name=key)))
                rep.tasks = len(tasks) - n_tasks
                continue
            if layout == "fixed-slot":
                shard_layout.slot_size  # noqa: B018 - raises ValueError naming a codec without a bound
            shard_job = _ShardJob(src, name, os.path.join(partial, name) if store is None else name, shard_layout,
                                  tuple(var.shape), decision, job_id, dst_array.metadata.chunk_key_encoding, array_plan,
                                  store, lossy_vars.get(name))
            grid = tuple(math.ceil(s / k) for s, k in zip(var.shape, shard, strict=True))
            parts = _slot_parts(shard_layout, slot_parts) if layout == "fixed-slot" else []
            if layout == "compact":  # one graph layer for the array's shards (zopt.graph)
                units = []
                for coords in np.ndindex(*grid):
                    rep.units += 1
                    if not _resumed(rep, done, coords):
                        units.append((f"zopt-shard-{name}-{'.'.join(map(str, coords))}-{job_id}", coords,
                                      journal.marker(name, coords) if journal is not None else None))
                tasks.extend((name, t) for t in shard_tasks(_write_packed_shard, shard_job, f"zopt-job-{name}-{job_id}",
                                                             units))
                rep.tasks = len(tasks) - n_tasks
                continue
            job = dask.delayed(shard_job, traverse=False, name=f"zopt-job-{name}-{job_id}")
            for coords in np.ndindex(*grid):
                rep.units += 1
                if _resumed(rep, done, coords):
                    continue
                label = f"{name}-{'.'.join(map(str, coords))}-{job_id}"
                marker = journal.marker(name, coords) if journal is not None else None
                writes = [
                    dask.delayed(_write_slot_part, pure=False)(job, coords, p, dask_key_name=f"zopt-slots-{label}-{p[0]}")
                    for p in parts
                ]
                task = dask.delayed(_finalize_shard, pure=False)(job, coords, *writes, marker=marker,
                                                                  dask_key_name=f"zopt-shard-{label}")
                tasks.append((name, task))
            rep.tasks = (len(tasks) - n_tasks) * (1 + len(parts))
        if dry_run:
            if children:
                notes.append(f"the child groups {children} are rewritten as stores of their own, not planned here: "
                             "give SRC/GROUP to --dry-run for each")
            return RecompressReport(dst=dst_text, arrays=list(reports.values()),
                                    seconds=time.perf_counter() - t0, source_bytes=_source_nbytes(src), notes=notes)
        graph_seconds = _run_writes(tasks, reports, partial, scheduler, progress, token=job_id)
        if store is None:  # e.g. a slot writer Dask re-ran after its shard's finalize: not published
            remove_temp_files(partial)
        for child in children:  # each child group is a store of its own inside the new one
            if record is not None and os.path.exists(os.path.join(partial, child, "zarr.json")):
                notes.append(f"{child}: already rewritten by the interrupted run")  # published into the partial store
                continue
            sub = recompress(
                os.path.join(src, child), os.path.join(partial, child), codecs=codecs, chunks=chunks, shards=shards,
                decision=decision, scheduler=scheduler, progress=progress, layout=layout, slot_parts=slot_parts,
                max_memory=max_memory, checksum=checksum,
                variables=None if variables is None else [v.split("/", 1)[1] for v in variables if v.startswith(child + "/")],
            )
            for a in sub.arrays:
                a.name = f"{child}/{a.name}"
                reports[a.name] = a
            notes.extend(f"{child}: {n}" for n in sub.notes)
            graph_seconds += sub.graph_seconds
        if not root_meta:
            with warnings.catch_warnings():  # zarr warns that consolidation is not in the v3 spec
                warnings.simplefilter("ignore")
                zarr.consolidate_metadata(partial, zarr_format=3)
        if before_publish is not None:
            checking = True
            before_publish(partial, list(reports))
            checking = False
        if store is None:
            journal.remove()  # DST never holds the journal; a kill right here only means starting over
            publish(partial, dst)  # the old DST, if any, is renamed aside and deleted only once the new one is in place
    except BaseException as exc:
        if checking:
            pass
        elif journal is not None and keeps_partial(exc) and journal.read() is not None:
            exc.add_note(f"the finished shards are kept in {partial}: run the same command again to resume")
        elif dry_run:
            pass
        elif store is None:
            shutil.rmtree(partial, ignore_errors=True)
        else:
            sync(store.delete_dir(""))
        raise
    finally:
        release(job_id)
    elapsed = time.perf_counter() - t0
    for rep in reports.values():
        rep.seconds = elapsed
    return RecompressReport(
        dst=dst_text, arrays=list(reports.values()), seconds=elapsed,
        source_bytes=_source_nbytes(src), graph_seconds=graph_seconds, notes=notes,
    )


def _names_to_rewrite(source: dict[str, SourceVariable], variables: Sequence[str] | None,
                      children: list[str]) -> list[str]:
    """The root group's variables to rewrite: ``variables`` without the ``child/…`` paths (which
    the child groups' jobs take), or every numeric variable of one dimension or more. ValueError
    naming a variable or child group the source lacks."""
    if variables is None:
        return [n for n, v in source.items() if v.ndim >= 1 and v.dtype.kind in "biufc"]
    names = [v for v in variables if "/" not in v]
    missing = [n for n in names if n not in source]
    missing += [v for v in variables if "/" in v and v.split("/", 1)[0] not in children]
    if missing:
        where = f"; it has {sorted(source)}" + (f" and child groups {children}" if children else "")
        raise ValueError(f"variables: {missing} not in the source{where}")
    return names


def _check_no_url_overlap(src: str, store: Any) -> None:
    """OverlapError if the destination store's URL and a URL source are one inside the other."""
    from zopt.paths import OverlapError

    d, s = store_text(store).rstrip("/"), src.rstrip("/")
    if loc.is_url(src) and (d == s or d.startswith(s + "/") or s.startswith(d + "/")):
        raise OverlapError(f"dst: {d} and SRC {s} overlap; writing there would delete or replace the source: "
                           "choose a DST outside SRC")


def _resumed(rep: ArrayReport, done: dict, coords: tuple[int, ...]) -> bool:
    """Whether write unit ``coords`` was finished by an interrupted run (its journal marker is in
    ``done``); if so its masks and chunks go into ``rep``."""
    found = done.get(Journal.key(coords))
    if found is None:
        return False
    rep.masks.update(found[0])
    rep.chunks_written += found[1]
    rep.units_resumed += 1
    return True


def _root_array_variable(src: str, meta: dict) -> dict[str, SourceVariable]:
    """``{"": SourceVariable}`` for a store whose root is an array (v2 or v3)."""
    array = zarr.open_array(src, mode="r")
    names = meta.get("dimension_names") or meta.get("attributes", {}).get("_ARRAY_DIMENSIONS")
    if names is None:
        names = dict(array.attrs).get("_ARRAY_DIMENSIONS")
    dims = tuple(str(d) if d else f"dim_{i}" for i, d in enumerate(names or (None,) * array.ndim))
    return {"": SourceVariable(tuple(array.shape), array.dtype, dims)}


def _split_for(var: SourceVariable, codecs: Any, split: dict[str, Any]) -> dict[str, Any]:
    """The chain of one variable: a given chain for every variable, else ``zopt.menu``'s default
    for its data type (issue 19: no shuffle for 1-byte types, where it is a no-op, and zstd 10)."""
    if codecs is not None:
        return split
    return split_chain(default_chain(var.dtype))


def _run_writes(tasks: list, reports: dict[str, ArrayReport], target: Any, scheduler: str | None, progress,
                token: str | None = None) -> float:
    """Compute ``(array name, write task)`` pairs, add each task's ``(masks, chunks written)`` to
    its array's report, then measure what every array stores in ``target``. Returns the graph's
    wall time in seconds."""
    t_graph = time.perf_counter()
    results = _compute([t for _, t in tasks], scheduler, progress, token)
    graph_seconds = time.perf_counter() - t_graph
    for (name, _), (masks, n) in zip(tasks, results, strict=True):
        reports[name].masks.update(masks)
        reports[name].chunks_written += n
    for name, rep in reports.items():
        rep.stored_after, rep.allocated_after = _stored_sizes(target, name)
    return graph_seconds


def _destination(dst: Any) -> tuple[Any, str | None]:
    """``(store, None)`` for a destination without positional writes — a ``zarr.abc.store.Store``
    as given, or an fsspec URL (``memory://…``, ``s3://…``) opened as ``zarr.storage.FsspecStore``
    — and ``(None, path)`` for a local directory (a path or a ``file://`` URL)."""
    from zarr.abc.store import Store

    if isinstance(dst, Store):
        return dst, None
    text = os.fspath(dst)
    if text.startswith("file://"):
        return None, text.removeprefix("file://")
    if "://" in text:
        return zarr.storage.FsspecStore.from_url(text, read_only=False), None
    return None, text


def recompress_in_place(
    store: str | os.PathLike,
    variables: Sequence[str] | None = None,
    *,
    decision: Any = "compress_if_smaller",
    plan: Any = None,
    scheduler: str | None = None,
    progress: Callable[[Any], Any] | None = None,
    grace: float = GRACE_SECONDS,
) -> RecompressReport:
    """Re-decide the ``conditional`` masks of a store's arrays in place, shard by shard.

    The "write fast, compress later" step: a store written quickly (e.g. ``conditional`` with
    mask 0 everywhere, in fixed slots) is rewritten with per-chunk masks from ``decision`` or a
    ``plan`` (``zopt.plan.Plan`` or a path to one), without changing any metadata: the codec
    chain stays the same, so every shard reads the same before and after. One Dask task per
    shard file (per chunk file for unsharded arrays) reads it through zarr, encodes its inner
    chunks again and replaces it packed and atomically (a temporary file renamed over it), so a
    reader — or an interrupted run — only ever sees whole old or whole new shards. Absent
    shards and chunks (all fill value) stay absent; a chunk whose values equal the fill value is
    removed.

    store : a Zarr v3 group in a local directory.
    variables : arrays to rewrite (default: every array with a ``conditional`` codec).
    decision, plan, scheduler, progress : as for ``recompress``.
    grace : seconds between replacing the shards and dropping the holes that kept their sizes
        (``zopt.rewrite``; a reader holding a shard index longer may read past a new end).

    The job holds the store's lock (``zopt.lock``); a shard is replaced as ``zopt.rewrite``
    describes, so a reader pairing an old index with a new file gets an error, not wrong values,
    when the inner chain ends with ``crc32c`` (``RecompressReport.notes`` names arrays without).
    Returns a ``RecompressReport`` (``dst`` is ``store``). Raises ValueError when ``store`` is
    not a local Zarr v3 group, or a named array is missing or has no ``conditional`` codec
    (its chunks cannot change without changing its metadata: use ``recompress``), or no array
    has one; ``PlanMismatchError`` for a plan made for other arrays or contents;
    StoreLockedError when another job is rewriting the store.
    """
    import dask

    if not grace >= 0:
        raise ValueError(f"grace: {grace!r} must be a number of seconds >= 0")
    store = resolve(store)  # on the client: Dask workers may run in another directory
    group = zarr_v3_group(store)
    if group is None:
        raise ValueError(f"store: {store!r} is not a Zarr v3 group in a local directory (in-place rewrites replace files)")
    arrays = dict(group.arrays())
    if isinstance(plan, str | os.PathLike):
        from zopt.plan import Plan

        plan = Plan.load(plan)
    if variables:
        missing = [n for n in variables if n not in arrays]
        if missing:
            raise ValueError(f"variables: {missing} not in the store; it has {sorted(arrays)}")
        names = list(variables)
    else:
        names = [n for n, a in arrays.items() if conditional_codecs_in(a.metadata.codecs)]
        if not names:
            raise ValueError(f"store: no array of {store!r} has a conditional codec, so in place there is nothing to "
                             "re-decide; rewrite it into a new store with recompress SRC DST")
    t0 = time.perf_counter()
    source_bytes = _source_nbytes(store)
    tasks, reports, notes = [], {}, []
    job_id = uuid.uuid4().hex[:12]
    with store_lock(store, job_id) as tmp_dir:
        from zopt.journal import InPlaceJournal

        resume = InPlaceJournal.start(store, names, decision, plan)  # what an interrupted run of this job finished
        shards = []  # (path, layout, key) of every shard rewritten
        for name in names:
            array = arrays[name]
            if not conditional_codecs_in(array.metadata.codecs):
                raise ValueError(f"variables: array {name!r} has no conditional codec, so its chunks cannot change without "
                                 "changing its metadata; rewrite it into a new store with recompress SRC DST")
            shard_layout = layout_of(array)
            inner = shard_layout.inner_shape if shard_layout is not None else tuple(array.chunks)
            array_plan = _plan_for(plan, name, array, inner) if plan is not None else None
            reports[name] = ArrayReport(
                name=name, shape=tuple(array.shape), dtype=str(array.dtype),
                chunks=math.prod(math.ceil(s / c) for s, c in zip(array.shape, inner, strict=True)), chunks_written=0,
                logical_bytes=int(array.nbytes), stored_before=chunk_bytes_stored(store, name),
                layout="in place, packed" if shard_layout is not None else "in place, unsharded",
            )
            if shard_layout is None:
                write, first = _rewrite_chunk_in_place, (store, name)
            else:
                if not has_inner_checksum(shard_layout):
                    notes.append(unchecked_note(name))
                write, first = _rewrite_shard_in_place, (dask.delayed(
                    _ShardJob(store, name, os.path.join(store, name), shard_layout, tuple(array.shape), decision, job_id,
                              array.metadata.chunk_key_encoding, array_plan),
                    traverse=False, name=f"zopt-job-{name}-{job_id}",
                ),)
            done = resume.done(name)
            for coords in np.ndindex(*array.cdata_shape):  # stored chunks (unsharded) or shards; absent ones stay absent
                key = f"{name}/{array.metadata.encode_chunk_key(coords)}"
                path = os.path.join(store, *key.split("/"))
                if os.path.exists(path):
                    label = f"zopt-inplace-{name}-{'.'.join(map(str, coords))}-{job_id}"
                    extra = (decision, array_plan) if shard_layout is None else ()
                    if not _resumed(reports[name], done, coords):
                        tasks.append((name, dask.delayed(resume.task, pure=False)(write, path, resume.marker(name, coords), *first,
                                                                                   coords, *extra, str(tmp_dir), dask_key_name=label)))
                    if shard_layout is not None:
                        shards.append((path, shard_layout, key))
        graph_seconds = _run_writes(tasks, reports, store, scheduler, progress, token=job_id)
        if shrink_after_grace(shards, str(tmp_dir), grace, scheduler):
            for name, rep in reports.items():
                rep.stored_after, rep.allocated_after = _stored_sizes(store, name)
        resume.remove()  # complete: the next run is a new job
    elapsed = time.perf_counter() - t0
    for rep in reports.values():
        rep.seconds = elapsed
    return RecompressReport(dst=store, arrays=list(reports.values()), seconds=elapsed, source_bytes=source_bytes,
                            graph_seconds=graph_seconds, notes=notes)


def _rewrite_shard_in_place(job: _ShardJob, shard_coords: tuple[int, ...], tmp_dir: str) -> tuple[collections.Counter, int]:
    """Dask task (in place): encode a shard's chunks again and replace its file (``zopt.rewrite``,
    phase A), unless it holds exactly those chunks packed already (a retried task)."""
    path = job.path(shard_coords)
    key = os.path.relpath(path, job.src)
    old, blob = read_shard(path, job.layout, key)
    encoded = list(job.encode(shard_coords, None, limit=False))
    chunks = {i: e.data.tobytes() for i, e in encoded}
    if not (is_packed(old, job.layout) and same_chunks(blob, old, chunks)):
        rewrite_shard(path, job.layout, chunks, tmp_dir, key, old, len(blob))
    return _masks_of(encoded), len(encoded)


def _rewrite_chunk_in_place(store: str, name: str, coords: tuple[int, ...], decision: Any, plan: Any = None,
                            tmp_dir: str | None = None):
    """Dask task (unsharded arrays, in place): encode one stored chunk again and replace its file."""
    array = open_array(store, path=name, mode="r")
    chunks = tuple(array.chunks)
    region = tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(coords, chunks, array.shape, strict=True))
    values = np.asarray(array[region])
    native = values.dtype
    fill = np.asarray(array.fill_value, dtype=native)
    if plan is not None:
        plan.check_chunk(coords, values, fill)
    chunk = padded(values, chunks, fill)
    path = os.path.join(store, name, array.metadata.encode_chunk_key(coords))
    if is_fill(chunk, fill):
        write_packed(path, None)
        return collections.Counter(), 0
    encoder = ChunkEncoder(array.metadata.codecs, chunk_spec(chunks, array.metadata.data_type, array.fill_value))
    encoded = encoder.with_decision(plan if plan is not None else decision).encode(chunk, coords)
    write_packed(path, encoded.data, tmp_dir)
    return _masks_of([(0, encoded)]), 1


def _create_target(src: str, source_group: zarr.Group | None, partial: Any, source: dict[str, SourceVariable],
                   names: list[str], chunks, shards, splits: dict[str, dict[str, Any]], *, root_meta: dict | None = None,
                   plan: Any = None, explicit: Sequence[str] | None = None, token: str | None = None,
                   attrs: dict[str, dict[str, Any]] | None = None, fills: dict[str, Any] | None = None,
                   checksum: bool = False) -> dict[str, tuple[tuple[int, ...], tuple[int, ...] | None]]:
    """Create the target at ``partial`` (a local path or a zarr Store): group attributes, the other variables with their
    data, and the rewritten variables as empty arrays with the new chunking and codecs.

    A Zarr v3 source (``source_group``, opened from ``src``) is copied at the Zarr level: each rewritten array keeps the source's data type, fill value, dimension names
    and attributes (only the chunk grid, chunk key encoding and codecs are new), and every other
    array is copied byte for byte. Anything else (Zarr v2, netCDF/HDF5) goes through xarray's
    ``to_zarr`` with lazy placeholders for the rewritten variables. Returns ``{name: (inner
    chunk shape, shard shape or None)}``. ``splits``: each rewritten variable's codecs, split as
    ``zarr.create_array`` takes them. A store whose root is an array (``root_meta``) gets a root
    array. Chunks: a ``plan``'s chunk shape for the arrays it covers; a 1-D coordinate variable
    whole unless named in ``explicit``; else ``chunks`` (see ``choose_chunks``).
    ``attrs``: extra attributes per variable and ``fills``: fill values to set for a non-Zarr-v3
    source (``zopt.lossy``: a lossy chain is designed for one fill value). ``checksum``: sharded
    arrays get ``crc32c`` at the end of their inner chain (``_with_checksum``).
    """
    attrs = attrs or {}
    layouts = {name: variable_layout(name, source[name], chunks, shards, plan, explicit) for name in names}
    if checksum:
        splits = {n: _with_checksum(sp) if layouts.get(n, (None, None))[1] is not None else sp for n, sp in splits.items()}
    if root_meta is not None:
        arr = zarr.open_array(src, mode="r")
        if not names:
            _copy_array_files(src, partial, "")
            return layouts
        inner, shard = layouts[""]
        v3 = arr.metadata.zarr_format == 3
        zarr.create_array(
            partial, shape=arr.shape, dtype=arr.metadata.data_type if v3 else arr.dtype, chunks=inner, shards=shard,
            fill_value=arr.metadata.fill_value, dimension_names=arr.metadata.dimension_names if v3 else None,
            attributes=dict(arr.attrs), zarr_format=3, overwrite=True, **splits[""],
        )
        return layouts
    if source_group is not None:
        # no xarray round trip (and no dask.array import) for the common v3 → v3 rewrite
        zarr.create_group(partial, zarr_format=3, attributes=dict(source_group.attrs), overwrite=True)
        for name, arr in source_group.arrays():
            if name not in layouts:
                _copy_array_files(os.path.join(src, name), partial, name)
                continue
            inner, shard = layouts[name]
            zarr.create_array(
                partial, name=name, shape=arr.shape, dtype=arr.metadata.data_type, chunks=inner, shards=shard,
                fill_value=arr.metadata.fill_value, dimension_names=arr.metadata.dimension_names,
                attributes={**arr.attrs, **attrs.get(name, {})}, zarr_format=3, **splits[name],
            )
        return layouts
    import dask.array as da

    ds = open_source(src, token)
    template = ds.copy()
    for name, (inner, shard) in layouts.items():
        var = ds[name]
        template[name] = var.copy(data=da.empty(var.shape, dtype=var.dtype, chunks=shard or inner))
        template[name].attrs.update(attrs.get(name, {}))
    for name in template.variables:
        template[name].encoding = {}
    template.to_zarr(partial, mode="w", compute=False, zarr_format=3, consolidated=False,
                     encoding=_encodings(ds, names, splits, layouts, fills))
    return layouts


def _copy_array_files(source_dir: str, target: Any, name: str) -> None:
    """Copy an array's files byte for byte into a local store (a path) or a zarr Store."""
    if isinstance(target, str | os.PathLike) and not loc.is_url(source_dir):
        shutil.copytree(source_dir, os.path.join(target, name), dirs_exist_ok=not name)
        return
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    for rel, _ in loc.files(source_dir):
        if name == "" and rel.split("/")[0] == JOURNAL_DIR:
            continue
        data = loc.read_bytes(loc.join(source_dir, rel))
        if isinstance(target, str | os.PathLike):
            out = Path(target, name, rel)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(data)
        else:
            key = "/".join([*([name] if name else []), *rel.split(os.sep)])
            sync(target.set(key, default_buffer_prototype().buffer.from_bytes(data)))


def _encodings(ds: xr.Dataset, names: list[str], splits: dict[str, dict[str, Any]], layouts,
               fills: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    enc = {}
    for name in names:
        inner, shard = layouts[name]
        e = {"chunks": inner, **splits[name]}
        fill = ds[name].encoding.get("fill_value")  # a Zarr source's fill value carries over
        if fill is not None and "_FillValue" not in ds[name].attrs:
            e["fill_value"] = fill
        if fills and fills.get(name) is not None:
            e["fill_value"] = fills[name]
        if shard is not None:
            e["shards"] = shard
        enc[name] = e
    return enc



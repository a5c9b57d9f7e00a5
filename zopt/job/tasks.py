"""The worker side of recompress: the functions Dask runs, each writing one unit and idempotent
(Dask may run a task again).

- ``write_region``: one chunk of an unsharded array, through zarr;
- ``write_packed_shard``: one whole shard, encoded and written packed (``layout="compact"``);
- ``encode_shard_part`` + ``assemble_shard``: a packed shard split below the shard (issue 34, G4;
  ``zopt.job.work.encode_parts``): slabs of its inner chunks encoded by tasks that write nothing,
  then one task packs them and writes the shard as ``write_packed_shard`` does;
- ``write_slot_part`` + ``finalize_shard``: part of a shard into its fixed slots, then its index
  and the rename into place (``layout="fixed-slot"``);
- ``rewrite_shard_in_place``, ``rewrite_chunk_in_place``: ``recompress_in_place``'s units.

``ShardJob`` is what every shard task of one array shares (picklable for distributed workers).
Decisions are attached here, on the worker: they are runtime objects and are not pickled with
codecs.
"""

from __future__ import annotations

import collections
import math
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import zarr

from zopt.codecs.batch import BatchEncoder, EncodedBatch, batch_size
from zopt.codecs.chain import ChunkEncoder, EncodedChunk, chunk_spec
from zopt.codecs.conditional import conditional_codecs_in
from zopt.codecs.decisions import Decision
from zopt.codecs.grid import fill_rows, is_fill, padded
from zopt.codecs.zarr_config import with_zopt_pipeline
from zopt.compat.job_cache import JobCache
from zopt.compat.zarr_compat import open_array
from zopt.io.sources import read_source
from zopt.job.targets import put_shard
from zopt.job.work import split_axis
from zopt.planning.chains import with_decision
from zopt.store.chunk_feed import AlignedChunkReader
from zopt.store.journal import mark
from zopt.store.rewrite import rewrite_shard, same_chunks
from zopt.store.shards import (
    ShardLayout,
    finalize_slots,
    is_packed,
    pack_batches,
    read_shard,
    tmp_path,
    v3_metadata,
    write_packed,
    write_slots,
)

if TYPE_CHECKING:
    from zarr.abc.store import Store
    from zarr.core.chunk_key_encodings import ChunkKeyEncoding

    from zopt.codecs.decisions import CodecRef, DecisionLike, TrialRunner
    from zopt.io.source_kinds import Source
    from zopt.lossy.prepare import LossyVariable
    from zopt.planning.plan import ArrayPlan
    from zopt.store.reshard import ChunkCopier

#: a write task's count of each conditional mask (``RecompressReport.masks``)
Masks: TypeAlias = "collections.Counter[int]"

__all__ = [
    "ChunkJob", "Masks", "Recorder", "ShardJob", "assemble_shard", "encode_shard_part", "finalize_shard", "masks_of", "rewrite_chunk_in_place", "rewrite_shard_in_place",
    "write_packed_shard", "write_region", "write_slot_part",
]


@dataclass
class Recorder(Decision):
    """Wraps a decision and records each chunk's mask and payload size (bytes)."""

    inner: Decision | None
    #: ``(chunk index, mask, payload bytes)`` per chunk
    log: list[tuple[tuple[int, ...] | None, int, int]] = field(default_factory=list)

    @property
    def needs_chunk_index(self) -> bool:  # type: ignore[override]
        return bool(self.inner and self.inner.needs_chunk_index)

    def choose(self, chunk_index: tuple[int, ...] | None, codecs: Sequence[CodecRef], data: np.ndarray,
               run: TrialRunner) -> tuple[int, np.ndarray]:
        if self.inner is None:
            mask, payload = 0, data
        else:
            mask, payload = self.inner.choose(chunk_index, codecs, data, run)
        self.log.append((chunk_index, mask, int(payload.size)))
        return mask, payload


#: ``ShardJob._encoding``: the inner chunks' encoder, their native type, the fill value, the reader of
#: aligned source chunks (or None) and the batch encoder (or None)
_Encoding: TypeAlias = ("tuple[ChunkEncoder, np.dtype[Any], np.ndarray, AlignedChunkReader | None, "
                        "BatchEncoder | None]")

_MAX_TARGETS = 16
#: (job, (path, array, what)) -> an opened array (and what goes with it): a job's tasks open it once per process
_targets: JobCache[Any] = JobCache("target arrays", _MAX_TARGETS)


def _target_array(dst: str | Store, name: str, job_id: str | None) -> zarr.Array[Any]:
    """Array ``name`` of the destination ``dst`` opened for writing, once per process and job for a
    local directory (its metadata does not change while the job writes chunks; a retried task
    finds the same array)."""
    def make() -> zarr.Array[Any]:
        return zarr.open_array(dst, path=name, mode="r+")

    if not isinstance(dst, str) or job_id is None:
        return make()
    array: zarr.Array[Any] = _targets.get(job_id, (dst, name, "write"), make)
    return array


@dataclass(frozen=True)
class ChunkJob:
    """What every chunk task (``write_region``) of one unsharded array shares: the source ``src``
    (a path, or a ``zopt.io.sources.Source``), the array ``name``, the destination ``dst`` (a local
    directory or a zarr Store), the ``decision``, the array's ``plan`` (its masks decide, its
    digests check the content), the job's id ``job_id`` and ``lossy`` (checks or bitrounds each chunk)."""

    src: str | Source
    name: str
    dst: str | Store | None  # None: a target not begun (an Icechunk dry run's tasks, never run)
    decision: DecisionLike
    plan: ArrayPlan | None = None
    job_id: str | None = None
    lossy: LossyVariable | None = None


@with_zopt_pipeline
def write_region(unit: ChunkJob, region: tuple[slice, ...], marker: str | None = None) -> tuple[Masks, int]:
    """Dask task (unsharded targets): write one chunk region of ``unit``'s array through zarr; then
    its journal ``marker``. Returns the conditional masks' counts and the chunks stored (0 or 1)."""
    src, name, dst, decision, plan, job_id, lossy = (unit.src, unit.name, unit.dst, unit.decision, unit.plan,
                                                     unit.job_id, unit.lossy)
    assert dst is not None  # a task runs once its target has begun
    data = read_source(src, name, region, job_id)
    array = _target_array(dst, name, job_id)
    if lossy is not None:  # zopt.lossy: check the bound or bitround, per chunk
        index = tuple(r.start // c for r, c in zip(region, array.chunks, strict=True))
        data = lossy.prepare(index, data, f"chunk {index}")
    if plan is not None:  # one chunk per task here: check its content against the plan
        index = tuple(r.start // c for r, c in zip(region, array.chunks, strict=True))
        plan.check_chunk(index, data, array.fill_value)
        decision = plan
    conditional = conditional_codecs_in(v3_metadata(array).codecs)
    recorder = None
    if conditional:
        resolved = conditional[0].with_decision(decision).decision
        recorder = Recorder(resolved)
        array = with_decision(array, recorder)
    array[region] = data
    masks: Masks = collections.Counter()
    if recorder is not None:
        masks.update(mask for _, mask, _ in recorder.log)
    # without a conditional codec nothing records the write: ask the store whether the chunk
    # is there (zarr stores no chunk equal to the fill value)
    result = masks, len(recorder.log) if recorder else int(_chunk_stored(array, region))
    if marker is not None:
        mark(marker, *result)
    return result


def _chunk_stored(array: zarr.Array[Any], region: tuple[slice, ...]) -> bool:
    """True when the store holds the chunk of ``array`` that starts at ``region``."""
    from zarr.core.sync import sync

    key = array.metadata.encode_chunk_key(tuple(r.start // c for r, c in zip(region, array.chunks, strict=True)))
    return bool(sync(array.store_path.store.exists(f"{array.path}/{key}" if array.path else key)))


@dataclass(frozen=True)
class ShardJob:
    """What every shard task of one array needs (picklable for distributed workers)."""

    src: str | Source  # a path (PathSource) or another Source: several files combined (zopt.io.multi)
    name: str
    shard_dir: str  # directory of the array in the destination store
    layout: ShardLayout
    shape: tuple[int, ...]
    decision: DecisionLike
    job_id: str  # identifies this run's temporary shard files and its open sources (zopt.io.sources)
    chunk_key_encoding: ChunkKeyEncoding  # where each shard's key is
    plan: ArrayPlan | None = None  # its masks decide, its digests check the content
    store: Store | None = None  # a zarr Store without positional writes; shard_dir is then the array's key prefix
    lossy: LossyVariable | None = None  # checks (abs) or bitrounds each inner chunk
    copy: ChunkCopier | None = None  # the source's encoded chunks copied, not re-encoded

    def path(self, shard_coords: tuple[int, ...]) -> str:
        return os.path.join(self.shard_dir, *self.chunk_key_encoding.encode_chunk_key(shard_coords).split("/"))

    def write_packed(self, shard_coords: tuple[int, ...], data: bytes | list[memoryview] | None) -> None:
        """Write (or, for None, delete) a whole packed shard (bytes, or ``pack_parts``' pieces):
        atomically into a local directory, with one ``set`` into a store."""
        if self.store is None:
            write_packed(self.path(shard_coords), data)
        else:
            key = "/".join(p for p in (self.shard_dir, self.chunk_key_encoding.encode_chunk_key(shard_coords)) if p)
            put_shard(self.store, key, data)

    def _encoding(self) -> _Encoding:
        """The inner chunks' encoder (with the decision attached), their native type, the fill value,
        the reader of aligned source chunks (or None) and the batch encoder (or None): made once per
        process and job (issue 34: opening the source array and building the chain cost
        milliseconds of GIL per shard)."""
        def make() -> _Encoding:
            layout = self.layout
            encoder = layout.inner_encoder().with_decision(self.plan if self.plan is not None else self.decision)
            native = encoder.spec.dtype.to_native_dtype()
            fill = np.asarray(layout.fill_value, dtype=native)
            # issue 19: source chunks that are the inner chunks are decoded straight into the chunk buffers
            direct = AlignedChunkReader.open(self.src, self.name, layout.inner_shape, native)
            # plans and lossy modes look at every chunk alone: those chunks are encoded one by one
            batch = BatchEncoder.of(encoder) if self.plan is None and self.lossy is None else None
            return encoder, native, fill, direct, batch

        if not isinstance(self.src, str):  # e.g. several files combined (zopt.io.multi)
            return make()
        encoding: _Encoding = _targets.get(self.job_id, (self.src, self.name, self.shard_dir, "encode"), make)
        return encoding

    def _region(self, shard_coords: tuple[int, ...], part: tuple[int, int] | None) -> tuple[list[slice], int]:
        """The array region of a shard (or of part ``[start, stop)`` of its first split axis) and that axis."""
        layout = self.layout
        region = list(layout.shard_region(shard_coords, self.shape))
        axis = split_axis(layout)
        if part is not None:
            lo = region[axis].start + part[0] * layout.inner_shape[axis]
            hi = min(region[axis].start + part[1] * layout.inner_shape[axis], self.shape[axis])
            region[axis] = slice(lo, hi)
        return region, axis

    def encode(self, shard_coords: tuple[int, ...], part: tuple[int, int] | None, limit: bool
               ) -> Iterator[tuple[int, EncodedChunk]]:
        """Read the region of a shard (or of part ``[start, stop)`` of its first split axis)
        and yield ``(i, EncodedChunk)`` for its inner chunks that differ from the fill value."""
        for batch in self.encode_batches(shard_coords, part, limit):
            for i, data, masks in batch.chunks():
                yield i, EncodedChunk(data, masks)

    def encode_batches(self, shard_coords: tuple[int, ...], part: tuple[int, int] | None, limit: bool
                       ) -> Iterator[EncodedBatch]:
        """``encode``'s chunks as ``EncodedBatch``es, in shard order: about ``GROUP_BYTES`` of
        chunks per batch (equal batches, ``zopt.codecs.batch.batch_size``), each step of the chain
        once per batch (issue 34, part 2), where the chain has a batch encoder; else one batch of
        chunks encoded one by one."""
        if self.copy is not None:  # issue 34 G5: the source's checked chunk bytes (zopt.store.reshard)
            yield EncodedBatch.of_chunks(list(self.copy.chunks(self.layout, shard_coords, self.shape, part,
                                                               split_axis(self.layout))))
            return
        encoder, native, fill, direct, batch = self._encoding()
        if batch is None:
            yield EncodedBatch.of_chunks(list(self._encode_each(shard_coords, part, limit)))
            return
        layout = self.layout
        region, axis = self._region(shard_coords, part)
        lo, hi = region[axis].start, region[axis].stop
        inner = layout.inner_shape
        positions, grid, full = layout.inner_chunk_grid(shard_coords, self.shape)
        if part is not None:
            starts = grid[:, axis] * inner[axis]
            keep = np.flatnonzero((starts >= lo) & (starts < hi))
            positions, grid, full = positions[keep], grid[keep], full[keep]
        if not len(positions):  # a part beyond the array's edge
            return
        indices: list[tuple[int, ...]] = list(map(tuple, grid.tolist()))
        edge = (~full).any()
        slot = layout.slot_size if limit else None
        per = batch_size(len(indices), math.prod(inner) * native.itemsize, batch.group_bytes)
        if direct is None:
            tiles = self._tiles(region, native, fill)
        for g in range(0, len(indices), per):
            group, at = indices[g : g + per], positions[g : g + per]
            if direct is None:
                stack = tiles[g : g + len(group)]
            else:
                stack = _stack(len(group), inner, native)
                direct.read_many(group, stack, fill)
                if edge:
                    for k in np.flatnonzero(~full[g : g + per]).tolist():
                        # the source's edge chunk: the part outside the array is the fill value
                        _blank_outside(stack[k], layout.inner_chunk_region(group[k], self.shape), fill)
            empty = fill_rows(stack, fill)
            if empty.any():
                keep = np.flatnonzero(~empty)
                stack, at, group = stack[keep], at[keep], [group[k] for k in keep.tolist()]
            yield batch.encode(stack, at, group, limit=slot)

    def _tiles(self, region: list[slice], native: np.dtype, fill: np.ndarray) -> np.ndarray:
        """The region's inner chunks as one C-contiguous ``(n, *inner shape)`` array in C order
        (edge chunks padded with the fill value): read, then one transposing copy."""
        inner = self.layout.inner_shape
        data = np.asarray(read_source(self.src, self.name, tuple(region), self.job_id)).astype(native, copy=False)
        grid = [-(-(r.stop - r.start) // c) for r, c in zip(region, inner, strict=True)]
        if any(g * c != s for g, c, s in zip(grid, inner, data.shape, strict=True)):
            full = np.full([g * c for g, c in zip(grid, inner, strict=True)], fill, dtype=native)
            full[tuple(slice(0, s) for s in data.shape)] = data
            data = full
        split = [d for g, c in zip(grid, inner, strict=True) for d in (g, c)]
        order = [*range(0, 2 * len(inner), 2), *range(1, 2 * len(inner), 2)]
        return np.ascontiguousarray(data.reshape(split).transpose(order)).reshape(-1, *inner)

    def _encode_each(self, shard_coords: tuple[int, ...], part: tuple[int, int] | None, limit: bool
                     ) -> Iterator[tuple[int, EncodedChunk]]:
        """``encode`` chunk by chunk: chains without a batch encoder, plans and lossy modes."""
        layout = self.layout
        region, axis = self._region(shard_coords, part)
        origin = [r.start for r in region]
        encoder, native, fill, direct, _ = self._encoding()
        if direct is None:
            data = np.asarray(read_source(self.src, self.name, tuple(region), self.job_id)).astype(native, copy=False)
        slot = layout.slot_size if limit else None
        lo, hi = region[axis].start, region[axis].stop
        plan, lossy = self.plan, self.lossy
        # a chain without bytes→bytes codecs may return a view of the reader's reused buffer
        copy_views = direct is not None and not encoder.bytes_bytes_codecs
        for i, index, chunk_region, full in layout.inner_chunk_items(shard_coords, self.shape):
            start = chunk_region[axis].start
            if start < lo or start >= hi:
                continue
            if direct is not None:
                local = direct.read(index, fill)
                if not full:
                    local = local[tuple(slice(0, c.stop - c.start) for c in chunk_region)]
            else:
                local = data[tuple(slice(c.start - o, c.stop - o) for c, o in zip(chunk_region, origin, strict=True))]
            if plan is not None:
                plan.check_chunk(index, local, fill)
            if lossy is not None:
                local = lossy.prepare(index, local, f"inner chunk {index} (shard {tuple(shard_coords)})")
            chunk = padded(local, layout.inner_shape, fill)
            if not chunk.flags.c_contiguous:  # a view of a region: one copy, used by the fill check and the chain
                chunk = np.ascontiguousarray(chunk)
            if is_fill(chunk, fill):
                continue
            encoded = encoder.encode(chunk, index, limit=slot)
            if copy_views and np.may_share_memory(encoded.data, chunk):  # e.g. a [bytes] chain: no copy made
                encoded = type(encoded)(encoded.data.copy(), encoded.masks)
            yield i, encoded


_stacks = threading.local()


def _stack(n: int, shape: tuple[int, ...], native: np.dtype) -> np.ndarray:
    """This thread's buffer for ``n`` chunks of ``shape`` and type ``native``, reused from batch to batch."""
    nbytes = n * math.prod(shape) * native.itemsize
    buf = getattr(_stacks, "buf", None)
    if buf is None or buf.size < nbytes:
        buf = _stacks.buf = np.empty(nbytes, dtype=np.uint8)
    return buf[:nbytes].view(native).reshape(n, *shape)


def _blank_outside(chunk: np.ndarray, region: tuple[slice, ...], fill: np.ndarray) -> None:
    """Set the part of ``chunk`` beyond its clipped array ``region`` to ``fill``."""
    for d, r in enumerate(region):
        chunk[(slice(None),) * d + (slice(r.stop - r.start, None),)] = fill


def masks_of(encoded: Sequence[tuple[int, EncodedChunk]]) -> Masks:
    """The count of each conditional mask of ``(i, EncodedChunk)`` pairs."""
    return collections.Counter(e.mask for _, e in encoded if e.mask is not None)


def batch_masks(batches: list[EncodedBatch]) -> Masks:
    """``masks_of`` for batches."""
    masks: Masks = collections.Counter()
    for b in batches:
        if b.masks is not None and len(b):
            values, counts = np.unique(b.masks, return_counts=True)
            masks.update(dict(zip(values.tolist(), counts.tolist(), strict=True)))
    return masks


@with_zopt_pipeline
def write_packed_shard(unit: ShardJob, shard_coords: tuple[int, ...], marker: str | None = None
                        ) -> tuple[Masks, int]:
    """Dask task (compact layout): encode a whole shard and write it packed, atomically; then its journal ``marker``."""
    return assemble_shard(unit, shard_coords, encode_shard_part(unit, shard_coords, None), marker=marker)


@with_zopt_pipeline
def encode_shard_part(unit: ShardJob, shard_coords: tuple[int, ...], part: tuple[int, int] | None) -> list[EncodedBatch]:
    """Dask task (compact layout, a split shard): the encoded inner chunks of part ``[start, stop)``
    of the shard's first split axis (None: the whole shard), as ``EncodedBatch``es in shard order.
    Writes nothing (a rerun gives the same batches); the batches own their memory."""
    return list(unit.encode_batches(shard_coords, part, limit=False))


@with_zopt_pipeline
def assemble_shard(unit: ShardJob, shard_coords: tuple[int, ...], *parts: list[EncodedBatch], marker: str | None = None
                   ) -> tuple[Masks, int]:
    """Dask task (compact layout): pack the shard's encoded ``parts`` (in order) and write it,
    atomically (a rerun writes the same bytes again); then its journal ``marker``. Returns the
    conditional masks' counts and the chunks stored."""
    batches = [b for part in parts for b in part]
    unit.write_packed(shard_coords, pack_batches(unit.layout, batches))
    result = batch_masks(batches), sum(len(b) for b in batches)
    if marker is not None:
        mark(marker, *result)
    return result


@with_zopt_pipeline
def write_slot_part(unit: ShardJob, shard_coords: tuple[int, ...], part: tuple[int, int]
                    ) -> tuple[Masks, list[tuple[int, int]]]:
    """Dask task (fixed-slot layout): encode part of a shard and write it into its slots."""
    encoded = list(unit.encode(shard_coords, part, limit=True))
    tmp = tmp_path(unit.path(shard_coords), unit.job_id)
    written = write_slots(tmp, unit.layout, ((i, e.data) for i, e in encoded))
    return masks_of(encoded), written


@with_zopt_pipeline
def finalize_shard(unit: ShardJob, shard_coords: tuple[int, ...], *parts: tuple[Masks, list[tuple[int, int]]], marker: str | None = None
                    ) -> tuple[Masks, int]:
    """Dask task (fixed-slot layout): write the shard's index and rename it into place; then its journal ``marker``."""
    path = unit.path(shard_coords)
    written = [w for _, ws in parts for w in ws]
    tmp = tmp_path(path, unit.job_id)
    if written:
        finalize_slots(tmp, path, unit.layout, written)
    else:
        Path(tmp).unlink(missing_ok=True)
        Path(path).unlink(missing_ok=True)
    masks: Masks = collections.Counter()
    for m, _ in parts:
        masks.update(m)
    if marker is not None:
        mark(marker, masks, len(written))
    return masks, len(written)


@with_zopt_pipeline
def rewrite_shard_in_place(unit: ShardJob, shard_coords: tuple[int, ...], tmp_dir: str) -> tuple[Masks, int]:
    """Dask task (in place): encode a shard's chunks again and replace its file (``zopt.store.rewrite``,
    phase A), unless it holds exactly those chunks packed already (a retried task)."""
    path = unit.path(shard_coords)
    assert isinstance(unit.src, str)  # an in-place job reads its own local store
    key = os.path.relpath(path, unit.src)
    old, blob = read_shard(path, unit.layout, key)
    encoded = list(unit.encode(shard_coords, None, limit=False))
    chunks = {i: e.data.tobytes() for i, e in encoded}
    if not (is_packed(old, unit.layout) and same_chunks(blob, old, chunks)):
        rewrite_shard(path, unit.layout, chunks, tmp_dir, old, len(blob))
    return masks_of(encoded), len(encoded)


def _in_place_array(store: str, name: str, job_id: str | None) -> tuple[zarr.Array[Any], ChunkEncoder]:
    """Array ``name`` of ``store`` opened for reading and its chunks' encoder, once per process
    and job (an in-place job changes chunk files, never the metadata)."""
    def make() -> tuple[zarr.Array[Any], ChunkEncoder]:
        array = open_array(store, path=name, mode="r")
        spec = chunk_spec(tuple(array.chunks), v3_metadata(array).data_type, array.fill_value)
        return array, ChunkEncoder(v3_metadata(array).codecs, spec)

    if job_id is None:
        return make()
    opened: tuple[zarr.Array[Any], ChunkEncoder] = _targets.get(job_id, (store, name, "in place"), make)
    return opened


@with_zopt_pipeline
def rewrite_chunk_in_place(store: str, name: str, coords: tuple[int, ...], decision: DecisionLike,
                           plan: ArrayPlan | None = None, tmp_dir: str | None = None, job_id: str | None = None
                           ) -> tuple[Masks, int]:
    """Dask task (unsharded arrays, in place): encode one stored chunk again and replace its file.
    ``job``: the job's id, under which the array is opened once per process."""
    array, encoder = _in_place_array(store, name, job_id)
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
    encoded = encoder.with_decision(plan if plan is not None else decision).encode(chunk, coords)
    write_packed(path, encoded.data, tmp_dir)
    return masks_of([(0, encoded)]), 1

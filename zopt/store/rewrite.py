"""Replacing a shard file that readers may be reading: the layout that makes torn reads fail.

zarr-python's ``LocalStore`` opens the shard file afresh for every byte-range request, and a
partial read of a shard is two or more requests: the index, then each wanted inner chunk
(``sharding.py``). A shard replaced between them (``os.replace``, atomic) gives the reader an
**old index with the new file**. Two cases would decode silently wrong:

1. an old entry ``(offset, nbytes)`` that is exactly another chunk of the new file (chunks
   moved back by one slot after a hole): a whole, valid chunk, with its own valid checksum;
2. an old offset at or past the new file's end: the read returns no bytes and zarr-python
   gives the fill value (``if chunk_bytes:``).

``rewrite_shard`` writes the new file so that neither can happen (phase A):

- no new inner chunk starts where a *different* chunk started in the old file (a chunk is
  moved on by a byte or more of padding, at most ``PAD_LIMIT`` in all);
- the new file is never shorter than the old one (a sparse hole between the chunks and an
  index at the end, or after the chunks when the index is at the start).

With a ``crc32c`` codec at the end of the inner chain every other old entry reads bytes whose
last four are not the CRC-32C of the rest (a zero-filled hole included) and fails to decode:
the reader gets an error (zarr: ``ValueError``), and a retry reads the new index. An old entry
of the *same* chunk at the same offset reads that chunk's new encoding of the same values.

After ``grace`` seconds, longer than any reader holds an index, ``shrink_shard`` (phase B)
drops the hole: in place (``ftruncate``) for an index at the start; for an index at the end
through a new file with the same chunk offsets and the same index. A reader holding the phase-A
index reads the same bytes from either. Both phases are idempotent: run twice, or after a run
killed half way, they give the same bytes.

Temporary files live in the job's directory (``zopt.store.lock.store_lock``) and are renamed onto the
shard (same filesystem, atomic).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from zopt.codecs.zarr_config import with_zopt_pipeline
from zopt.errors import OptionError
from zopt.notes import Note
from zopt.store.files import atomic_write
from zopt.store.shards import EMPTY, PAD_LIMIT, ShardLayout

__all__ = ["GRACE_SECONDS", "PAD_LIMIT", "data_end", "has_inner_checksum", "unchecked_note", "place", "rewrite_shard", "shrink_shard", "slack", "same_chunks", "shrink_after_grace"]

def place(layout: ShardLayout, sizes: Iterable[tuple[int, int]], old: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """Offsets of a packed shard whose chunks start nowhere an old chunk of another index did.

    sizes : ``(i, nbytes)`` of the new non-empty inner chunks, any order (placed in C order).
    old : the old file's ``(n_inner, 2)`` index table, or None.
    Returns ``(table, data_end)``: the new index table and the end of the chunk data (bytes).
    """
    avoid: dict[int, int] = {}
    if old is not None:
        for j in np.flatnonzero(old[:, 0] != EMPTY):
            avoid[int(old[j, 0])] = int(j)
    table = np.full((layout.n_inner, 2), EMPTY, dtype=np.uint64)
    off = layout.data_offset
    for i, n in sorted(sizes):
        while avoid.get(off, i) != i:
            off += 1
        table[i] = (off, n)
        off += n
    return table, off


def data_end(table: np.ndarray, layout: ShardLayout) -> int:
    """End (bytes) of the last chunk of ``table``, or ``layout.data_offset`` when it has none."""
    used = table[:, 0] != EMPTY
    return int((table[used, 0] + table[used, 1]).max()) if used.any() else layout.data_offset


def slack(table: np.ndarray, layout: ShardLayout, file_size: int) -> int:
    """Bytes of a file beyond its chunks and index: the hole a phase-A rewrite leaves."""
    return file_size - data_end(table, layout) - (layout.index_nbytes if layout.index_location == "end" else 0)


def same_chunks(blob: bytes | memoryview, table: np.ndarray, chunks: Mapping[int, bytes | memoryview]) -> bool:
    """True when the shard ``blob`` with index ``table`` holds exactly ``chunks`` ({i: bytes})."""
    used = {int(i) for i in np.flatnonzero(table[:, 0] != EMPTY)}
    if used != set(chunks):
        return False
    view = memoryview(blob)
    return all(view[int(table[i, 0]) : int(table[i, 0] + table[i, 1])] == chunks[i] for i in used)


def rewrite_shard(
    path: str | os.PathLike[str],
    layout: ShardLayout,
    chunks: Mapping[int, bytes | memoryview],
    tmp_dir: str | os.PathLike[str],
    old: np.ndarray | None = None,
    old_size: int = 0,
) -> int:
    """Replace the shard file ``path`` by one holding ``chunks`` ({i: encoded bytes}), phase A.

    old, old_size : the current file's index table and size (None, 0 when there is none).
    tmp_dir : the job's temporary directory (same filesystem as ``path``), where the new file is
    written before its rename. With no chunks the file is removed (its values are
    the fill value). Returns the new file's size in bytes.
    """
    path = Path(path)
    if not chunks:
        path.unlink(missing_ok=True)
        return 0
    table, end = place(layout, ((i, len(memoryview(d))) for i, d in chunks.items()), old)
    index = layout.encode_index(table)
    size = max(end + (len(index) if layout.index_location == "end" else 0), old_size)
    parts = [(int(table[i, 0]), d) for i, d in chunks.items()]
    parts.append((0 if layout.index_location == "start" else size - len(index), index))
    # no fsync: the store's other shards are not synced either; a reader or a kill sees old or new
    return atomic_write(path, dict(parts), fsync=False, size=size, tmp_dir=tmp_dir)


@with_zopt_pipeline
def shrink_shard(path: str | os.PathLike[str], layout: ShardLayout, tmp_dir: str | os.PathLike[str], key: str) -> int:
    """Drop the hole a phase-A rewrite left in the shard file ``path`` (phase B).

    The chunks keep their offsets and the index its bytes. Idempotent. Returns the file's size.
    Raises ShardIndexError naming ``key`` when its index does not match the file.
    """
    from zopt.store.shards import read_index

    path = Path(path)
    table = read_index(path, layout, key)
    size = path.stat().st_size
    extra = slack(table, layout, size)
    if extra <= 0:
        return size
    end = data_end(table, layout)
    if layout.index_location == "start":
        os.truncate(path, end)  # same inode: the bytes before ``end`` do not change
        return end
    n = layout.index_nbytes
    with open(path, "rb") as f:
        head = f.read(end)
        f.seek(size - n)
        index = f.read(n)
    # no fsync, as in phase A: the same chunk bytes at the same offsets, only the hole dropped
    return atomic_write(path, {0: head, end: index}, fsync=False, size=end + n, tmp_dir=tmp_dir)


#: default seconds between phase A and phase B: far longer than zarr-python holds a shard index
#: (one ``getitem``: the index request, then the chunk requests at once)
GRACE_SECONDS = 2.0


def has_inner_checksum(layout: ShardLayout) -> bool:
    """True when the inner chain ends with ``crc32c``: a torn read then fails to decode."""
    from zarr.codecs import Crc32cCodec

    return bool(layout.inner_codecs) and isinstance(layout.inner_codecs[-1], Crc32cCodec)


def unchecked_note(name: str) -> Note:
    """The report note (kind ``"checksum"``) for an array rewritten without a per-chunk checksum."""
    return Note(f"array {name!r} has no crc32c at the end of its inner codec chain: a reader reading it during the "
                "rewrite can pair an old index with a new shard and is only protected where such bytes fail to decode",
                "checksum", name)


def shrink_after_grace(shards: list[tuple[str, ShardLayout, str]], tmp_dir: str, grace: float,
                       scheduler: str | None = None) -> bool:
    """Phase B for ``(path, layout, key)`` shards: when any has a hole, wait ``grace`` seconds,
    then drop every hole (one Dask task per shard). Returns True when it shrank any."""
    from dask.delayed import delayed

    from zopt.compat.scheduling import compute
    from zopt.store.shards import read_index

    if not grace >= 0:
        raise OptionError("grace", f"{grace!r} must be a number of seconds >= 0")
    holes = []
    for path, layout, key in shards:
        if os.path.exists(path) and slack(read_index(path, layout, key), layout, os.path.getsize(path)) > 0:
            holes.append((path, layout, key))
    if not holes:
        return False
    time.sleep(grace)
    compute([delayed(shrink_shard, pure=False)(p, lay, tmp_dir, key, dask_key_name=f"zopt-shrink-{key}-{tmp_dir}")
              for p, lay, key in holes], scheduler, None)
    return True

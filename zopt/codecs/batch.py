"""Encoding many chunks of one array at once: each codec of the chain once per batch (issue 34, part 2).

After a call that touches a megabyte (a decode, a shuffle, a compress) the interpreter's own data is
out of the CPU cache, and the Python that runs next holds the GIL ~10-20 µs longer than it would
warm. Encoding a shard's inner chunks one by one returns to Python several times per chunk; a
``BatchEncoder`` takes a stack of chunks (``(n, *chunk shape)``) and runs each step of the chain
once for all of them where a library call does the whole batch (the byte shuffle as one numpy
call, the fill check as one comparison), and otherwise in a loop with nothing but the foreign call
in it (``zopt.compat.libzstd.compress_rows``, ``zopt.compat.libblosc``), writing the encoded chunks
back to back into one buffer that the shard writer writes as it is.

The bytes are those ``ChunkEncoder.encode`` writes for each chunk (tested chunk by chunk against it
and against zarr's pipeline). Chains it takes (``BatchEncoder.of``; any other chain is encoded
chunk by chunk):

- array→bytes: little-endian ``bytes`` of plain numbers (the chunk's own bytes), or numcodecs'
  pcodec alone (its compressor, called per chunk, copies each output into a ``bytes`` object);
- then any number of byte shuffles (zopt's ``shuffle``; numcodecs' where the chunk is whole
  elements), then at most one of: ``zstd`` (numcodecs' library with a context per thread),
  ``blosc`` (numcodecs' library), or ``conditional`` over ``[zstd]`` or ``[shuffle, zstd]`` with
  no decision (mask 0), a fixed mask or ``compress_if_smaller``, whose trials are batched too: the
  sample windows of every chunk gathered and shuffled in one call each, then the chosen branch.
  A chunk that decides on a tie (an encoding exactly the input's length) is encoded alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numcodecs
import numpy as np

from zopt.codecs.conditional import ConditionalCodec, format_header
from zopt.codecs.decisions import (
    SAMPLE_ABOVE,
    CompressIfSmaller,
    FixedMask,
    filter_choice,
    sample_windows,
)
from zopt.codecs.shuffle import ShuffleCodec, shuffle_rows
from zopt.codecs.sync import numcodec_of
from zopt.compat import libblosc, libzstd, loops

if TYPE_CHECKING:
    from zarr.abc.codec import BytesBytesCodec

    from zopt.codecs.chain import ChunkEncoder, EncodedChunk

__all__ = ["GROUP_BYTES", "PIECES_GROUP_BYTES", "BatchEncoder", "EncodedBatch", "batch_size"]

#: most raw bytes of the chunks encoded in one batch (a shard's chunks are split into equal
#: batches under it). Large, because each batch costs ~1 ms of GIL for its Python, run cold after
#: the batch's megabytes of work (issue 34, G3: 16 MiB batches held the GIL 1.4× as long per chunk
#: as 30 MiB ones); under glibc's largest mmap threshold (32 MiB), so that a batch's buffers
#: (its compressed chunks: at most the raw bytes plus 0.4 %) come from the heap, reused, without
#: page faults and without an ``munmap`` under the GIL when freed.
GROUP_BYTES = 30 << 20


#: ``GROUP_BYTES`` for pcodec chains, whose encoded chunks are pcodec's own ``bytes`` objects (no
#: batch-sized output buffer to keep under the mmap threshold): a 64 MiB shard in 2 batches, not 3
PIECES_GROUP_BYTES = 32 << 20


def batch_size(count: int, chunk_nbytes: int, group_bytes: int | None = None) -> int:
    """Chunks per batch for ``count`` chunks of ``chunk_nbytes`` bytes: equal batches of at most
    ``group_bytes`` (default ``GROUP_BYTES``; at least one chunk), so that no small last batch pays
    a batch's Python alone."""
    group = GROUP_BYTES if group_bytes is None else group_bytes
    per = max(1, group // max(1, chunk_nbytes))
    batches = -(-count // per)
    return max(1, -(-count // max(1, batches)))

Rows = np.ndarray  # 2-D C-contiguous uint8 (n, width): one chunk's bytes per row
#: ``f(rows, head) -> (data, ends)``: each row compressed, back to back after ``head`` bytes each
Compress = Callable[[Rows, int], tuple[np.ndarray, np.ndarray]]
#: ``alone(k)``: chunk ``k`` of a batch encoded by itself (``ChunkEncoder.encode``)
Alone = Callable[[int], "EncodedChunk"]
#: ``(pieces, masks, data, ends)`` of ``_Conditional.encode``: ``data``/``ends`` when every chunk's
#: bytes are in one buffer (``pieces`` None), else one array per chunk in ``pieces``
Encoded = tuple["list[np.ndarray] | None", np.ndarray, "np.ndarray | None", "np.ndarray | None"]


@dataclass
class EncodedBatch:
    """Encoded chunks of one shard, in shard order.

    positions : int64 ``(n,)`` each chunk's position in its shard (C order), ascending.
    sizes : int64 ``(n,)`` each chunk's encoded size in bytes.
    masks : int64 ``(n,)`` the conditional codec's mask of each chunk, or None (no conditional).
    data : the chunks back to back (1-D uint8, ``sizes.sum()`` bytes), or None when each has its
        own array in ``pieces``.
    """

    positions: np.ndarray
    sizes: np.ndarray
    masks: np.ndarray | None
    data: np.ndarray | None = None
    pieces: list[np.ndarray] | None = None
    mask_tuples: list[tuple[int, ...]] | None = None  # every conditional's mask, where chunks were encoded alone

    def __len__(self) -> int:
        return len(self.positions)

    @classmethod
    def joined(cls, positions: Sequence[int] | np.ndarray, pieces: Sequence[np.ndarray], masks: np.ndarray | None) -> EncodedBatch:
        """A batch from one array per chunk, copied back to back into one buffer."""
        sizes = np.fromiter((p.size for p in pieces), dtype=np.int64, count=len(pieces))
        data = np.concatenate(pieces) if len(pieces) else np.empty(0, np.uint8)
        return cls(np.asarray(positions, dtype=np.int64), sizes, masks, data=data)

    @classmethod
    def of_chunks(cls, items: Sequence[tuple[int, EncodedChunk]]) -> EncodedBatch:
        """A batch from ``(position, EncodedChunk)`` pairs, each kept in its own array."""
        pieces = [e.data for _, e in items]
        masks = np.array([e.masks[0] for _, e in items], dtype=np.int64) if items and items[0][1].masks else None
        sizes = np.fromiter((p.size for p in pieces), dtype=np.int64, count=len(pieces))
        return cls(np.array([i for i, _ in items], dtype=np.int64), sizes, masks, pieces=pieces,
                   mask_tuples=[e.masks for _, e in items])

    def _pieces(self) -> list[np.ndarray]:
        if self.pieces is None:
            raise ValueError("EncodedBatch: neither data nor pieces hold the chunks")
        return self.pieces

    def parts(self) -> list[memoryview]:
        """The chunks' bytes in order, as few byte views as possible (one when ``data`` holds them)."""
        if self.data is not None:  # ``ndarray.data``: the array's memoryview
            return [self.data.data] if self.data.size else []
        return [p.data for p in self._pieces()]

    def chunk(self, k: int) -> np.ndarray:
        """Chunk ``k``'s encoded bytes (1-D uint8, a view)."""
        if self.data is None:
            return self._pieces()[k]
        end = int(self.sizes[: k + 1].sum())
        return self.data[end - int(self.sizes[k]) : end]

    def chunks(self) -> Iterator[tuple[int, np.ndarray, tuple[int, ...]]]:
        """``(position, encoded bytes, masks)`` of every chunk, in order."""
        ends = np.cumsum(self.sizes).tolist()
        masks = self.mask_tuples or ([()] * len(self) if self.masks is None else [(m,) for m in self.masks.tolist()])
        data, pieces = self.data, (self._pieces() if self.data is None else [])
        for k, i in enumerate(self.positions.tolist()):
            yield i, (pieces[k] if data is None else data[ends[k] - int(self.sizes[k]) : ends[k]]), masks[k]


def _sizes(ends: np.ndarray) -> np.ndarray:
    """Each piece's size from the ends of pieces laid back to back (``np.diff(ends, prepend=0)``
    without its Python: this runs once per batch, cold)."""
    sizes = ends.copy()
    sizes[1:] -= ends[:-1]
    return sizes


def _starts(ends: np.ndarray) -> np.ndarray:
    """Each piece's start from the ends of pieces laid back to back."""
    return ends - _sizes(ends)


def _zstd_settings(codec: BytesBytesCodec) -> tuple[int, bool] | None:
    nc = numcodec_of(codec)
    if nc is not None and type(nc) is numcodecs.Zstd and libzstd.available():
        return int(nc.level), bool(getattr(nc, "checksum", False))
    return None


def _shuffle_size(codec: BytesBytesCodec, width: int) -> int | None:
    """Element size of a byte shuffle that ``shuffle_rows`` does as the chain does, else None."""
    if isinstance(codec, ShuffleCodec):
        return codec.element_size or 1
    nc = numcodec_of(codec)
    if nc is not None and type(nc) is numcodecs.Shuffle and width % int(nc.elementsize) == 0:  # numcodecs refuses partial elements
        return int(nc.elementsize)
    return None


def _compressor(codec: BytesBytesCodec) -> Compress | None:
    """The rows compressor of a final zstd or blosc codec, or None."""
    zstd = _zstd_settings(codec)
    if zstd is not None:
        level, checksum = zstd
        return lambda rows, head: libzstd.compress_rows(rows, level, checksum, head)
    nc = numcodec_of(codec)
    if nc is not None and type(nc) is numcodecs.Blosc and isinstance(getattr(nc, "_typesize", None), int):
        shuffle = int(nc.shuffle)
        if shuffle == -1:  # AUTOSHUFFLE, as numcodecs resolves it
            shuffle = 2 if nc._typesize == 1 else 1
        return libblosc.compressor(str(nc.cname), int(nc.clevel), shuffle, int(nc._typesize), int(nc.blocksize))
    return None


class _Conditional:
    """``conditional([zstd])`` or ``conditional([shuffle, zstd])`` with a batchable decision."""

    def __init__(self, codec: ConditionalCodec, shuffle: int | None, zstd: tuple[int, bool]) -> None:
        self.head = codec.header_nbytes
        self.bits = codec.header_bits
        self.shuffle = shuffle  # element size of codec 0, or None for [zstd]
        self._element_size = 1 if shuffle is None else shuffle
        self.zbit = 0 if shuffle is None else 1
        self.level, self.checksum = zstd
        decision = codec.decision
        self.fixed = 0 if decision is None else decision.mask if isinstance(decision, FixedMask) else None
        self.decision = decision
        self.if_smaller = decision if type(decision) is CompressIfSmaller else None

    @classmethod
    def of(cls, codec: ConditionalCodec, width: int) -> _Conditional | None:
        decision = codec.decision
        if not (decision is None or isinstance(decision, FixedMask) or type(decision) is CompressIfSmaller):
            return None
        wrapped = codec.codecs
        zstd = _zstd_settings(wrapped[-1])
        if zstd is None or len(wrapped) > 2:
            return None
        if len(wrapped) == 1:
            return cls(codec, None, zstd)
        if not isinstance(wrapped[0], ShuffleCodec):
            return None
        return cls(codec, wrapped[0].element_size or 1, zstd)

    def _frames(self, rows: Rows, head: int = 0, shuffled: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """zstd frames of ``rows`` (``shuffled``: of the rows byte-shuffled first), see ``compress_rows``."""
        if shuffled and self._element_size > 1:
            if loops.available():  # shuffled row by row inside the one foreign call
                return libzstd.compress_rows(rows, self.level, self.checksum, head, self._element_size)
            rows = self._shuffled(rows)
        return libzstd.compress_rows(rows, self.level, self.checksum, head)

    def _shuffled(self, rows: Rows) -> Rows:
        return shuffle_rows(rows, self._element_size, False)

    def _headed(self, masks: np.ndarray, payload: Rows) -> Rows:
        out = np.empty((payload.shape[0], self.head + payload.shape[1]), dtype=np.uint8)
        out[:, self.head :] = payload
        self._write_headers(out.reshape(-1), np.arange(payload.shape[0], dtype=np.int64) * out.shape[1], masks)
        return out

    def _write_headers(self, data: np.ndarray, starts: np.ndarray, masks: np.ndarray) -> None:
        if self.head == 1:
            data[starts] = masks
        else:
            heads = np.frombuffer(b"".join(format_header(int(m), self.bits) for m in masks.tolist()), np.uint8)
            data[(starts[:, None] + np.arange(self.head)).reshape(-1)] = heads

    def encode(self, rows: Rows, alone: Alone) -> Encoded:
        """``(pieces, masks, data, ends)``: ``data``/``ends`` when every chunk's bytes are in one
        buffer (``pieces`` None), else one array per chunk in ``pieces``."""
        n, width = rows.shape
        if self.fixed is not None:
            mask = self.fixed
            shuffled = self.shuffle is not None and bool(mask & 1)
            masks = np.full(n, mask, dtype=np.int64)
            if not mask >> self.zbit & 1:
                out = self._headed(masks, self._shuffled(rows) if shuffled else rows)
                return None, masks, out.reshape(-1), np.arange(1, n + 1, dtype=np.int64) * out.shape[1]
            data, ends = self._frames(rows, self.head, shuffled)
            self._write_headers(data, _starts(ends), masks)
            return None, masks, data, ends
        if self.head == 1 and loops.available() and (self.shuffle is None or width > SAMPLE_ABOVE):
            compiled = self._compiled(rows)
            if compiled is not None:
                return compiled
        if self.shuffle is None:
            return self._if_smaller_zstd(rows, alone)
        if width > SAMPLE_ABOVE:
            return self._if_smaller_sampled(rows, alone)
        return self._if_smaller_small(rows, alone)

    def _compiled(self, rows: Rows) -> Encoded | None:
        """``CompressIfSmaller`` (sampled trials; a one-byte header) in one foreign call for the
        batch (``zopt.compat.loops``, issue 34 G3): the bytes of ``_if_smaller_sampled`` /
        ``_if_smaller_zstd``. None on a tie, which those encode alone."""
        decision = self.if_smaller
        assert decision is not None  # encode() comes here for CompressIfSmaller only
        windows = sample_windows(rows.shape[1], decision.sample_fraction, decision.sample_windows) \
            if self.shuffle is not None else []
        got = libzstd.conditional_rows(rows, self.level, self.checksum, 0 if self.shuffle is None else self._element_size,
                                       self.zbit, windows)
        if got is None:
            return None
        data, ends, masks = got
        return None, masks, data, ends

    def _finish(self, rows_of: Callable[[int, int], Rows], frames: tuple[np.ndarray, np.ndarray, np.ndarray] | None,
                masks: np.ndarray, raw: np.ndarray, alone: Alone, ties: np.ndarray) -> Encoded:
        """Assemble the chunks: ``frames`` = (data with head room, ends, row of each frame) holds
        the compressed ones, ``raw[k]`` marks chunks stored uncompressed (their payload
        ``rows_of(mask, k)``, ``(1, width)``), ``ties[k]`` chunks encoded alone."""
        n = len(masks)
        if frames is not None and len(frames[2]) == n and not ties.any():  # every chunk compressed: one buffer
            data, ends, _ = frames
            self._write_headers(data, _starts(ends), masks)
            return None, masks, data, ends
        pieces: list[np.ndarray | None] = [None] * n
        if frames is not None:
            data, ends, which = frames
            starts = _starts(ends)
            self._write_headers(data, starts, masks[which])
            for k, end, start in zip(which.tolist(), ends.tolist(), starts.tolist(), strict=True):
                pieces[k] = data[start:end]
        for k in np.flatnonzero(raw).tolist():
            pieces[k] = self._headed(masks[k : k + 1], rows_of(int(masks[k]), k)).reshape(-1)
        for k in np.flatnonzero(ties).tolist():
            encoded = alone(k)
            pieces[k], masks[k] = encoded.data, encoded.masks[0]
        done = [p for p in pieces if p is not None]
        if len(done) != n:
            raise AssertionError(f"conditional batch: {n - len(done)} of {n} chunks left unencoded")
        return done, masks, None, None

    def _if_smaller_zstd(self, rows: Rows, alone: Alone) -> Encoded:
        # CompressIfSmaller on [zstd]: the frame where it is smaller than the chunk
        none = np.zeros(len(rows), dtype=bool)
        return self._after_choice(rows, rows, none, none, alone)

    def _compressed(self, payload: Rows, use: np.ndarray, shuffled: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Compress the rows of ``payload`` (``shuffled``: byte-shuffled first) where ``use``;
        ``(data, ends, rows, sizes)``."""
        which = np.flatnonzero(use)
        sub = payload if which.size == len(payload) else np.ascontiguousarray(payload[which])
        data, ends = self._frames(sub, self.head, shuffled)
        return data, ends, which, _sizes(ends) - self.head

    def _if_smaller_sampled(self, rows: Rows, alone: Alone) -> Encoded:
        # CompressIfSmaller on [shuffle, zstd] for chunks over SAMPLE_ABOVE: the shuffle judged on
        # a sample (zstd of the shuffled and of the plain sample), then one full zstd of the winner
        n, width = rows.shape
        decision = self.if_smaller
        assert decision is not None  # encode() comes here for CompressIfSmaller only
        windows = sample_windows(width, decision.sample_fraction, decision.sample_windows)
        sample = np.concatenate([rows[:, s : s + w] for s, w in windows], axis=1)
        s = sample.shape[1]
        # the rule CompressIfSmaller and the compiled loop follow (early abort: stored as it is)
        stored, shuffle = filter_choice(_sizes(self._frames(sample, 0, True)[1]), _sizes(self._frames(sample)[1]), s)
        payload: Rows | None
        if shuffle.all():
            payload = None  # shuffled where compressed (self._frames); a row alone where stored
        elif shuffle.any():
            payload = rows.copy()
            payload[shuffle] = self._shuffled(np.ascontiguousarray(rows[shuffle]))
        else:
            payload = rows
        return self._after_choice(rows, payload, shuffle, stored, alone)

    def _after_choice(self, rows: Rows, payload: Rows | None, shuffle: np.ndarray, stored: np.ndarray, alone: Alone
                      ) -> Encoded:
        """Masks and bytes once the shuffle is chosen (``shuffle``; ``stored``: early abort, the
        chunk stored as it is): the zstd frame of ``payload`` kept where smaller than the chunk,
        else ``payload`` itself (the shuffled or plain chunk); a tie is encoded alone.
        ``payload`` None: every row shuffled (never made as a whole: shuffled as it is compressed)."""
        n, width = rows.shape
        masks = shuffle.astype(np.int64)
        data, ends, which, sizes = self._compressed(rows if payload is None else payload, ~stored, payload is None)
        full = np.zeros(n, dtype=np.int64)
        full[which] = sizes
        smaller = ~stored & (full < width)
        ties = ~stored & (full == width)
        masks[smaller] |= 1 << self.zbit
        raw = ~smaller & ~ties  # stored uncompressed: plain (mask 0) or shuffled (mask 1)
        if smaller.sum() < len(which):  # drop the frames not kept
            keep = np.flatnonzero(smaller[which])
            starts = ends - sizes - self.head
            data = np.concatenate([data[b:e] for b, e in zip(starts[keep].tolist(), ends[keep].tolist(), strict=True)]) \
                if keep.size else data[:0]
            ends, which = np.cumsum(sizes[keep] + self.head), which[keep]
        def rows_of(mask: int, k: int) -> Rows:
            if mask == 0:
                return rows[k : k + 1]
            return self._shuffled(rows[k : k + 1]) if payload is None else payload[k : k + 1]

        return self._finish(rows_of, (data, ends, which), masks, raw, alone, ties)

    def _if_smaller_small(self, rows: Rows, alone: Alone) -> Encoded:
        # chunks up to SAMPLE_ABOVE: both branches encoded in full, the smaller stored
        n, width = rows.shape
        shuffled = self._shuffled(rows)
        on = np.minimum(_sizes(self._frames(shuffled)[1]), width)
        off = np.minimum(_sizes(self._frames(rows)[1]), width)
        shuffle = on < off
        payload = shuffled if shuffle.all() else rows if not shuffle.any() else np.where(shuffle[:, None], shuffled, rows)
        # the branch's zstd frame is kept when smaller than the chunk (a tie stores it as it is)
        return self._after_choice(rows, np.ascontiguousarray(payload), shuffle, np.zeros(n, dtype=bool), alone)


class BatchEncoder:
    """Encodes stacks of chunks through a ``ChunkEncoder``'s chain (see module docstring).

    Build with ``of(encoder)``; ``encode(stack, positions, indices)`` returns an ``EncodedBatch``.
    """

    def __init__(self, encoder: ChunkEncoder, pcodec: bool, filters: list[int], final: Compress | _Conditional | None) -> None:
        self.encoder = encoder
        self.native = encoder.native_dtype
        self.pcodec = pcodec
        self.filters = filters  # element sizes of the byte shuffles, in order
        self.final = final
        #: most raw bytes per batch (``batch_size``)
        self.group_bytes: int | None = PIECES_GROUP_BYTES if pcodec else None
        # [shuffle, zstd]: with zopt's compiled loops each row is shuffled and compressed in one call
        # for the batch (no shuffled copy of the batch, no Python between the steps)
        zstd = _zstd_settings(encoder.bytes_bytes_codecs[-1]) if encoder.bytes_bytes_codecs else None
        self.shuffle_zstd = zstd if zstd is not None and len(filters) == 1 and callable(final) else None

    @classmethod
    def of(cls, encoder: ChunkEncoder) -> BatchEncoder | None:
        """The batch encoder of a ``zopt.codecs.chain.ChunkEncoder``, or None for a chain it does not take."""
        kind = encoder.direct_kind
        if kind is None:
            return None
        width = int(np.prod(encoder.spec.shape, dtype=np.int64)) * encoder.native_dtype.itemsize
        codecs = encoder.bytes_bytes_codecs
        if kind == "pcodec":
            return cls(encoder, True, [], None) if not codecs else None
        filters: list[int] = []
        final: Compress | _Conditional | None = None
        for k, codec in enumerate(codecs):
            size = _shuffle_size(codec, width)
            if size is not None:
                filters.append(size)
                continue
            if k != len(codecs) - 1:
                return None
            final = _Conditional.of(codec, width) if isinstance(codec, ConditionalCodec) else _compressor(codec)
            if final is None:
                return None
        return cls(encoder, False, filters, final)

    def encode(self, stack: np.ndarray, positions: Sequence[int] | np.ndarray, indices: Sequence[tuple[int, ...]],
               limit: int | None = None) -> EncodedBatch:
        """Encode every chunk of ``stack`` (C-contiguous ``(n, *chunk shape)`` of the chain's native
        type). positions : each chunk's position in its shard; indices : its grid coordinates
        (given to ``ChunkEncoder.encode`` for a chunk encoded alone). limit : as in
        ``ChunkEncoder.encode``: a chunk encoded larger is encoded alone with that limit.
        The batch never refers to ``stack``'s memory.
        """
        n = len(positions)
        encoder = self.encoder
        if n == 0:
            return EncodedBatch(np.empty(0, np.int64), np.empty(0, np.int64), None, data=np.empty(0, np.uint8))
        if self.pcodec:
            flat = stack.reshape(n, -1)
            direct = encoder.direct
            assert direct is not None  # `of` takes pcodec chains only where direct_kind is "pcodec"
            pieces = [direct(flat[k]) for k in range(n)]
            batch = EncodedBatch(np.asarray(positions, dtype=np.int64),
                                 np.fromiter((p.size for p in pieces), dtype=np.int64, count=n), None, pieces=pieces)
            return self._limited(batch, stack, indices, limit)
        rows = stack.reshape(n, -1).view(np.uint8)
        final = self.final
        masks = None
        if self.shuffle_zstd is not None and loops.available():
            data, ends = libzstd.compress_rows(rows, *self.shuffle_zstd, 0, self.filters[0])
            batch = EncodedBatch(np.asarray(positions, dtype=np.int64), _sizes(ends), masks, data=data)
            return self._limited(batch, stack, indices, limit)
        for size in self.filters:
            rows = shuffle_rows(rows, size, False)
        if final is None:
            data = rows.reshape(-1).copy() if np.may_share_memory(rows, stack) else rows.reshape(-1)
            ends = np.arange(1, n + 1, dtype=np.int64) * rows.shape[1]
        elif isinstance(final, _Conditional):
            chosen, masks, joined, joined_ends = final.encode(rows, lambda k: encoder.encode(stack[k], tuple(indices[k])))
            if chosen is not None:
                return self._limited(EncodedBatch.joined(positions, chosen, masks), stack, indices, limit)
            assert joined is not None and joined_ends is not None  # encode's contract: pieces or data
            data, ends = joined, joined_ends
        else:
            data, ends = final(rows, 0)
        batch = EncodedBatch(np.asarray(positions, dtype=np.int64), _sizes(ends), masks, data=data)
        return self._limited(batch, stack, indices, limit)

    def _limited(self, batch: EncodedBatch, stack: np.ndarray, indices: Sequence[tuple[int, ...]], limit: int | None) -> EncodedBatch:
        """``batch`` with every chunk over ``limit`` bytes encoded alone under that limit."""
        if limit is None or not (batch.sizes > limit).any():
            return batch
        pieces, masks = [], []
        for k, (_, data, m) in enumerate(batch.chunks()):
            if data.size > limit:
                encoded = self.encoder.encode(stack[k], tuple(indices[k]), limit=limit)
                data, m = encoded.data, encoded.masks
            pieces.append(data)
            masks.append(m[0] if m else 0)
        return EncodedBatch.joined(batch.positions, pieces, None if batch.masks is None else np.array(masks, dtype=np.int64))

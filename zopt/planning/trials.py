"""Trial encodings of the analysis (``zopt.planning.analysis``): which wrapped codecs to try
(``candidate_codecs``), and ``Trials``, the size and times of every mask of them for the samples
of many chunks at once, batched where a codec allows it."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr

from zopt.codecs.conditional import conditional_codecs_in, default_header_bits
from zopt.codecs.sync import sync_decoder, sync_encoder, sync_row_transform, zstd_row_sizes

if TYPE_CHECKING:
    from zarr.core.array_spec import ArraySpec

__all__ = ["DEFAULT_CANDIDATES", "Trials", "candidate_codecs"]

#: wrapped codecs tried when the array has no conditional codec
DEFAULT_CANDIDATES: list[dict[str, Any]] = [
    {"name": "shuffle"},
    {"name": "zstd", "configuration": {"level": 3}},
]


def candidate_codecs(array: zarr.Array[Any], codecs: Sequence[dict[str, Any]] | str | None) -> tuple[list[dict[str, Any]], int]:
    """The wrapped codec list (JSON) and ``header_bits`` to analyse for ``array``.

    Given ``codecs`` win; else the array's first ``conditional`` codec; else ``DEFAULT_CANDIDATES``.
    """
    if codecs is not None:
        codecs = json.loads(codecs) if isinstance(codecs, str) else list(codecs)
        return codecs, default_header_bits(len(codecs))
    found = conditional_codecs_in(getattr(array.metadata, "codecs", ()))
    if found:
        return [c.to_dict() for c in found[0].codecs], found[0].header_bits
    return json.loads(json.dumps(DEFAULT_CANDIDATES)), default_header_bits(len(DEFAULT_CANDIDATES))


class Trials:
    """Encoded size and encode (optionally decode) seconds of every mask of a wrapped codec list,
    for the samples of many chunks at once.

    Mask ``m`` applies the codecs of its set bits in list order, so its output is the output of
    ``m`` without its highest bit ``h`` passed through codec ``h``: each mask costs one encode
    (and one decode) step per chunk, and its times are those of the smaller mask plus that step.
    A codec that transforms all rows in one numpy call (``shuffle``) runs once per batch, and so
    does a zstd step whose output no larger mask uses, when decodes are not timed (its sizes come
    from one blosc call, ``zopt.codecs.sync.zstd_row_sizes``); a batch step's time is shared
    equally among the rows. The other steps run row by row.
    """

    def __init__(self, codecs: Sequence[Any], spec: ArraySpec | None, decode_times: bool = False) -> None:
        self.n = len(codecs)
        self.decode_times = decode_times
        self.encoders = [sync_encoder(c, spec) for c in codecs]
        self.decoders = [sync_decoder(c, spec) for c in codecs]
        self.row_encoders = [sync_row_transform(c) for c in codecs]
        self.row_decoders = [sync_row_transform(c, decode=True) for c in codecs]
        # sizes without outputs: only for the last codec (no larger mask builds on its output)
        self.row_sizes = [zstd_row_sizes(c) if i == self.n - 1 and not decode_times else None for i, c in enumerate(codecs)]

    def run(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """rows: uint8 ``(n, nbytes)``, one sample per row. Returns ``(bytes, encode seconds,
        decode seconds)``, float64 ``(n, 2**len(codecs))`` each; decode seconds are NaN for masks
        above 0 unless ``decode_times``."""
        n_rows = rows.shape[0]
        masks = 1 << self.n
        size = np.empty((n_rows, masks), dtype=np.float64)
        enc_s = np.zeros((n_rows, masks), dtype=np.float64)
        dec_s = np.zeros((n_rows, masks), dtype=np.float64)
        size[:, 0] = rows.shape[1]
        outputs: list[Any] = [rows]  # per mask: a 2-D array (same-length rows) or a list of 1-D arrays
        clock = time.perf_counter
        out: np.ndarray | list[np.ndarray] | None
        for m in range(1, masks):
            h = m.bit_length() - 1
            prev = m & ~(1 << h)
            src = outputs[prev]
            row_size, row_enc, row_dec = self.row_sizes[h], self.row_encoders[h], self.row_decoders[h]
            if row_size is not None and isinstance(src, np.ndarray):
                t0 = clock()
                size[:, m] = row_size(src)
                out = None
                enc_step = np.full(n_rows, (clock() - t0) / max(n_rows, 1))
                dec_step = np.zeros(n_rows)
            elif row_enc is not None and isinstance(src, np.ndarray):
                t0 = clock()
                out = row_enc(src)
                t1 = clock()
                if self.decode_times and row_dec is not None:  # a row encoder has its row decoder
                    row_dec(out)
                size[:, m] = out.shape[1]
                enc_step = np.full(n_rows, (t1 - t0) / max(n_rows, 1))
                dec_step = np.full(n_rows, (clock() - t1) / max(n_rows, 1))
            else:
                encode, decode = self.encoders[h], self.decoders[h]
                parts: list[np.ndarray] = []
                out, enc_step, dec_step = parts, np.zeros(n_rows), np.zeros(n_rows)
                for k in range(n_rows):
                    t0 = clock()
                    o = encode(src[k])
                    t1 = clock()
                    if self.decode_times:
                        decode(o)
                        dec_step[k] = clock() - t1
                    out.append(o)
                    size[k, m] = o.size
                    enc_step[k] = t1 - t0
            outputs.append(out)
            enc_s[:, m] = enc_s[:, prev] + enc_step
            dec_s[:, m] = dec_s[:, prev] + dec_step
        if not self.decode_times:
            dec_s[:, 1:] = np.nan
        return size, enc_s, dec_s


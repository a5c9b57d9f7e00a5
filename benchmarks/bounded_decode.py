"""Cost of bounding every decompression of source data (issue 28, docs/reliability.md).

Encodes 256×256 float32 chunks of a smooth field (256 KiB each) with each numcodecs compressor
zopt bounds, then decodes them three ways, single-threaded, best of ``--repeat`` (the first two
alternately, so that a change in the machine's load hits both):

- ``numcodecs``: the codec's own ``decode`` (what zarr-python calls, unbounded);
- ``bounded``: ``zopt.codecs.bounded.decode_bounded`` with the chunk's size as the limit;
- ``zarr read``: reading the whole array through zarr-python with zopt's pipeline (bounded),
  for the codecs zarr has as v3 codecs.

Usage::

    python benchmarks/bounded_decode.py [--chunks 64] [--repeat 5]
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numcodecs
import numpy as np
import zarr

from zopt.codecs.bounded import decode_bounded

CODECS = {
    "zstd(3)": (numcodecs.Zstd(level=3), {"name": "zstd", "configuration": {"level": 3}}),
    "blosc(lz4, shuffle)": (numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE, typesize=4),
                            {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle",
                                                               "typesize": 4}}),
    "gzip(5)": (numcodecs.GZip(level=5), {"name": "gzip", "configuration": {"level": 5}}),
    "zlib(5)": (numcodecs.Zlib(level=5), None),
    "lz4": (numcodecs.LZ4(), None),
    "bz2(5)": (numcodecs.BZ2(level=5), None),
}


def best(fn, repeat: int) -> float:
    return best_pair(fn, None, repeat)[0]


def best_pair(a, b, repeat: int) -> tuple[float, float]:
    """Best times of ``a`` and ``b`` run alternately (this machine's load shifts between runs)."""
    ta, tb = [], []
    for _ in range(repeat):
        for fn, out in ((a, ta), (b, tb)):
            if fn is not None:
                t0 = time.perf_counter()
                fn()
                out.append(time.perf_counter() - t0)
    return min(ta), min(tb) if tb else 0.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", type=int, default=64, help="256x256 float32 chunks to decode")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    n = args.chunks
    y, x = np.mgrid[0 : 256 * n, 0:256].astype("f4")
    field = (np.sin(y / 40) * np.cos(x / 30) * 50 + np.random.default_rng(0).normal(size=y.shape) * 0.1).astype("f4")
    chunks = [np.ascontiguousarray(field[i * 256 : (i + 1) * 256]) for i in range(n)]
    mib = field.nbytes / 2**20
    print(f"{n} chunks of 256x256 float32 ({mib:.0f} MiB), best of {args.repeat}; MiB/s of decoded data")
    print(f"{'codec':22} {'numcodecs':>10} {'bounded':>10} {'ratio':>6} {'zarr read':>10}")
    for name, (nc, v3) in CODECS.items():
        enc = [np.frombuffer(bytes(nc.encode(c)), np.uint8) for c in chunks]
        limit = chunks[0].nbytes
        for e, c in zip(enc, chunks, strict=True):  # the same bytes either way
            assert np.array_equal(decode_bounded(nc, e, limit).view("f4").reshape(c.shape), c)
        t_nc, t_b = best_pair(lambda enc=enc, nc=nc: [nc.decode(e) for e in enc],
                              lambda enc=enc, nc=nc, limit=limit: [decode_bounded(nc, e, limit) for e in enc], args.repeat)
        read = ""
        if v3 is not None:
            with tempfile.TemporaryDirectory() as d:
                z = zarr.create_array(f"{d}/a.zarr", shape=field.shape, chunks=(256, 256), dtype="f4", compressors=[v3])
                z[...] = field
                r = zarr.open_array(f"{d}/a.zarr", mode="r")
                with zarr.config.set({"async.concurrency": 1, "threading.max_workers": 1}):
                    read = f"{mib / best(lambda r=r: r[...], args.repeat):10.0f}"
        print(f"{name:22} {mib / t_nc:10.0f} {mib / t_b:10.0f} {t_nc / t_b:6.2f} {read:>10}")


if __name__ == "__main__":
    main()

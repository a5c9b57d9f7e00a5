"""Cost of the per-inner-chunk crc32c (``recompress --checksum``) that makes torn reads during a
rewrite detectable (docs/reliability.md).

Writes the same field with the default chain ``[bytes, conditional([shuffle, zstd])]`` into
fixed-slot shards without and with ``crc32c`` at the end of the inner chain, then reads it back
whole and chunk by chunk through zarr-python. Prints wall times (best of ``--repeat``) and stored
bytes. Usage::

    python benchmarks/checksum.py [--mb 256] [--repeat 3]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import zarr


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=256, help="size of the float32 field in MB")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from zopt.engine import recompress

    rows = args.mb * 2**20 // 4 // 4096
    rng = np.random.default_rng(0)
    field = np.cumsum(rng.standard_normal((rows, 4096), dtype="f4"), axis=1)
    field = np.round(field, 2).astype("f4")
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src.zarr"
        zarr.open_group(src, mode="w").create_array("v", shape=field.shape, chunks=(512, 4096), dtype="f4",
                                                    compressors=None)[:] = field
        for checksum in (False, True):
            dst = Path(tmp) / f"d{int(checksum)}.zarr"
            writes, reads, partial = [], [], []
            for _ in range(args.repeat):
                shutil.rmtree(dst, ignore_errors=True)
                t = time.perf_counter()
                rep = recompress(src, dst, chunks=(256, 256), shards=(2048, 4096), layout="fixed-slot",
                                 checksum=checksum)
                writes.append(time.perf_counter() - t)
                z = zarr.open_array(dst, path="v")
                t = time.perf_counter()
                z[:]
                reads.append(time.perf_counter() - t)
                t = time.perf_counter()
                for y in range(0, min(rows, 2048), 256):
                    z[y : y + 256, :256]
                partial.append(time.perf_counter() - t)
            stored = rep.arrays[0].stored_after
            print(f"checksum={checksum!s:5}  write {min(writes):6.3f} s  read all {min(reads):6.3f} s  "
                  f"read 8 chunks {min(partial) * 1e3:6.1f} ms  stored {stored / 1e6:8.2f} MB")


if __name__ == "__main__":
    main()

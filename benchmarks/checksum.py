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
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import zarr

sys.path.insert(0, str(Path(__file__).parent))
from field2d import sine_field  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=256, help="size of the float32 field in MB")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from zopt import recompress

    field = sine_field(args.mb)
    _per_chunk(field[:256, :256], args.repeat)
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
                for y in range(0, min(field.shape[0], 2048), 256):
                    z[y : y + 256, :256]
                partial.append(time.perf_counter() - t)
            stored = rep.arrays[0].allocated_after  # fixed-slot files are sparse: disk blocks, not sizes
            print(f"checksum={checksum!s:5}  write {min(writes):6.3f} s  read all {min(reads):6.3f} s  "
                  f"read 8 chunks {min(partial) * 1e3:6.1f} ms  allocated {stored / 1e6:8.2f} MB")


def _per_chunk(chunk: np.ndarray, repeat: int) -> None:
    """Best-of timings of one 256×256 float32 inner chunk through the default chain, without and
    with crc32c (encode with compress_if_smaller, decode through zarr's pipeline), and the
    crc32c throughput alone. Best-of: robust to a loaded machine."""
    import google_crc32c
    from zarr.codecs import BytesCodec, Crc32cCodec
    from zarr.core.dtype import Float32

    from zopt.codecs.chain import ChunkEncoder, chunk_spec
    from zopt.codecs.conditional import ConditionalCodec

    spec = chunk_spec(chunk.shape, Float32(), 0.0)
    cond = ConditionalCodec(codecs=[{"name": "shuffle", "configuration": {"element_size": 4}},
                                    {"name": "zstd", "configuration": {"level": 3}}])
    for extra in ([], [Crc32cCodec()]):
        enc = ChunkEncoder([BytesCodec(), cond, *extra], spec).with_decision("compress_if_smaller")
        best = min(_timed(lambda enc=enc: enc.encode(chunk)) for _ in range(20 * repeat))
        size = enc.encode(chunk).data.size
        print(f"inner chain {'+ crc32c' if extra else '        '}  encode {best * 1e3:6.3f} ms/chunk  {size} bytes")
    buf = np.random.default_rng(1).integers(0, 256, 2**24, dtype=np.uint8).tobytes()
    best = min(_timed(lambda: google_crc32c.value(buf)) for _ in range(5 * repeat))
    print(f"crc32c alone: {len(buf) / best / 1e9:.1f} GB/s ({chunk.nbytes / (len(buf) / best) * 1e3:.3f} ms per 256 KiB chunk)")


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


if __name__ == "__main__":
    main()

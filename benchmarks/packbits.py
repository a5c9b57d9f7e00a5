"""Benchmark: packbits encode and decode through zarr — zopt next to the zarrs pipeline.

    python benchmarks/packbits.py [--mib 256] [--chunk-mib 1] [--workdir bench-out] [--repeat 3]

For each case an array of ``--mib`` MiB of logical data (in memory: one byte per bool/sub-byte
element) is written (``z[:] = data``) and read (``z[:]``) through zarr-python with
``packbits`` as the serializer, no compressor, chunks of ``--chunk-mib`` MiB, on a LocalStore
(page cache), once with zopt's codec in zarr-python's pipeline and once with the zarrs Rust
pipeline (``codec_pipeline.path = zarrs.ZarrsCodecPipeline``), same data, same run. MB/s counts
logical bytes (10^6); the best of ``--repeat`` runs is shown. The last case stores uint8 with the
``bytes`` codec: no packing, the cost of zarr-python's (or zarrs's) array path and store alone. zarrs falling back to zarr-python
(it warns) is reported as "fallback" instead of a number.
"""

from __future__ import annotations

import argparse
import shutil
import time
import warnings
from pathlib import Path

import numpy as np

CASES = [
    ("bool", "bool", {}),
    ("uint4", "uint4", {}),
    ("int4", "int4", {}),
    ("int16, bits 2..13 (12 bits)", "int16", {"first_bit": 2, "last_bit": 13}),
    ("float32, full width", "float32", {}),
    ("complex_float4_e2m1fn", "complex_float4_e2m1fn", {}),
    # reference: no packing at all, what zarr-python's array path and the store cost by themselves
    ("uint8, bytes codec (reference)", "uint8", {"serializer": "bytes"}),
]


def make(dtype: str, n: int, rng: np.random.Generator) -> np.ndarray:
    import ml_dtypes

    if dtype == "bool":
        return rng.integers(0, 2, n, dtype=np.uint8).astype(bool)
    if dtype in ("uint4", "int4"):
        lo, hi = (0, 16) if dtype == "uint4" else (-8, 8)
        return rng.integers(lo, hi, n, dtype=np.int8).astype(getattr(ml_dtypes, dtype))
    if dtype == "complex_float4_e2m1fn":
        from zopt.dtypes.complex import pack_complex

        codes = rng.integers(0, 16, (2, n), dtype=np.uint8)
        return pack_complex(codes[0].view(ml_dtypes.float4_e2m1fn), codes[1].view(ml_dtypes.float4_e2m1fn), dtype)
    if dtype == "uint8":
        return rng.integers(0, 256, n, dtype=np.uint8)
    if dtype == "int16":
        return (rng.integers(-2048, 2048, n, dtype=np.int16) << 2).astype(np.int16)
    return rng.standard_normal(n, dtype=np.float32)


def run(pipeline: str, path: Path, data: np.ndarray, dtype: str, config: dict, chunk: int, repeat: int):
    import zarr

    from zopt.codecs.packbits import PackBitsCodec

    best_w = best_r = float("inf")
    with zarr.config.set({"codec_pipeline.path": pipeline}), warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*unsupported by ZarrsCodecPipeline")
        for _ in range(repeat):
            shutil.rmtree(path, ignore_errors=True)
            try:
                serializer = "auto" if config.get("serializer") == "bytes" else PackBitsCodec(**config)
                z = zarr.create_array(path, shape=data.shape, chunks=(chunk,), dtype=dtype, compressors=None,
                                      serializer=serializer, fill_value=None)
                t = time.perf_counter()
                z[:] = data
                best_w = min(best_w, time.perf_counter() - t)
                t = time.perf_counter()
                back = zarr.open_array(path)[:]
                best_r = min(best_r, time.perf_counter() - t)
            except UserWarning:
                return None
    assert back.shape == data.shape
    return best_w, best_r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--chunk-mib", type=float, default=1)
    ap.add_argument("--workdir", default="bench-out")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    print(f"\npackbits through zarr: {args.mib} MiB logical per case, {args.chunk_mib} MiB chunks, best of {args.repeat}\n")
    print(f"{'case':<30} {'zopt write':>11} {'zopt read':>10} {'zarrs write':>12} {'zarrs read':>11} {'× write':>8} {'× read':>7}")
    for label, dtype, config in CASES:
        itemsize = {"float32": 4, "int16": 2, "complex_float4_e2m1fn": 2}.get(dtype, 1)
        n = args.mib * 2**20 // itemsize
        chunk = int(args.chunk_mib * 2**20) // itemsize
        data = make(dtype, n, rng)
        logical = n * itemsize / 1e6
        ours = run("zopt.codecs.pipeline.ChunkIndexCodecPipeline", work / "pb-zopt.zarr", data, dtype, config, chunk, args.repeat)
        theirs = run("zarrs.ZarrsCodecPipeline", work / "pb-zarrs.zarr", data, dtype, config, chunk, args.repeat)
        ow, orr = logical / ours[0], logical / ours[1]
        if theirs is None:
            print(f"{label:<30} {ow:>11.0f} {orr:>10.0f} {'fallback':>12} {'fallback':>11} {'—':>8} {'—':>7}")
            continue
        tw, tr = logical / theirs[0], logical / theirs[1]
        print(f"{label:<30} {ow:>11.0f} {orr:>10.0f} {tw:>12.0f} {tr:>11.0f} {ow / tw:>7.1f}× {orr / tr:>6.1f}×")
    shutil.rmtree(work / "pb-zopt.zarr", ignore_errors=True)
    shutil.rmtree(work / "pb-zarrs.zarr", ignore_errors=True)
    print("\n(MB/s of logical data; × = zopt / zarrs)")


if __name__ == "__main__":
    main()

"""Benchmark: zopt's codecs through every codec pipeline the installed zarr-python ships.

    python benchmarks/pipelines.py [--mib 256] [--repeat 3] [--workdir bench-out]

Run it once per CI leg (zarr 3.1 on Python 3.11, zarr 3.4 on Python 3.13): each run prints the
installed zarr version and one row per (pipeline, layout, chain), so the two legs' tables sit
side by side in docs/benchmarks.md.

- pipelines: zopt's ``ChunkIndexCodecPipeline`` (the default with zopt installed), zarr's
  ``BatchedCodecPipeline`` and, on zarr >= 3.3, zarr's ``FusedCodecPipeline`` (which runs
  sync-capable chains through zarr's ``ChunkTransform``);
- layouts: 1 MiB chunks, and 4 MiB shards of 256 KiB inner chunks;
- chains: ``bytes`` + ``conditional([shuffle, zstd(3)])`` deciding ``compress_if_smaller`` per
  chunk (zopt's default), and ``bytes`` + ``shuffle`` + ``zstd(3)`` (no decision).

Each cell writes the whole array with ``z[:] = a`` into a ``LocalStore`` and reads it back with
``z[:]``, median of ``--repeat`` runs; MB/s counts logical (uncompressed) bytes per second of
wall time, MB/CPU-s per second of process CPU time (user + system, all threads): the second is
what a busy machine cannot distort, the first includes what threads gain in parallel. Every read is
checked bit for bit against the data written. The data: a smooth field with a noise band and a
constant block (chunks that want different masks).
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import time
from pathlib import Path

import numpy as np
import zarr

import zopt  # noqa: F401  (registers codecs and pipelines)
from zopt.codecs.conditional import ConditionalCodec
from zopt.codecs.shuffle import ShuffleCodec
from zopt.compat import zarr_compat as compat

PIPELINES = {
    "zopt ChunkIndex": "zopt.codecs.pipeline.ChunkIndexCodecPipeline",
    "zarr Batched": "zarr.core.codec_pipeline.BatchedCodecPipeline",
}
if compat.HAS_FUSED_PIPELINE:
    PIPELINES["zarr Fused"] = "zarr.core.codec_pipeline.FusedCodecPipeline"


def make_data(mib: int) -> np.ndarray:
    cols = 1024
    rows = mib * 2**20 // 4 // cols
    rng = np.random.default_rng(0)
    y = np.linspace(0, 30, rows, dtype="f4")[:, None]
    x = np.linspace(0, 40, cols, dtype="f4")[None]
    a = np.round(np.sin(x) * np.cos(y) * 20 + 15, 3).astype("f4")
    a[rows // 4 : rows // 2, : cols // 4] = rng.standard_normal((rows // 2 - rows // 4, cols // 4), dtype="f4")
    a[-rows // 8 :, -cols // 8 :] = -999.0
    return a


def chains() -> dict[str, list]:
    return {
        "conditional": [ConditionalCodec(codecs=[ShuffleCodec(element_size=4), zarr.codecs.ZstdCodec(level=3)],
                                         decision="compress_if_smaller")],
        "shuffle+zstd": [ShuffleCodec(element_size=4), zarr.codecs.ZstdCodec(level=3)],
    }


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_cell(path: Path, a: np.ndarray, pipeline: str, sharded: bool, compressors: list) -> tuple[float, ...]:
    """(write s, read s, write CPU s, read CPU s, stored bytes) of one write + read."""
    shutil.rmtree(path, ignore_errors=True)
    with zarr.config.set({"codec_pipeline.path": pipeline}):
        chunks = (256, 256) if sharded else (256, 1024)
        z = zarr.create_array(str(path), shape=a.shape, chunks=chunks, shards=(1024, 1024) if sharded else None,
                              dtype="f4", fill_value=0, compressors=compressors)
        c0, t0 = _cpu(), time.perf_counter()
        z[:] = a
        c1, t1 = _cpu(), time.perf_counter()
        b = zarr.open_array(str(path), mode="r")[:]
        c2, t2 = _cpu(), time.perf_counter()
    if b.tobytes() != a.tobytes():
        raise AssertionError(f"{pipeline}: read-back differs")
    stored = sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and p.name != "zarr.json")
    return t1 - t0, t2 - t1, c1 - c0, c2 - c1, stored


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", default="bench-out")
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    a = make_data(args.mib)
    mb = a.nbytes / 1e6
    print(f"zarr-python {zarr.__version__}, numcodecs {__import__('numcodecs').__version__}, "
          f"numpy {np.__version__}; {a.nbytes / 2**20:.0f} MiB float32, median of {args.repeat}")
    print("| pipeline | layout | chain | write MB/s | read MB/s | write MB/CPU-s | read MB/CPU-s | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for label, pipeline in PIPELINES.items():
        for sharded in (False, True):
            for chain_name, compressors in chains().items():
                runs = [run_cell(work / "pipelines.zarr", a, pipeline, sharded, compressors) for _ in range(args.repeat)]
                w, r, cw, cr = (statistics.median(run[i] for run in runs) for i in range(4))
                ratio = a.nbytes / runs[0][4]
                layout = "shards 4 MiB / 256 KiB" if sharded else "chunks 1 MiB"
                print(f"| {label} | {layout} | {chain_name} | {mb / w:.0f} | {mb / r:.0f} | {mb / cw:.0f} | {mb / cr:.0f} "
                      f"| {ratio:.2f} |", flush=True)
    shutil.rmtree(work / "pipelines.zarr", ignore_errors=True)


if __name__ == "__main__":
    main()

"""Benchmark: re-shard a store of many small chunk files without recompressing (issue 34 G5).

    python benchmarks/reshard.py [--size-mib 256] [--repeat 3] [--workdir bench-reshard]

The job: a float32 array ``(N, 512, 512)`` (``--size-mib`` sets N), a smooth field with noise,
stored in chunk files 64³ ``[bytes, zstd(3)]``; rewritten into shards 256³ with inner chunks 64³
and the same chain ``[bytes, zstd(3)]``. Runners, each in its own subprocess (peak RSS from
``ru_maxrss`` belongs to that run alone), repetitions interleaved, medians reported:

- ``zopt-copy``: ``zopt.recompress(src, dst, codecs=[bytes, zstd 3], chunks=64, shards=256)``:
  the inner chain and chunks equal the source's, so the encoded chunks are copied
  (``zopt.store.reshard``, each checked by its size and a decode of its zstd frames);
- ``zopt-recompress``: the same call with the copy turned off (``choose_copies`` replaced in the
  subprocess): every chunk decoded and encoded again with the same chain;
- ``zarr``: zarr-python, a loop over shards ``dst[shard] = src[shard]`` into a sharded array
  with the same codecs.

Every output is compared with the source value for value (not timed). MB/s counts logical
(uncompressed) bytes over the wall time of the call, and per CPU-second (user + system) of the
call's process: on a shared machine CPU time, unlike wall time, does not depend on what else
competes for the cores. Peak memory is the process's ``VmHWM``. Imports happen before the clock
starts; every runner pays its first job's setup in its fresh process (Dask's pool, zarr's
pipeline, zopt's journal), the same for all. The copy decodes every chunk it copies (its check):
on this data, which zstd barely compresses, that decode is most of the copy's cost.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

RUNNERS = ("zopt-copy", "zopt-recompress", "zarr")
LABELS = {
    "zopt-copy": "zopt, same chain and inner chunks: encoded chunks copied",
    "zopt-recompress": "zopt, same chain, copy turned off: decoded and encoded again",
    "zarr": "zarr-python, a loop over shards dst[s] = src[s]",
}
CHUNK, SHARD = 64, 256
ZOPT_IMPORTS = ("dask", "dask.threaded", "dask.delayed", "zopt.planning.optimizer", "zopt.compat.alloc",
                "zopt.store.reshard", "numcodecs")
CHAIN = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 3, "checksum": False}}]


def make_source(path: Path, rows: int) -> None:
    import numpy as np
    import zarr
    from zarr.codecs import ZstdCodec

    a = zarr.create_array(path, shape=(rows, 512, 512), chunks=(CHUNK,) * 3, dtype="f4", fill_value=0,
                          compressors=[ZstdCodec(level=3)])
    rng = np.random.default_rng(0)
    y, x = np.meshgrid(np.linspace(0, 6, 512), np.linspace(0, 6, 512), indexing="ij")
    for i in range(0, rows, CHUNK):
        z = np.arange(i, min(i + CHUNK, rows))[:, None, None] / 50
        a[i:i + CHUNK] = (np.sin(x + z) * np.cos(y - z) + rng.normal(0, 0.01, (len(z), 512, 512))).astype("f4")


def run_one(name: str, src: str, dst: str) -> dict:
    import importlib

    import zarr

    import zopt.job.api
    import zopt.job.prepare

    if name.startswith("zopt"):  # what a job imports at first use, imported before the clock as the peer's are
        for module in ZOPT_IMPORTS:
            importlib.import_module(module)

    if name == "zopt-recompress":
        zopt.job.prepare.choose_copies = lambda *a, **k: []
    t, cpu = time.perf_counter(), _cpu()
    copied = None
    if name.startswith("zopt"):
        report = zopt.job.api.recompress(src, dst, codecs=CHAIN, chunks=(CHUNK,) * 3, shards=(SHARD,) * 3)
        copied = report.arrays[0].copied
    else:
        from zarr.codecs import ZstdCodec

        s = zarr.open_array(src, mode="r")
        d = zarr.create_array(dst, shape=s.shape, chunks=(CHUNK,) * 3, shards=(SHARD,) * 3, dtype=s.dtype,
                              fill_value=0, compressors=[ZstdCodec(level=3)])
        for i in range(0, s.shape[0], SHARD):
            for j in range(0, s.shape[1], SHARD):
                for k in range(0, s.shape[2], SHARD):
                    d[i:i + SHARD, j:j + SHARD, k:k + SHARD] = s[i:i + SHARD, j:j + SHARD, k:k + SHARD]
    seconds, cpu = time.perf_counter() - t, _cpu() - cpu
    return {"seconds": seconds, "cpu": cpu, "copied": copied, "peak_mib": _peak_mib()}


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _peak_mib() -> float:
    """This process's peak resident memory (``VmHWM``: unlike ``ru_maxrss`` not inherited across
    ``exec`` from the parent, which holds the source it generated)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def check(src: Path, dst: Path) -> None:
    import numpy as np
    import zarr

    s, d = zarr.open_array(src, mode="r"), zarr.open_array(dst, mode="r")
    for i in range(0, s.shape[0], SHARD):
        if not np.array_equal(s[i:i + SHARD], d[i:i + SHARD]):
            raise SystemExit(f"{dst}: values differ from the source in rows {i}:{i + SHARD}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", default="bench-reshard")
    ap.add_argument("--run", help=argparse.SUPPRESS)
    ap.add_argument("--src", help=argparse.SUPPRESS)
    ap.add_argument("--dst", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        print(json.dumps(run_one(args.run, args.src, args.dst)))
        return
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    rows = max(CHUNK, args.size_mib * 2**20 // (512 * 512 * 4) // CHUNK * CHUNK)
    src = work / "src.zarr"
    if not src.exists() or json.loads((src / "zarr.json").read_text())["shape"][0] != rows:
        shutil.rmtree(src, ignore_errors=True)
        make_source(src, rows)
    logical = rows * 512 * 512 * 4
    results: dict[str, list[dict]] = {r: [] for r in RUNNERS}
    for _ in range(args.repeat):
        for name in RUNNERS:
            dst = work / f"{name}.zarr"
            shutil.rmtree(dst, ignore_errors=True)
            out = subprocess.run([sys.executable, __file__, "--run", name, "--src", str(src), "--dst", str(dst)],
                                 capture_output=True, text=True, check=True)
            results[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(name, results[name][-1], file=sys.stderr)
            check(src, dst)
            shutil.rmtree(dst)
    base = statistics.median(logical / 1e6 / r["seconds"] for r in results["zopt-recompress"])
    print(f"{logical / 2**20:.0f} MiB float32 {(rows, 512, 512)}, chunk files {CHUNK}³ [bytes, zstd 3] → shards "
          f"{SHARD}³, same chain; median of {args.repeat}\n")
    base_cpu = statistics.median(logical / 1e6 / r["cpu"] for r in results["zopt-recompress"])
    print("| runner | MB/s | × zopt recompress | MB per CPU-s | × zopt recompress | peak RSS MiB | copied |")
    print("|---|---|---|---|---|---|---|")
    for name in RUNNERS:
        mbs = statistics.median(logical / 1e6 / r["seconds"] for r in results[name])
        per_cpu = statistics.median(logical / 1e6 / r["cpu"] for r in results[name])
        peak = statistics.median(r["peak_mib"] for r in results[name])
        copied = {r["copied"] for r in results[name]}
        n_copied = sum(bool(r["copied"]) for r in results[name])
        print(f"| {LABELS[name]} | {mbs:.0f} | {mbs / base:.2f} | {per_cpu:.0f} | {per_cpu / base_cpu:.2f} | {peak:.0f} | "
              f"{'' if None in copied else f'{n_copied} of {len(results[name])}'} |")


if __name__ == "__main__":
    main()

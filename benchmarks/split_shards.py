"""Benchmark: a job with fewer shards than its workers, whole-shard tasks against split shards (issue 34, G4).

    python benchmarks/split_shards.py [--shards 1] [--workers 2] [--repeat 3] [--workdir bench-out/split]

A float32 array of ``--shards`` shards of 256³ (64 MiB each; inner chunks 64³, source chunks 64³
``[bytes, zstd 3]``) rewritten with ``[bytes, shuffle, zstd 3]`` on Dask threads (``num_workers``
``--workers``), once with one task per shard (``zopt.job.work.TASKS_PER_WORKER = 0``) and once
as the plan of work chooses (split below the shard). Each run in its own process; printed per
mode: wall seconds, cores busy (process CPU / wall), peak RSS (and the job's part of it: the peak
less the RSS before the job, against G4's bound of 2 shards + 64 MiB per worker), the tasks, and whether the shard
files are byte-identical between the modes (the best of ``--repeat`` runs by wall time).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

PLAIN = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "shuffle"},
         {"name": "zstd", "configuration": {"level": 3}}]


def _status_mib(field: str) -> float:
    """``field`` of /proc/self/status in MiB (Linux). VmHWM, not ``ru_maxrss``: the latter is kept
    across ``exec`` from the forked parent, whose source arrays would count."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def child(src: str, dst: str, workers: int, mode: str) -> None:
    import dask

    from zopt import recompress
    from zopt.job import work

    if mode == "whole":
        work.TASKS_PER_WORKER = 0
    kw = dict(chunks=(64,) * 3, shards=(256,) * 3, codecs=json.dumps(PLAIN), overwrite=True)
    base_mib = _status_mib("VmHWM")  # after the imports, before the job
    with dask.config.set(num_workers=workers):
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        report = recompress(src, dst, **kw)
        t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    print(json.dumps({"seconds": t1 - t0, "busy": cpu / (t1 - t0), "peak_mib": _status_mib("VmHWM"), "base_mib": base_mib,
                      "tasks": report.arrays[0].tasks, "units": report.arrays[0].units}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", default="bench-out/split")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]), args.child[3])
        return
    import numpy as np
    import zarr
    from zarr.codecs import ZstdCodec

    work = Path(args.workdir)
    src = work / f"src-{args.shards}.zarr"
    if not (src / "zarr.json").exists():
        shape = (256 * args.shards, 256, 256)
        a = zarr.create_array(str(src), shape=shape, chunks=(64,) * 3, dtype="f4", compressors=[ZstdCodec(level=3)])
        rng = np.random.default_rng(0)
        for z in range(0, shape[0], 64):
            a[z : z + 64] = np.cumsum(rng.normal(0, 1, (64, 256, 256)), axis=2).astype("f4")
    rows, files = {}, {}
    for mode in ("whole", "split"):
        runs = []
        for _ in range(args.repeat):
            dst = work / f"dst-{mode}.zarr"
            p = subprocess.run([sys.executable, __file__, "--child", str(src), str(dst), str(args.workers), mode],
                               capture_output=True, text=True, check=True)
            runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
        rows[mode] = min(runs, key=lambda r: r["seconds"])
        files[mode] = {str(f.relative_to(dst)): f.read_bytes() for f in sorted(dst.rglob("c/**/*")) if f.is_file()}
    print(f"{args.shards} shard(s) of 256³ float32 (64 MiB), inner 64³, [bytes, shuffle, zstd 3], Dask threads "
          f"num_workers={args.workers}; best of {args.repeat} by wall time")
    # G4's bound: per worker at most 2 shards + 64 MiB above what the process held before the job
    bound = args.workers * (2 * 64 + 64)
    print("| mode | tasks | wall s | cores busy | peak RSS MiB | before the job MiB | job's peak MiB | G4 bound MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for mode, r in rows.items():
        print(f"| {mode} | {r['tasks']} | {r['seconds']:.2f} | {r['busy']:.2f} | {r['peak_mib']:.0f} | {r['base_mib']:.0f} "
              f"| {r['peak_mib'] - r['base_mib']:.0f} | {bound} |")
    print(f"shard files byte-identical: {files['whole'] == files['split']}")


if __name__ == "__main__":
    main()

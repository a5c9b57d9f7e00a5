"""Graph construction (and, optionally, submission) at 1e4 … 1e6 shards (issue 18 item 4).

Each size runs in a fresh interpreter: a metadata-only source (``zarr.create_array``, no chunk
written) of N shards is planned with ``recompress(..., dry_run=True)``, which builds the whole
Dask graph (one task per shard) and the target metadata in memory, and writes nothing. Reported:
wall seconds, client peak RSS (MiB, ``ru_maxrss``) and its growth over the interpreter's base.
With ``--submit``, the same graph is also run on a ``LocalCluster`` (2 worker processes): every
source chunk is the fill value, so a task reads nothing and writes nothing, and the time is the
scheduler's overhead per task.

    python benchmarks/graph_scale.py 10000 100000 1000000 [--submit 10000]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile

CHILD = r"""
import json, os, resource, sys, time, tempfile
import zarr
n, submit = int(sys.argv[1]), sys.argv[2] == "1"
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with tempfile.TemporaryDirectory() as d:
    # N shards of 2 inner chunks of 16x64 float32 (4 KiB): shape (32 N, 64)
    zarr.create_array(os.path.join(d, "src.zarr"), shape=(32 * n, 64), chunks=(1024, 64), dtype="f4")
    from zopt import recompress
    import_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    rep = recompress(os.path.join(d, "src.zarr"), os.path.join(d, "dst.zarr"), chunks=(16, 64), shards=(32, 64),
                     dry_run=True)
    out = {"shards": rep.arrays[0].units, "tasks": rep.arrays[0].tasks, "dry_run_s": time.perf_counter() - t,
           "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "rss_growth_mib": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - import_rss) / 1024}
    if submit:
        import distributed
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cl:
            t = time.perf_counter()
            recompress(os.path.join(d, "src.zarr"), os.path.join(d, "dst.zarr"), chunks=(16, 64), shards=(32, 64),
                       scheduler=cl.scheduler_address)
            out["cluster_run_s"] = time.perf_counter() - t
            out["rss_after_run_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


def main(argv: list[str]) -> None:
    submit = set()
    sizes = []
    args = iter(argv)
    for a in args:
        if a == "--submit":
            submit.add(int(next(args)))
        else:
            sizes.append(int(float(a)))
    sizes = sorted(set(sizes) | submit) or [10_000, 100_000, 1_000_000]
    print(f"{'shards':>9} {'tasks':>9} {'dry run s':>10} {'client RSS MiB':>15} {'growth MiB':>11} {'cluster run s':>14}")
    with tempfile.TemporaryDirectory():
        for n in sizes:
            out = subprocess.run([sys.executable, "-c", CHILD, str(n), "1" if n in submit else "0"],
                                 capture_output=True, text=True, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"{r['shards']:>9} {r['tasks']:>9} {r['dry_run_s']:>10.1f} {r['rss_mib']:>15.0f} "
                  f"{r['rss_growth_mib']:>11.0f} {r.get('cluster_run_s', float('nan')):>14.1f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

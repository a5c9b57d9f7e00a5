"""Peak RSS of a recompress job against its projected bound (issue 18 item 6).

Writes a source of SIZE GiB (a Zarr v3 group, one float32 array of smooth values plus noise,
stored raw in 16 MiB chunks), then, in a fresh interpreter, recompresses it with the default
chain on Dask's threaded scheduler with W workers and reports:

- base: the interpreter's RSS after importing zopt and opening the source (MiB);
- projected: ``RecompressReport.arrays[0].projected_task_bytes`` (one task's peak, MiB);
- bound: base + W x projected;
- peak: the process's peak RSS (``ru_maxrss``) over the whole job.

    python benchmarks/memory.py [SIZE_GIB=1] [WORKERS=2]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, resource, sys
import dask
from zopt import recompress
from zopt.io.sources import source_variables
src, dst, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
source_variables(src)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
with dask.config.set(num_workers=workers):
    rep = recompress(src, dst, scheduler="threads")
a = rep.arrays[0]
print(json.dumps({"base": base, "projected": a.projected_task_bytes / 2**20, "units": a.units,
                  "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "seconds": rep.seconds,
                  "logical": rep.logical_bytes / 2**20, "stored": rep.stored_after / 2**20}))
"""


def make_source(path: str, gib: float) -> None:
    import numpy as np
    import zarr

    rows = int(gib * 2**30 / (4 * 4096))
    g = zarr.create_group(path)
    a = g.create_array("v", shape=(rows, 4096), chunks=(1024, 4096), dtype="f4", compressors=None,
                       dimension_names=("y", "x"))
    rng = np.random.default_rng(0)
    x = np.linspace(0, 20, 4096, dtype="f4")
    for start in range(0, rows, 1024):
        n = min(1024, rows - start)
        y = np.arange(start, start + n, dtype="f4")[:, None] / 500
        a[start:start + n] = np.sin(x + y) * 100 + rng.normal(size=(n, 4096)).astype("f4")


def main(gib: float = 1.0, workers: int = 2) -> None:
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as d:
        src, dst = os.path.join(d, "src.zarr"), os.path.join(d, "dst.zarr")
        make_source(src, gib)
        out = subprocess.run([sys.executable, "-c", CHILD, src, dst, str(workers)], capture_output=True, text=True,
                             check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
    bound = r["base"] + workers * r["projected"]
    print(f"{gib:g} GiB, {r['units']} shards, {workers} workers: base {r['base']:.0f} MiB, projected/task "
          f"{r['projected']:.0f} MiB, bound {bound:.0f} MiB, peak RSS {r['peak']:.0f} MiB "
          f"({'within' if r['peak'] <= bound else 'OVER'} the bound), {r['seconds']:.1f} s, "
          f"{r['logical']:.0f} -> {r['stored']:.0f} MiB")


if __name__ == "__main__":
    main(*(float(a) if i == 0 else int(a) for i, a in enumerate(sys.argv[1:])))

"""Benchmark: every preset on the README's file — stored size, write speed and readers.

    python benchmarks/presets.py [--workdir bench-presets] [--repeat 5]

Recompresses the README's file (``A1B_north_america.nc`` of ``iris-sample-data``: 240 years of
annual air temperature 1860–2099, 1.7 MiB) with the README's chunks and shards (``time=12``,
``time=120``) once per preset that ``zopt presets`` lists, plus five variants a user picks by
option (``--readers zopt`` on the default menu; ``fast`` with ``--decision never``, the
"write fast, compress later" ingest; ``--menu numcodecs-shuffle-zstd-3``, a fast chain plain
zarr-python reads; ``--budget 0.1``, speed first within the default menu; ``--readers
tensorstore``, core codecs only), and prints one Markdown table:

- ``stored``: the bytes the arrays' chunk and shard files take (``RecompressReport.stored_after``,
  what the summary's ``after`` column shows);
- ``vs zarr default``: that size over what zarr's own default codecs store on the same chunks
  and shards (``zopt.planning.baseline.zarr_default_bytes``, what ``--vs-default`` shows);
- ``write MB/s``: logical (uncompressed) bytes over the wall time of ``zopt.recompress``, best of
  ``--repeat`` rounds (each round runs every row once, so a passing load hits the rows alike);
  on a 1.7 MiB file this is dominated by the job's fixed costs (reading the netCDF file, the
  menu's trial encodings, Dask), so compare the rows, not the absolute values;
- ``speed × default``: the ``default`` row's best time over this row's (above 1: faster);
- ``readers``: the report's reader line (who opens the store without zopt).
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
import warnings
from pathlib import Path

#: (row label, options of zopt.recompress) beyond the presets themselves
VARIANTS = [
    ("default --readers zopt", {"preset": "default", "readers": "zopt"}),
    ("fast --decision never", {"preset": "fast", "decision": "never"}),
    ("--menu numcodecs-shuffle-zstd-3", {"menu": "numcodecs-shuffle-zstd-3"}),
    ("--budget 0.1", {"budget": "0.1"}),
    ("--readers tensorstore", {"readers": "tensorstore"}),
]


def _kib(n: float) -> str:
    return f"{n / 2**10:,.1f} KiB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", default="bench-presets")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    import iris_sample_data

    from zopt import recompress
    from zopt.planning.baseline import zarr_default_bytes
    from zopt.planning.presets import presets

    warnings.filterwarnings("ignore")
    src = os.path.join(iris_sample_data.path, "A1B_north_america.nc")
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    made = []  # only the stores this script writes are removed at the end
    rows = [(p.name, {"preset": p.name}) for p in presets()] + VARIANTS
    best = dict.fromkeys([label for label, _ in rows], float("inf"))
    reports = {}
    for _ in range(args.repeat):  # rounds over every row, so a load that comes and goes hits all rows alike
        for label, options in rows:
            dst = work / (label.replace(" ", "_").replace("-", "").replace(".", "") + ".zarr")
            if dst not in made:
                made.append(dst)
            started = time.perf_counter()
            reports[label] = recompress(src, dst, chunks="time=12", shards="time=120", overwrite=True, **options)
            best[label] = min(best[label], time.perf_counter() - started)
    first = reports[rows[0][0]]
    baseline = sum(zarr_default_bytes(made[0], [a.name for a in first.arrays]).values())
    out = []
    for label, _ in rows:
        report = reports[label]
        mb_s = report.logical_bytes / best[label] / 1e6
        readers = (report.readers or "").removeprefix("readers: ")
        out.append((label, report.stored_after, report.stored_after / baseline, mb_s, best[rows[0][0]] / best[label],
                    readers))
    print(f"source: {src} ({_kib(os.path.getsize(src))}); zarr default codecs: {_kib(baseline)}")
    print()
    print("| preset | stored | vs zarr default | write MB/s | speed × default | readers |")
    print("|---|---:|---:|---:|---:|---|")
    for label, stored, ratio, mb_s, speed, readers in out:
        print(f"| `{label}` | {_kib(stored)} | {ratio:.0%} | {mb_s:.1f} | {speed:.2f} | {readers} |")
    for dst in made:
        shutil.rmtree(dst, ignore_errors=True)


if __name__ == "__main__":
    main()

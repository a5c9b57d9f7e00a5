"""Benchmark: recompress float32 into shards — zopt against zarr-python, Dask, zarrs and tensorstore.

    python benchmarks/recompress.py [--size-gib 1] [--repeat 3] [--workdir bench-out]
                                    [--python313 /path/to/python3.13] [--runners a,b,...]

The job (issue 19): a float32 array of ``(512, 512, 1024)`` per GiB (``--size-gib`` scales the
number of 256³ shards; 0.25 is the smallest), stored in source chunks 64³ ``[bytes, zstd(3)]``,
rewritten into shards 256³ with inner chunks 64³ and the index at the end. Two variants:
``smooth`` (a smooth field with noise) and ``mixed`` (a quarter of the shards random bits, a
quarter constant, half smooth).

Runners, each in its own subprocess (peak RSS ``ru_maxrss``, CPU times and minor page faults
from ``getrusage`` belong to that run alone), repetitions interleaved, medians reported:

- ``zarr``: zarr-python, a loop over shards ``dst[shard] = src[shard]``, ``[shuffle, zstd3]``;
- ``dask``: ``dask.array.from_zarr(src, chunks=shard).to_zarr(dst)``, 2 threads, same codecs;
- ``zarrs``: the zarr-python loop with the zarrs pipeline (Rust, ``codec_pipeline.strict``);
- ``tensorstore``: a loop over shards, ``blosc(zstd, clevel 2 = zstd level 3, shuffle)``
  (tensorstore has no standalone shuffle);
- ``zopt-plain``: ``zopt.job.recompress`` with ``[bytes, shuffle, zstd3]``;
- ``zopt-default``: ``recompress`` with no chain: the chain chosen from the codec menu by trial
  encodings (issue 26, ``zopt.planning.optimizer``; the trials are part of the time);
- ``zopt-classic``: ``recompress --menu classic``: ``conditional([shuffle, zstd3])``,
  ``compress_if_smaller``, the default before issue 26;
- ``zopt-fixed-slot``: the default chain, ``layout="fixed-slot"``;
- ``zopt-default-py313``: ``zopt-default`` under ``--python313`` (zarr 3.4 there), if given;
- ``ceiling``: the composed numcodecs loop in 2 processes — zstd-decompress each source chunk,
  shuffle, zstd(3)-compress — on the source chunk files read into memory first (no I/O): the
  realistic ceiling of this machine for the job with the chain ``[shuffle, zstd3]`` (zopt-plain,
  zopt-classic);
- ``ceiling-default``: the same loop with the chain the menu chooses on this field,
  ``numcodecs.pcodec`` level 8 instead of shuffle + zstd(3): the ceiling for zopt-default,
  zopt-fixed-slot and zopt-default-py313. Their "× ceiling" column is to this one.
- ``ceiling-io``, ``ceiling-io-default``: the ceiling that does the job's I/O inside the clock
  (zopt-plain and zopt-default against it: the "× ceiling I/O" column): 2 processes, each taking
  every other shard of the target, reading that shard's 64 source chunk files, zstd-decoding each,
  encoding it (shuffle + zstd 3, or pcodec 8) and writing one file per shard laid out as
  ``sharding_indexed`` does (the inner chunks, then the index of ``(offset, nbytes)`` uint64 pairs
  and its crc32c at the end), with the array's ``zarr.json``: no Dask, no checks, no temporary
  files. Its output is a store zarr-python reads (and the driver verifies, outside the clock);
- ``zarrs-dask``, ``zarrs-dask-default``: zarr-python with the zarrs pipeline
  (``codec_pipeline.path = zarrs.ZarrsCodecPipeline``, strict, both arrays opened inside the
  block) written region by region, one Dask task per shard on 2 threads as zopt does; the plain
  chain ``[bytes, numcodecs.shuffle, zstd 3]``, or the default's ``numcodecs.pcodec`` level 8;
- ``zarrs-alone``, ``zarrs-alone-default``: the same arrays in one write ``dst[...] = src[...]``,
  zarrs's own rayon pool (``threading.max_workers`` 2) doing the work.

``--stat min`` reports the best of the repetitions (the fastest time, the least CPU) instead of
the median: on a shared machine the minimum is the run least disturbed by others. The load
average before each run is recorded and printed with the table.

Every output is read back and compared bit for bit with the source (not timed); imports happen
before the clock starts. MB/s counts logical (uncompressed) bytes. CPU seconds (user + sys) are
shown too: on a shared machine they, unlike wall time, do not depend on how many threads a
runner has to compete for the cores with. The ratios are to tensorstore and to the ceiling of the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

SHARD = 256
INNER = 64
RUNNERS = ("zarr", "dask", "zarrs", "tensorstore", "zopt-plain", "zopt-default", "zopt-classic", "zopt-fixed-slot",
           "zopt-default-py313", "ceiling", "ceiling-default", "ceiling-io", "ceiling-io-default", "zarrs-dask",
           "zarrs-dask-default", "zarrs-alone", "zarrs-alone-default")
VARIANTS = ("smooth", "mixed")
LABELS = {
    "zarr": "zarr-python, a loop over shards, [shuffle, zstd3]",
    "dask": "dask from_zarr().to_zarr(), 2 threads",
    "zarrs": "zarrs pipeline (Rust), [shuffle, zstd3]",
    "tensorstore": "tensorstore, blosc(zstd3, shuffle)",
    "zopt-plain": "zopt, plain [bytes, shuffle, zstd3]",
    "zopt-default": "zopt, default: the chain chosen from the codec menu (issue 26)",
    "zopt-classic": "zopt, --menu classic: conditional([shuffle, zstd3]), the default before issue 26",
    "zopt-fixed-slot": "zopt, default, --layout fixed-slot",
    "zopt-default-py313": "zopt, default, Python 3.13 / zarr 3.4",
    "ceiling": "composed numcodecs loop, 2 processes (no I/O)",
    "ceiling-default": "the same loop with the default's chain, pcodec level 8",
    "ceiling-io": "numcodecs loop with the I/O, 2 processes, [shuffle, zstd3]",
    "ceiling-io-default": "numcodecs loop with the I/O, 2 processes, pcodec 8",
    "zarrs-dask": "zarrs pipeline, a Dask task per shard, [shuffle, zstd3]",
    "zarrs-dask-default": "zarrs pipeline, a Dask task per shard, pcodec 8",
    "zarrs-alone": "zarrs pipeline, one write, its own pool, [shuffle, zstd3]",
    "zarrs-alone-default": "zarrs pipeline, one write, its own pool, pcodec 8",
}
# zopt imports Dask and the menu's codec packages lazily, at first use: imported here before the
# clock as every peer's imports are
ZOPT_IMPORTS = ("zopt.job", "zopt.codecs", "numcodecs", "dask", "dask.local", "numcodecs.pcodec", "numcodecs.blosc",
                "zopt.planning.optimizer", "zopt.job.api")
PRELOAD = {
    "zarr": ("zarr", "zarr.codecs.numcodecs", "numcodecs"),
    "zarrs": ("zarr", "zarr.codecs.numcodecs", "numcodecs", "zarrs"),
    "dask": ("zarr", "zarr.codecs.numcodecs", "numcodecs", "dask.array"),
    "tensorstore": ("tensorstore",),
    "zopt-plain": ZOPT_IMPORTS,
    "zopt-default": ZOPT_IMPORTS,
    "zopt-classic": ZOPT_IMPORTS,
    "zopt-fixed-slot": ZOPT_IMPORTS,
    "ceiling": ("numcodecs", "concurrent.futures"),
    "ceiling-default": ("numcodecs", "numcodecs.pcodec", "concurrent.futures"),
    "ceiling-io": ("numcodecs", "numpy", "concurrent.futures"),
    "ceiling-io-default": ("numcodecs", "numpy", "numcodecs.pcodec", "concurrent.futures"),
    **{w: ("zarr", "zarr.codecs.numcodecs", "numcodecs", "numcodecs.pcodec", "zarrs", "dask", "dask.threaded")
       for w in ("zarrs-dask", "zarrs-dask-default", "zarrs-alone", "zarrs-alone-default")},
}
PLAIN = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "shuffle"},
         {"name": "zstd", "configuration": {"level": 3}}]


def shape_for(size_gib: float) -> tuple[int, int, int]:
    n = max(4, round(16 * size_gib))  # 256³ float32 shards of 64 MiB
    grid = (max(1, n // 8), 2 if n >= 8 else 1, 4)
    return tuple(g * SHARD for g in grid)


# -- source data ----------------------------------------------------------------------------------


def _smooth(z0: int, shape: tuple[int, int, int], rng):
    import numpy as np

    z = np.arange(z0, z0 + shape[0], dtype="f4")[:, None, None]
    y = np.arange(shape[1], dtype="f4")[None, :, None]
    x = np.arange(shape[2], dtype="f4")[None, None, :]
    a = 15 + 10 * np.sin(x / 37) * np.cos(y / 23) + 5 * np.sin(z / 51)
    a += rng.normal(0, 0.05, a.shape).astype("f4")
    return a.astype("f4")


def make_source(path: Path, variant: str, shape: tuple[int, int, int]) -> None:
    """Write the source array ``v`` (chunks 64³, ``[bytes, zstd(3)]``) if it is not there yet."""
    import numpy as np
    import zarr
    from zarr.codecs import ZstdCodec

    if (path / "v" / "zarr.json").exists():
        return
    shutil.rmtree(path, ignore_errors=True)
    g = zarr.open_group(str(path), mode="w", zarr_format=3)
    arr = g.create_array("v", shape=shape, chunks=(INNER,) * 3, dtype="f4", fill_value=0,
                         compressors=[ZstdCodec(level=3)], dimension_names=("z", "y", "x"))
    rng = np.random.default_rng(19)
    grid = [s // SHARD for s in shape]
    for z0 in range(0, shape[0], SHARD):
        slab = _smooth(z0, (SHARD, shape[1], shape[2]), rng)
        if variant == "mixed":
            for sy in range(grid[1]):
                for sx in range(grid[2]):
                    k = (z0 // SHARD * grid[1] + sy) * grid[2] + sx
                    block = (slice(None), slice(sy * SHARD, (sy + 1) * SHARD), slice(sx * SHARD, (sx + 1) * SHARD))
                    if k % 4 == 0:
                        slab[block] = rng.integers(0, 2**32, (SHARD,) * 3, dtype=np.uint32).view("f4")
                    elif k % 4 == 1:
                        slab[block] = 7.25
        arr[z0 : z0 + SHARD] = slab
    (path / "complete").write_text("")


# -- runners (each runs in a child process) -----------------------------------------------------------


def _shard_regions(shape):
    import itertools

    for o in itertools.product(*[range(0, s, SHARD) for s in shape]):
        yield tuple(slice(a, a + SHARD) for a in o)


def _zarr_target(dst: str, shape, compressors):
    import zarr

    return zarr.create_array(dst, shape=shape, chunks=(INNER,) * 3, shards=(SHARD,) * 3, dtype="f4",
                             fill_value=0, compressors=compressors, overwrite=True)


def run_zarr(src: str, dst: str) -> None:
    import zarr
    from zarr.codecs import ZstdCodec
    from zarr.codecs.numcodecs import Shuffle

    source = zarr.open_array(src, path="v", mode="r")
    target = _zarr_target(dst, source.shape, [Shuffle(elementsize=4), ZstdCodec(level=3)])
    for region in _shard_regions(source.shape):
        target[region] = source[region]


def run_zarrs(src: str, dst: str) -> None:
    import zarr
    import zarrs  # noqa: F401

    with zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline", "codec_pipeline.strict": True}):
        run_zarr(src, dst)


def run_dask(src: str, dst: str) -> None:
    import dask
    import dask.array as da
    from zarr.codecs import ZstdCodec
    from zarr.codecs.numcodecs import Shuffle

    source = da.from_zarr(src, component="v", chunks=(SHARD,) * 3)
    target = _zarr_target(dst, source.shape, [Shuffle(elementsize=4), ZstdCodec(level=3)])
    with dask.config.set(scheduler="threads", num_workers=2):
        da.to_zarr(source, target)


def tensorstore_metadata(shape: tuple[int, ...]) -> dict:
    """tensorstore's ``zarr3`` metadata of the peer's target: float32 shards of ``SHARD``³, inner
    chunks ``INNER``³, ``[bytes, blosc(zstd 2, shuffle)]`` (also benchmarks/scaling.py's)."""
    return {
        "shape": list(shape), "data_type": "float32", "fill_value": 0,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [SHARD] * 3}},
        "codecs": [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": [INNER] * 3,
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                       {"name": "blosc", "configuration": {"cname": "zstd", "clevel": 2, "shuffle": "shuffle",
                                                           "typesize": 4, "blocksize": 0}}],
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
            "index_location": "end"}}],
    }


def run_tensorstore(src: str, dst: str) -> None:
    import tensorstore as ts

    source = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": f"{src}/v"}}).result()
    shape = tuple(source.shape)
    target = ts.open({
        "driver": "zarr3", "kvstore": {"driver": "file", "path": dst}, "create": True, "delete_existing": True,
        "metadata": tensorstore_metadata(shape),
    }).result()
    pending = []
    for region in _shard_regions(shape):  # two shards in flight: one per core
        pending.append(target[region].write(source[region]))
        if len(pending) >= 2:
            pending.pop(0).result()
    for p in pending:
        p.result()


def run_zopt(src: str, dst: str, codecs=None, layout: str = "compact", menu: str | None = None) -> dict:
    from zopt import recompress

    report = recompress(src, dst, codecs=json.dumps(codecs) if codecs else None, chunks=(INNER,) * 3,
                        shards=(SHARD,) * 3, overwrite=True, layout=layout, variables=["v"], menu=menu)
    return {"masks": {str(k): v for k, v in report.masks().items()}, "notes": report.notes}


def _ceiling_worker(args) -> tuple[float, int]:
    import numcodecs
    import numpy as np

    files, chain = args
    blobs = [Path(f).read_bytes() for f in files]  # read before the clock: no I/O in the loop
    dec, enc = numcodecs.Zstd(), numcodecs.Zstd(level=3)
    buf = np.empty(INNER**3 * 4, dtype=np.uint8)
    shuffled = np.empty_like(buf)
    if chain == "pcodec":
        from numcodecs.pcodec import PCodec

        pco = PCodec(level=8)
        values = buf.view(np.float32).reshape((INNER,) * 3)
    t = time.perf_counter()
    total = 0
    for b in blobs:
        dec.decode(b, out=buf)
        if chain == "pcodec":
            total += len(pco.encode(values))
            continue
        shuffled.reshape(4, -1)[...] = buf.reshape(-1, 4).T  # the byte shuffle
        total += len(enc.encode(shuffled))
    return time.perf_counter() - t, total, _peak_rss()


def run_ceiling(src: str, dst: str, chain: str = "shuffle-zstd3") -> dict:
    from concurrent.futures import ProcessPoolExecutor

    files = sorted(str(p) for p in (Path(src) / "v" / "c").rglob("*") if p.is_file())
    halves = [files[0::2], files[1::2]]
    with ProcessPoolExecutor(2) as pool:
        results = list(pool.map(_ceiling_worker, [(h, chain) for h in halves]))
    return {"seconds": max(r[0] for r in results), "stored": sum(r[1] for r in results), "verified": None,
            "worker_peak_rss": max(r[2] for r in results)}


def _crc32c():
    """A crc32c function of bytes -> int (zarr's dependency, whichever package provides it)."""
    try:
        import google_crc32c

        return google_crc32c.value
    except ImportError:
        import numpy as np
        from numcodecs.checksum32 import CRC32C

        return lambda b: int(np.frombuffer(CRC32C().encode(b)[-4:], "<u4")[0])


def _shard_writer_worker(args) -> tuple[float, float, float, float, int, int]:
    """Rewrite ``shards`` (shard grid positions) of ``src``'s array ``v`` into ``dst``: per shard,
    read its source chunk files, decode, encode each inner chunk, write one file, the index at the
    end. Returns the loop's (start, end) wall times, its user and system CPU seconds, the stored
    bytes and the peak RSS."""
    import resource

    import numcodecs
    import numpy as np

    shards, src, dst, chain, start_at = args
    crc = _crc32c()
    per = SHARD // INNER
    dec, enc = numcodecs.Zstd(), numcodecs.Zstd(level=3)
    buf = np.empty(INNER**3 * 4, dtype=np.uint8)
    shuffled = np.empty_like(buf)
    if chain == "pcodec":
        from numcodecs.pcodec import PCodec

        pco, values = PCodec(level=8), buf.view(np.float32).reshape((INNER,) * 3)
    while time.time() < start_at:  # the processes start their loops together
        time.sleep(0.001)
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.time()
    stored = 0
    for s in shards:
        index = np.full((per, per, per, 2), 2**64 - 1, dtype="<u8")  # missing chunk: both all ones
        pieces, offset = [], 0
        for a in range(per):
            for b in range(per):
                for c in range(per):
                    key = f"{src}/v/c/{s[0] * per + a}/{s[1] * per + b}/{s[2] * per + c}"
                    try:
                        with open(key, "rb") as f:
                            raw = f.read()
                    except FileNotFoundError:  # the fill value: not stored
                        continue
                    dec.decode(raw, out=buf)
                    if chain == "pcodec":
                        blob = pco.encode(values)
                    else:
                        shuffled.reshape(4, -1)[...] = buf.reshape(-1, 4).T  # the byte shuffle
                        blob = enc.encode(shuffled)
                    index[a, b, c] = (offset, len(blob))
                    offset += len(blob)
                    pieces.append(blob)
        raw_index = index.tobytes()
        pieces += [raw_index, crc(raw_index).to_bytes(4, "little")]
        os.makedirs(f"{dst}/c/{s[0]}/{s[1]}", exist_ok=True)
        with open(f"{dst}/c/{s[0]}/{s[1]}/{s[2]}", "wb") as f:
            f.writelines(pieces)
        stored += offset + len(raw_index) + 4
    t1, r1 = time.time(), resource.getrusage(resource.RUSAGE_SELF)
    return t0, t1, r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime, stored, _peak_rss()


def _ceiling_io_metadata(shape, chain: str) -> dict:
    inner = ([{"name": "numcodecs.pcodec", "configuration": {"level": 8}}] if chain == "pcodec" else
             [{"name": "bytes", "configuration": {"endian": "little"}},
              {"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}},
              {"name": "zstd", "configuration": {"level": 3, "checksum": False}}])
    return {"zarr_format": 3, "node_type": "array", "shape": list(shape), "data_type": "float32", "fill_value": 0.0,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [SHARD] * 3}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "codecs": [{"name": "sharding_indexed", "configuration": {
                "chunk_shape": [INNER] * 3, "codecs": inner,
                "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
                "index_location": "end"}}],
            "attributes": {}, "storage_transformers": []}


def run_ceiling_io(src: str, dst: str, chain: str = "shuffle-zstd3", n: int = 2) -> dict:
    """The fair ceiling: ``n`` processes rewrite every ``n``-th shard each, I/O inside the clock
    (see the module's docstring). Seconds: from the first loop's start to the last one's end."""
    import itertools
    import multiprocessing as mp

    shape = json.loads((Path(src) / "v" / "zarr.json").read_text())["shape"]
    shards = list(itertools.product(*[range(-(-s // SHARD)) for s in shape]))  # the last ones may be partial
    Path(dst).mkdir(parents=True, exist_ok=True)
    (Path(dst) / "zarr.json").write_text(json.dumps(_ceiling_io_metadata(shape, chain)))
    start_at = time.time() + 1.0
    with mp.get_context("fork").Pool(n) as pool:
        res = pool.map(_shard_writer_worker, [(shards[i::n], src, dst, chain, start_at) for i in range(n)])
    return {"seconds": max(r[1] for r in res) - min(r[0] for r in res), "user": sum(r[2] for r in res),
            "sys": sum(r[3] for r in res), "stored": sum(r[4] for r in res), "worker_peak_rss": max(r[5] for r in res)}


def _zarrs_arrays(src: str, dst: str, pcodec: bool):
    """Source and target opened inside the zarrs block (the pipeline is chosen when an array is
    opened): the plain chain with numcodecs' shuffle, or the default's pcodec 8."""
    import zarr
    from zarr.codecs import ZstdCodec
    from zarr.codecs.numcodecs import PCodec, Shuffle

    source = zarr.open_array(src, path="v", mode="r")
    kw = dict(serializer=PCodec(level=8), compressors=None) if pcodec else \
        dict(compressors=[Shuffle(elementsize=4), ZstdCodec(level=3)])
    target = zarr.create_array(dst, shape=source.shape, chunks=(INNER,) * 3, shards=(SHARD,) * 3, dtype="f4",
                               fill_value=0, overwrite=True, **kw)
    return source, target


def run_zarrs_engine(src: str, dst: str, pcodec: bool, per_shard: bool, n: int = 2) -> None:
    """zarr-python with the zarrs pipeline: one Dask task per shard on ``n`` threads
    (``per_shard``), or one write of the whole array with zarrs's pool of ``n`` threads."""
    import warnings

    import zarr
    import zarrs  # noqa: F401

    warnings.filterwarnings("ignore", message="Numcodecs codecs are not in the Zarr version 3")
    with zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline", "codec_pipeline.strict": True,
                          "threading.max_workers": n}):
        source, target = _zarrs_arrays(src, dst, pcodec)
        if not per_shard:
            target[...] = source[...]
            return
        import dask

        def write(region):
            target[region] = source[region]

        tasks = [dask.delayed(write)(r) for r in _shard_regions(source.shape)]
        dask.compute(*tasks, scheduler="threads", num_workers=n)


def verify(src: str, dst: str, which: str) -> bool:
    """Every value of the output equals the source's, bit for bit."""
    import numpy as np
    import zarr

    source = zarr.open_array(src, path="v", mode="r")
    target = zarr.open_array(dst, path="v" if which.startswith("zopt") else "", mode="r") if which.startswith("zopt") \
        else zarr.open_array(dst, mode="r")
    return all(
        np.array_equal(np.asarray(target[r]).view("u4"), np.asarray(source[r]).view("u4"))
        for r in _shard_regions(source.shape)
    )


def _stored(dst: str) -> tuple[int, int]:
    apparent = allocated = 0
    for p in Path(dst).rglob("*"):
        if p.is_file() and p.name != "zarr.json":
            st = p.stat()
            apparent += st.st_size
            allocated += st.st_blocks * 512
    return apparent, allocated


def _peak_rss() -> int:
    """This process's peak RSS in bytes: ``VmHWM``, which, unlike ``ru_maxrss``, does not carry
    over the RSS of the parent the process was forked from."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def child(which: str, src: str, dst: str) -> None:
    import resource

    def usage():
        s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return s.ru_utime + c.ru_utime, s.ru_stime + c.ru_stime, s.ru_minflt + c.ru_minflt, s.ru_majflt + c.ru_majflt

    # imports before the clock: on a loaded machine importing xarray/dask/pandas (zopt, dask) can
    # take seconds, which is no part of the job's throughput
    import importlib

    for module in PRELOAD.get(which, ()):
        importlib.import_module(module)
    u0 = usage()
    t = time.perf_counter()
    extra = {}
    if which in ("ceiling", "ceiling-default"):
        extra = run_ceiling(src, dst, "pcodec" if which == "ceiling-default" else "shuffle-zstd3")
    elif which in ("ceiling-io", "ceiling-io-default"):  # seconds and CPU: the loops' own
        extra = run_ceiling_io(src, dst, "pcodec" if which.endswith("default") else "shuffle-zstd3")
    elif which.startswith("zarrs-"):
        run_zarrs_engine(src, dst, which.endswith("default"), which.startswith("zarrs-dask"))
    elif which.startswith("zopt"):
        codecs = PLAIN if which == "zopt-plain" else None
        extra = run_zopt(src, dst, codecs, "fixed-slot" if which == "zopt-fixed-slot" else "compact",
                         "classic" if which == "zopt-classic" else None)
    else:
        {"zarr": run_zarr, "zarrs": run_zarrs, "dask": run_dask, "tensorstore": run_tensorstore}[which](src, dst)
    seconds = time.perf_counter() - t
    u1 = usage()
    out = {"seconds": seconds, "user": u1[0] - u0[0], "sys": u1[1] - u0[1], "minflt": u1[2] - u0[2],
           "majflt": u1[3] - u0[3], "peak_rss": _peak_rss()}
    out.update(extra)
    if not which.startswith("ceiling") or which.startswith("ceiling-io"):
        out["stored"], out["allocated"] = _stored(dst)
        out["verified"] = verify(src, dst, which)
    print(json.dumps(out))


# -- driver ------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-gib", type=float, default=1.0, help="array size in GiB (multiples of 1/16, ≥ 0.25)")
    ap.add_argument("--workdir", default="bench-out")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--python313", help="a Python 3.13 interpreter with zarr 3.4 for zopt-default-py313")
    ap.add_argument("--runners", default=",".join(RUNNERS), help=f"comma-separated subset of {','.join(RUNNERS)}")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--json", help="also write every run's measurements to this file")
    ap.add_argument("--stat", choices=tuple(STAT), default="median",
                    help="the statistic of the repetitions: median, or min (the least disturbed run on a shared machine)")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--make-source", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.make_source:
        variant, path, *dims = args.make_source
        make_source(Path(path), variant, tuple(map(int, dims)))
        return
    if args.child:
        child(*args.child)
        return
    STAT_NAME[0] = args.stat
    runners = [r for r in args.runners.split(",") if r]
    unknown = sorted(set(runners) - set(RUNNERS))
    if unknown:
        ap.error(f"--runners: unknown {unknown}; allowed: {', '.join(RUNNERS)}")
    if "zopt-default-py313" in runners and not args.python313:
        runners.remove("zopt-default-py313")
    variants = [v for v in args.variants.split(",") if v]
    shape = shape_for(args.size_gib)
    logical = 4 * shape[0] * shape[1] * shape[2]
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    sources = {}
    for v in variants:  # in a child process, so that no runner inherits its memory
        sources[v] = work / f"source-{v}-{'x'.join(map(str, shape))}.zarr"
        subprocess.run([sys.executable, __file__, "--make-source", v, str(sources[v]), *map(str, shape)], check=True)
    rows = []
    for rep in range(args.repeat):
        for v in variants:
            order = runners[rep % len(runners):] + runners[: rep % len(runners)]  # rotate: no runner always first
            for which in order:
                dst = work / f"out-{which}.zarr"
                shutil.rmtree(dst, ignore_errors=True)
                python = args.python313 if which == "zopt-default-py313" else sys.executable
                kind = "zopt-default" if which == "zopt-default-py313" else which
                load = os.getloadavg()[0]
                proc = subprocess.run([python, __file__, "--child", kind, str(sources[v]), str(dst)],
                                      capture_output=True, text=True)
                shutil.rmtree(dst, ignore_errors=True)
                if proc.returncode != 0:
                    print(f"{which} {v}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
                    continue
                res = json.loads(proc.stdout.strip().splitlines()[-1])
                res.update(which=which, variant=v, rep=rep, load=load)
                rows.append(res)
                print(f"  rep {rep} {v:6} {which:20} {res['seconds']:7.2f} s  {logical / 1e6 / res['seconds']:7.0f} MB/s  "
                      f"peak {res['peak_rss'] / 2**20:5.0f} MiB  verified {res.get('verified')}  load {load:.1f}", file=sys.stderr, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"shape": shape, "rows": rows}, indent=1))
    print_table(rows, runners, variants, shape, logical, args)


CHOSEN = {}  # runner -> the candidate its menu chose (from the report's notes), filled by main()


def chosen_candidate(rows, which: str) -> str | None:
    """The menu candidate a zopt runner's job chose for ``v`` ("pcodec-8", "classic", ...), or None."""
    for r in rows:
        for note in r.get("notes") or []:
            if r["which"] == which and (m := re.search(r"\bv=([\w.-]+)", note)):
                return m.group(1)
    return None


def ceiling_of(which: str, io: bool = False) -> str | None:
    """The ceiling runner a runner is compared with: the loop with the same chain, in memory or
    (``io``) with the I/O; None when no loop has its chain (e.g. fixed-slot, where pcodec has no
    size bound and blosc is chosen)."""
    suffix = "-io" if io else ""
    if which.startswith("ceiling"):
        return which if which.startswith("ceiling-io") == io else None
    if which.startswith("zarrs-"):
        return f"ceiling{suffix}-default" if which.endswith("default") else f"ceiling{suffix}"
    if which in ("zopt-plain", "zopt-classic") or which in ("zarr", "dask", "zarrs", "tensorstore"):
        return f"ceiling{suffix}"
    return {"pcodec-8": f"ceiling{suffix}-default", "classic": f"ceiling{suffix}"}.get(CHOSEN.get(which, "pcodec-8"))


def zopt_of(which: str) -> str | None:
    """The zopt runner with the same chain as a zarrs engine runner (the "× zopt" column)."""
    if which.startswith("zarrs-"):
        return "zopt-default" if which.endswith("default") else "zopt-plain"
    return None


STAT = {"median": statistics.median, "min": min}
STAT_NAME = ["median"]  # set by main() from --stat


def _median(rows, which, variant, key):
    """The median (or, with ``--stat min``, the minimum) of ``key`` over a runner's repetitions."""
    vals = [r[key] for r in rows if r["which"] == which and r["variant"] == variant and r.get(key) is not None]
    return STAT[STAT_NAME[0]](vals) if vals else None


def print_table(rows, runners, variants, shape, logical, args) -> None:
    loads = [r["load"] for r in rows if r.get("load") is not None]
    print(f"\nrecompress {logical / 2**30:.2f} GiB float32 {shape}: source chunks 64³ [bytes, zstd3] -> shards 256³, "
          f"inner 64³, index at the end; {os.cpu_count()} cores; {STAT_NAME[0]}s of {args.repeat}"
          + (f"; 1-minute load average before the runs {min(loads):.1f}–{max(loads):.1f}" if loads else "") + "\n")
    CHOSEN.update({w: c for w in runners if (c := chosen_candidate(rows, w))})
    if CHOSEN:
        print("chains chosen from the menu: " + ", ".join(f"{w} {c}" for w, c in CHOSEN.items()) + "\n")
    mbs = {(w, v): (logical / 1e6 / s if (s := _median(rows, w, v, "seconds")) else None) for w in runners for v in variants}
    head = f"| {'runner':<50} |" + "".join(f" {v} MB/s (peak RSS MiB) | × tensorstore | × ceiling | × ceiling I/O |"
                                           for v in variants)
    print(head)
    print("|" + "---|" * (1 + 4 * len(variants)))
    for w in runners:
        cells = []
        for v in variants:
            m = mbs[(w, v)]
            rss = _median(rows, w, v, "peak_rss")
            ts, ceil = mbs.get(("tensorstore", v)), mbs.get((ceiling_of(w), v))
            ceil_io = mbs.get((ceiling_of(w, io=True), v))
            cells.append(f" {m:,.0f} ({rss / 2**20:,.0f}) |" if m and not w.startswith("ceiling") else (f" {m:,.0f} |" if m else " – |"))
            cells.append(f" {m / ts:.2f} |" if m and ts else " – |")
            cells.append(f" {m / ceil:.2f} |" if m and ceil else " – |")
            cells.append(f" {m / ceil_io:.2f} |" if m and ceil_io else " – |")
        print(f"| {LABELS[w]:<50} |" + "".join(cells))
    print(f"\nCPU view ({STAT_NAME[0]}s): MB per CPU-second (user + sys, all threads and processes of the runner; "
          "the I/O ceilings: their loops')\n")
    print(f"| {'runner':<50} |" + "".join(f" {v} MB/CPU-s | × tensorstore | × ceiling | × ceiling I/O | × zopt |"
                                          for v in variants))
    print("|" + "---|" * (1 + 5 * len(variants)))
    cpu = {}
    for w in runners:
        for v in variants:
            user, sys_ = _median(rows, w, v, "user"), _median(rows, w, v, "sys")
            cpu[(w, v)] = logical / 1e6 / (user + sys_) if user is not None and user + sys_ > 0 else None
    for w in runners:
        cells = []
        for v in variants:
            m, ts, ceil = cpu[(w, v)], cpu.get(("tensorstore", v)), cpu.get((ceiling_of(w), v))
            ceil_io, zo = cpu.get((ceiling_of(w, io=True), v)), cpu.get((zopt_of(w), v))
            cells += [f" {m:,.0f} |" if m else " – |", f" {m / ts:.2f} |" if m and ts else " – |",
                      f" {m / ceil:.2f} |" if m and ceil else " – |", f" {m / ceil_io:.2f} |" if m and ceil_io else " – |",
                      f" {m / zo:.2f} |" if m and zo else " – |"]
        print(f"| {LABELS[w]:<50} |" + "".join(cells))
    print(f"\nwhere the time goes ({STAT_NAME[0]}s): CPU user / sys seconds, sys share, minor faults per MiB, stored MiB, verified")
    for v in variants:
        for w in runners:
            s = _median(rows, w, v, "seconds")
            if s is None:
                continue
            user, sys_, flt = (_median(rows, w, v, k) for k in ("user", "sys", "minflt"))
            stored = _median(rows, w, v, "stored")
            ok = {r.get("verified") for r in rows if r["which"] == w and r["variant"] == v}
            allocated = _median(rows, w, v, "allocated") or stored
            print(f"  {v:6} {w:20} user {user:6.1f}  sys {sys_:6.1f} ({sys_ / max(user + sys_, 1e-9):4.0%})  "
                  f"faults/MiB {flt / (logical / 2**20):6.0f}  stored {stored / 2**20 if stored else 0:7.1f} MiB "
                  f"(allocated {allocated / 2**20 if allocated else 0:7.1f})  verified {sorted(ok, key=str)}")
    masks = next((r.get("masks") for r in rows if r["which"] == "zopt-default" and r["variant"] == "mixed"), None)
    if masks:
        print(f"\nzopt default masks on mixed (bit 0 shuffle, bit 1 zstd): "
              f"{ {format(int(k), '02b'): n for k, n in sorted(masks.items())} }")


if __name__ == "__main__":
    main()

"""Benchmark: how zopt's recompress scales with the cores (issue 34), next to its ceilings and tensorstore.

    python benchmarks/scaling.py [--workers 2,8,16] [--gib 4] [--workdir bench-out/scaling] [--runners ...]
    python benchmarks/scaling.py --gil [--gil-gib 0.25] [--chains plain,classic,...] [--gil-method perf|canary]

The job (issue 34, ``benchmarks/recompress.py``'s at a larger size): float32 ``(256 * gib, 1024, 1024)``
stored in source chunks 64³ ``[bytes, zstd 3]``, rewritten into shards 256³ with inner chunks 64³.
For every N of ``--workers``, each runner in its own process, side by side:

- ``ceiling-zstd``, ``ceiling-pcodec``: the numcodecs loop in N processes — zstd-decode each source
  chunk, then shuffle + zstd 3 (or pcodec level 8) — on chunk files read into memory before the clock
  (no I/O): what N cores do with the chain and nothing else;
- ``ceiling-io-zstd``, ``ceiling-io-pcodec``: the same loops doing the job's I/O inside the clock
  (``benchmarks/recompress.py``'s ``ceiling-io``): N processes, each reading the source chunk files
  of every N-th shard, decoding, encoding and writing one ``sharding_indexed`` file per shard;
- ``zarrs-plain-dask`` / ``-default-dask``: zarr-python with zarrs-python's Rust codec pipeline
  (``ZarrsCodecPipeline``, ``threading.max_workers`` N), one Dask task per shard on N threads
  (``recompress.py``'s ``zarrs-dask``); ``zarrs-plain-alone`` / ``-default-alone``: one write of
  the whole array on zarrs's own pool of N threads. Plain: ``[bytes, numcodecs.shuffle, zstd 3]``,
  default: ``numcodecs.pcodec`` level 8;
- ``tensorstore``: ``blosc(zstd clevel 2 = zstd 3, shuffle)`` shards, ``data_copy_concurrency`` N,
  N shards in flight;
- ``zopt-plain-threads`` / ``-procs``: ``zopt.recompress`` with ``[bytes, shuffle, zstd 3]`` on Dask
  threads (``num_workers=N``) or on a ``dask.distributed.LocalCluster`` of N one-thread worker
  processes (started before the clock);
- ``zopt-default-threads`` / ``-procs``: the same with no chain: the codec menu's choice (pcodec 8
  on this field), its trial encodings inside the clock.

Printed per runner and N: MB/s of logical bytes, the ratio to the ceiling of its chain (zstd for
plain and tensorstore, pcodec for default), cores busy (CPU seconds of the runner's processes in
the window / wall seconds) and peak memory (the largest process's peak RSS; for N processes also
their sum). Every zopt and tensorstore output is spot-checked against the source.

``--gil``: the share of a one-thread recompress job's time during which a thread holds Python's
GIL, per chain (``plain``, ``plain-numcodecs`` — the same chain with numcodecs' ``shuffle`` —, and
every candidate of the codec menu; ``pcodec-8-binding`` and ``pcodec-8-numcodecs``: no job, only
pcodec level 8 compressing the same chunks, decoded before the window, one call per chunk through
``pcodec.standalone.simple_compress`` or numcodecs' ``PCodec.encode`` — the binding's own share,
which zopt's ``pcodec-8`` chain is compared with). With ``--gil-method perf`` (default where ``perf`` and root
are available) the interpreter's ``PyEval_SaveThread`` / ``PyEval_RestoreThread`` are probed and,
with the scheduler's switch events, the CPU time spent holding the GIL is summed: share = GIL-held
CPU / process CPU, exact and unaffected by other load on the machine. ``--gil-method canary`` is
the issue's method (``../shared/bench/gil_share.py``): a pure-Python thread counts on the other
core and share = 1 − its rate during the job / alone; it needs a quiet machine, and because the
canary gives the GIL back only when the job asks for it (after the 5 ms switch interval), a job
that takes the GIL many times per chunk is slowed and shows a smaller share than it holds.
Below ~1/N a share leaves room for N threads; 16 threads need ≤ 0.015 to ask for under a quarter
of the GIL.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

INNER, SHARD = 64, 256
PLAIN = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "shuffle"},
         {"name": "zstd", "configuration": {"level": 3}}]
PLAIN_NUMCODECS = [{"name": "bytes", "configuration": {"endian": "little"}},
                   {"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}},
                   {"name": "zstd", "configuration": {"level": 3, "checksum": False}}]
RUNNERS = ("ceiling-zstd", "ceiling-pcodec", "ceiling-io-zstd", "ceiling-io-pcodec", "tensorstore", "zopt-plain-threads",
           "zopt-plain-procs", "zopt-default-threads", "zopt-default-procs", "zarrs-plain-dask", "zarrs-plain-alone",
           "zarrs-default-dask", "zarrs-default-alone")
CEILING = {"tensorstore": "ceiling-zstd", "zopt-plain-threads": "ceiling-zstd", "zopt-plain-procs": "ceiling-zstd",
           "zopt-default-threads": "ceiling-pcodec", "zopt-default-procs": "ceiling-pcodec",
           "zarrs-plain-dask": "ceiling-zstd", "zarrs-plain-alone": "ceiling-zstd",
           "zarrs-default-dask": "ceiling-pcodec", "zarrs-default-alone": "ceiling-pcodec"}
GIL_CHAINS = ("plain", "plain-numcodecs", "classic", "shuffle-zstd-3", "shuffle-zstd-19", "zstd-10", "zstd-19",
              "blosc-shuffle-5", "blosc-bitshuffle-5", "pcodec-8", "pcodec-12", "pcodec-8-binding", "pcodec-8-numcodecs")
BINDING_CHAINS = ("pcodec-8-binding", "pcodec-8-numcodecs")  # --gil: pcodec's own share, no recompress job
SLOW = {"shuffle-zstd-19": 16, "zstd-19": 16, "pcodec-12": 4, "zstd-10": 2}  # --gil: these rewrite 1/k of --gil-gib


# -- source --------------------------------------------------------------------------------------------


def _smooth(z0: int, shape: tuple[int, int, int], seed: int):
    import numpy as np

    rng = np.random.default_rng(seed)
    z = np.arange(z0, z0 + shape[0], dtype="f4")[:, None, None]
    y = np.arange(shape[1], dtype="f4")[None, :, None]
    x = np.arange(shape[2], dtype="f4")[None, None, :]
    a = 15 + 10 * np.sin(x / 37) * np.cos(y / 23) + 5 * np.sin(z / 51)
    a += rng.normal(0, 0.05, a.shape).astype("f4")
    return a.astype("f4")


def make_source(path: Path, shape: tuple[int, int, int]) -> None:
    """The source array ``v`` (64³ chunks, ``[bytes, zstd 3]``), written once and reused."""
    import zarr
    from zarr.codecs import ZstdCodec

    if (path / "complete").exists():
        return
    shutil.rmtree(path, ignore_errors=True)
    g = zarr.open_group(str(path), mode="w", zarr_format=3)
    arr = g.create_array("v", shape=shape, chunks=(INNER,) * 3, dtype="f4", fill_value=0,
                         compressors=[ZstdCodec(level=3)], dimension_names=("z", "y", "x"))
    for z0 in range(0, shape[0], INNER):
        arr[z0 : z0 + INNER] = _smooth(z0, (INNER, *shape[1:]), z0)
    (path / "complete").write_text("")


def chunk_files(src: Path) -> list[str]:
    return sorted(str(p) for p in (src / "v" / "c").rglob("*") if p.is_file())


# -- measuring a window ----------------------------------------------------------------------------------


def _tree_cpu() -> float:
    """CPU seconds (user + system) of this process and every live descendant."""
    import psutil

    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):  # a process that just ended
            total += sum(child.cpu_times()[:2])
    return total


def _peak_rss(pid: int | str = "self") -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


# -- runners (each in its own child process) ---------------------------------------------------------------


def _ceiling_worker(args):
    files, chain, start_at = args
    import numcodecs
    import numpy as np

    blobs = [Path(f).read_bytes() for f in files]  # before the clock: no I/O in the loop
    dec, enc = numcodecs.Zstd(), numcodecs.Zstd(level=3)
    buf = np.empty(INNER**3 * 4, dtype=np.uint8)
    shuffled = np.empty_like(buf)
    if chain == "pcodec":
        from numcodecs.pcodec import PCodec

        pco, values = PCodec(level=8), buf.view(np.float32).reshape((INNER,) * 3)
    while time.time() < start_at:
        time.sleep(0.001)
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.time()
    out = 0
    for b in blobs:
        dec.decode(b, out=buf)
        if chain == "pcodec":
            out += len(pco.encode(values))
        else:
            shuffled.reshape(4, -1)[...] = buf.reshape(-1, 4).T
            out += len(enc.encode(shuffled))
    t1, r1 = time.time(), resource.getrusage(resource.RUSAGE_SELF)
    return t0, t1, (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime), _peak_rss(), out


def run_ceiling(src: Path, dst: Path, n: int, chain: str) -> dict:
    import multiprocessing as mp

    files = chunk_files(src)
    start_at = time.time() + 2 + 0.01 * len(files) / n
    with mp.get_context("spawn").Pool(n) as pool:
        res = pool.map(_ceiling_worker, [(files[i::n], chain, start_at) for i in range(n)])
    seconds = max(r[1] for r in res) - min(r[0] for r in res)
    return {"seconds": seconds, "cpu": sum(r[2] for r in res), "peak_rss": max(r[3] for r in res),
            "rss_sum": sum(r[3] for r in res), "ok": None}


def run_tensorstore(src: Path, dst: Path, n: int) -> dict:
    import tensorstore as ts
    from recompress import tensorstore_metadata  # the same target as recompress.py's peer

    ctx = ts.Context({"data_copy_concurrency": {"limit": n}, "file_io_concurrency": {"limit": max(n, 4)}})
    source = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": f"{src}/v"}}, context=ctx).result()
    shape = tuple(source.shape)
    target = ts.open({
        "driver": "zarr3", "kvstore": {"driver": "file", "path": str(dst)}, "create": True, "delete_existing": True,
        "metadata": tensorstore_metadata(shape)}, context=ctx).result()
    regions = [tuple(slice(a, a + SHARD) for a in o) for o in itertools.product(*[range(0, s, SHARD) for s in shape])]
    c0, t0 = _tree_cpu(), time.perf_counter()
    pending = []
    for r in regions:
        pending.append(target[r].write(source[r]))
        if len(pending) >= n:
            pending.pop(0).result()
    for p in pending:
        p.result()
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "cpu": _tree_cpu() - c0, "peak_rss": _peak_rss(), "ok": spot_check(src, dst, "")}


def run_zopt(src: Path, dst: Path, n: int, plain: bool, procs: bool) -> dict:
    import dask

    import zopt.job.api  # noqa: F401 - imports before the clock
    from zopt import recompress

    kw = dict(codecs=json.dumps(PLAIN) if plain else None, chunks=(INNER,) * 3, shards=(SHARD,) * 3,
              overwrite=True, variables=["v"])
    if not procs:
        with dask.config.set(scheduler="threads", num_workers=n):
            c0, t0 = _tree_cpu(), time.perf_counter()
            report = recompress(src, dst, **kw)
            seconds, cpu = time.perf_counter() - t0, _tree_cpu() - c0
        peak, rss_sum = _peak_rss(), None
    else:
        import psutil
        from distributed import Client, LocalCluster

        with LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None,
                          memory_limit=0) as cluster, Client(cluster) as client:
            client.run(lambda: __import__("zopt.job.api") and None)  # workers import zopt before the clock
            c0, t0 = _tree_cpu(), time.perf_counter()
            report = recompress(src, dst, scheduler=cluster.scheduler_address, **kw)
            seconds, cpu = time.perf_counter() - t0, _tree_cpu() - c0
            pids = list(client.run(os.getpid).values())
            peaks = [_peak_rss(p) for p in pids if psutil.pid_exists(p)]
        peak, rss_sum = max(peaks + [_peak_rss()]), sum(peaks)
    chosen = next((str(x) for x in report.notes if "chain" in str(x)), "")
    return {"seconds": seconds, "cpu": cpu, "peak_rss": peak, "rss_sum": rss_sum, "ok": spot_check(src, dst, "v"),
            "note": chosen[:100]}


def spot_check(src: Path, dst: Path, path: str) -> bool:
    """Three random 64³ blocks of the output equal the source's, bit for bit."""
    import numpy as np
    import zarr

    a = zarr.open_array(str(src), path="v", mode="r")
    b = zarr.open_array(str(dst), path=path, mode="r") if path else zarr.open_array(str(dst), mode="r")
    rng = np.random.default_rng(34)
    for _ in range(3):
        sl = tuple(slice(o, o + INNER) for o in (int(rng.integers(0, s // INNER)) * INNER for s in a.shape))
        if not np.array_equal(np.asarray(a[sl]).view("u4"), np.asarray(b[sl]).view("u4")):
            return False
    return True


def run_zarrs(src: Path, dst: Path, n: int, pcodec: bool, per_shard: bool) -> dict:
    import dask.threaded  # noqa: F401 - imports before the clock
    import numcodecs.pcodec  # noqa: F401
    import zarr.codecs.numcodecs  # noqa: F401
    import zarrs  # noqa: F401
    from recompress import run_zarrs_engine

    c0, t0 = _tree_cpu(), time.perf_counter()
    run_zarrs_engine(str(src), str(dst), pcodec, per_shard, n)
    seconds, cpu = time.perf_counter() - t0, _tree_cpu() - c0
    return {"seconds": seconds, "cpu": cpu, "peak_rss": _peak_rss(), "ok": spot_check(src, dst, "")}


def run_ceiling_io(src: Path, dst: Path, n: int, chain: str) -> dict:
    from recompress import run_ceiling_io as run

    r = run(str(src), str(dst), "pcodec" if chain == "pcodec" else "shuffle-zstd3", n)
    return {"seconds": r["seconds"], "cpu": r["user"] + r["sys"], "peak_rss": r["worker_peak_rss"],
            "ok": spot_check(src, dst, "")}


def child(which: str, n: int, src: str, dst: str) -> None:
    src_p, dst_p = Path(src), Path(dst)
    if which.startswith("ceiling-io"):
        out = run_ceiling_io(src_p, dst_p, n, which.split("-")[2])
    elif which.startswith("zarrs"):
        out = run_zarrs(src_p, dst_p, n, "default" in which, which.endswith("dask"))
    elif which.startswith("ceiling"):
        out = run_ceiling(src_p, dst_p, n, which.split("-")[1])
    elif which == "tensorstore":
        out = run_tensorstore(src_p, dst_p, n)
    else:
        out = run_zopt(src_p, dst_p, n, "plain" in which, which.endswith("procs"))
    print(json.dumps(out))


# -- GIL share -------------------------------------------------------------------------------------------


def _python_object() -> str:
    """The file that holds ``PyEval_SaveThread`` in this process: libpython, or the executable."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 6 and "libpython" in parts[5] and parts[5].endswith(tuple(f".so.1.{i}" for i in range(10))):
            return parts[5]
    return os.path.realpath(sys.executable)


def perf_probes() -> tuple[str, str] | None:
    """The perf events on this interpreter's ``PyEval_SaveThread`` (entry) and
    ``PyEval_RestoreThread`` (return), created if missing (needs root and ``perf``); None otherwise."""
    if shutil.which("perf") is None or os.geteuid() != 0:
        return None
    obj = _python_object()
    group = "zopt_gil_" + "".join(c if c.isalnum() else "_" for c in Path(obj).name)[:40]

    def events() -> tuple[str | None, str | None]:
        names = [line.split()[0] for line in subprocess.run(["perf", "probe", "-l"], capture_output=True,
                                                            text=True).stdout.splitlines() if line.strip().startswith(group + ":")]
        save = next((n for n in names if n.split(":")[1].startswith("save")), None)
        restore = next((n for n in names if n.split(":")[1].startswith("restore")), None)
        return save, restore

    save, restore = events()
    if save is None or restore is None:
        for spec in (f"{group}:save=PyEval_SaveThread", f"{group}:restore=PyEval_RestoreThread%return"):
            # -f: another probe may sit at the same address already
            if subprocess.run(["perf", "probe", "-f", "-x", obj, "-a", spec], capture_output=True).returncode:
                return None
        save, restore = events()
    return (save, restore) if save and restore else None


def _perf_events(perf_text: str, t0: float, t1: float):
    """``(tid, time, fields)`` of each ``perf script`` event line in [t0, t1] (others skipped)."""
    for line in perf_text.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        try:
            tid, t = int(parts[0]), float(parts[1].rstrip(":"))
        except ValueError:
            continue
        if t0 <= t <= t1:
            yield tid, t, parts


def held_cpu(perf_text: str, t0: float, t1: float) -> tuple[float, int]:
    """(CPU seconds during which some thread held the GIL, GIL acquisitions) in [t0, t1] from
    ``perf script`` output of the save/restore probes and switch events (CLOCK_MONOTONIC)."""
    state: dict[int, list] = {}  # tid -> [on cpu, holding, last time]
    held, takes = 0.0, 0
    for tid, t, parts in _perf_events(perf_text, t0, t1):
        event = parts[2]
        s = state.setdefault(tid, [None, None, t])
        if s[0] and s[1]:
            held += t - s[2]
        s[2] = t
        if event == "PERF_RECORD_SWITCH":
            s[0] = len(parts) > 3 and parts[3] == "IN"
        elif ":restore" in event:
            takes += not s[1]  # a second probe on the same return (the PLT entry) is no new take
            s[0], s[1] = True, True
        elif ":save" in event:
            s[0], s[1] = True, False
    for s in state.values():  # up to the end of the window
        if s[0] and s[1]:
            held += t1 - s[2]
    return held, takes


def cpu_in(perf_text: str, t0: float, t1: float) -> float:
    """CPU seconds of the probed threads in [t0, t1], from the switch events (threads on a CPU
    at ``t0`` are counted from their first event)."""
    on: dict[int, float | None] = {}
    total = 0.0
    for tid, t, parts in _perf_events(perf_text, t0, t1):
        since = on.get(tid, t)  # a thread first seen here is on a CPU (an event of its own)
        if parts[2] == "PERF_RECORD_SWITCH":
            if len(parts) > 3 and parts[3] == "IN":
                on[tid] = t
                continue
            if since is not None:
                total += t - since
            on[tid] = None
        else:
            on[tid] = since if since is not None else t
    return total + sum(t1 - s for s in on.values() if s is not None)


def _canary(stop: threading.Event, out: list) -> None:
    n, t0 = 0, time.perf_counter()
    while not stop.is_set():
        for _ in range(2000):
            n += 1
    out.append(n / (time.perf_counter() - t0))


def _canary_alone(seconds: float) -> float:
    stop, out = threading.Event(), []
    t = threading.Thread(target=_canary, args=(stop, out))
    t.start()
    time.sleep(seconds)
    stop.set()
    t.join()
    return out[0]


def _subset(src: str, work: str, chunks: int) -> tuple[str, int]:
    """A source of about ``chunks`` of the 64³ chunks of ``src`` in whole 256³ shards of the target
    (its first ones, as their own store: a copy of those chunk files, shape cut to them; a cut
    through shards would give the slow chains shards of fewer chunks, each paying a shard's
    Python), and its size in bytes."""
    meta = json.loads((Path(src) / "v" / "zarr.json").read_text())
    shape = meta["shape"]
    sz, sy, sx = (n // SHARD for n in shape)
    want = max(1, chunks // (SHARD // INNER) ** 3)
    if want >= sz * sy * sx:
        return src, 4 * shape[0] * shape[1] * shape[2]
    nz, ny, nx = (want // (sy * sx), sy, sx) if want >= sy * sx else (1, want // sx, sx) if want >= sx else (1, 1, want)
    new = [nz * SHARD, ny * SHARD, nx * SHARD]
    limits = [n // INNER for n in new]
    small = Path(work) / f"src-{new[0]}x{new[1]}x{new[2]}.zarr"
    if not (small / "complete").exists():
        shutil.rmtree(small, ignore_errors=True)

        def skip(d: str, names: list[str]) -> list[str]:
            parts = Path(d).parts
            if "c" not in parts:
                return []
            depth = len(parts) - parts.index("c") - 1  # 0: the z directories, 1: y, 2: x (the files)
            limit = limits[depth] if depth < 3 else None
            return [n for n in names if limit is not None and n.isdigit() and int(n) >= limit]

        shutil.copytree(src, small, ignore=skip)
        meta["shape"] = new
        (small / "v" / "zarr.json").write_text(json.dumps(meta))
        (small / "complete").write_text("")
    return str(small), 4 * new[0] * new[1] * new[2]


def _binding_loop(src: str, chain: str, phase: list):
    """A job that only compresses: every 64³ chunk of ``src`` (zstd-decoded into arrays before)
    through pcodec level 8 — ``pcodec.standalone.simple_compress`` itself (``pcodec-8-binding``)
    or numcodecs' ``PCodec.encode`` (``pcodec-8-numcodecs``) — one call per chunk, one thread; the
    loop is the write phase."""
    import numcodecs
    import numpy as np

    dec = numcodecs.Zstd()
    values = [dec.decode(Path(f).read_bytes(), out=np.empty(INNER**3, dtype="f4")) for f in chunk_files(Path(src))]
    if chain == "pcodec-8-numcodecs":
        from numcodecs.pcodec import PCodec

        compress = PCodec(level=8).encode
    else:
        from numcodecs.pcodec import PCodec
        from pcodec import standalone

        config = PCodec(level=8)._get_chunk_config()  # numcodecs' configuration, as zopt's chain uses

        def compress(a):
            return standalone.simple_compress(a, config)

    def job() -> None:
        phase[0] = min(phase[0], time.monotonic())
        for a in values:
            compress(a)
        phase[1] = max(phase[1], time.monotonic())

    return job


def gil_child(chain: str, src: str, work: str, method: str, chunks: int) -> None:
    """One-thread recompress of ``chain`` on about ``chunks`` chunks of the source, measured."""
    import dask

    import zopt.job.api  # noqa: F401
    from zopt import recompress

    src, nbytes = _subset(src, work, chunks)
    codecs = {"plain": PLAIN, "plain-numcodecs": PLAIN_NUMCODECS}.get(chain)
    kw = dict(variables=["v"], chunks=(INNER,) * 3, shards=(SHARD,) * 3, overwrite=True,
              codecs=json.dumps(codecs) if codecs else None, menu=None if codecs else chain)
    dst = Path(work) / f"gil-{chain}.zarr"
    # the write phase: from the first shard task's start to the last one's end (the rest of the
    # job — planning, metadata, publishing — runs once per job, whatever its size)
    from zopt.job import tasks

    phase = [float("inf"), 0.0]
    # the shard writers' encoding generator (encode_batches since issue 34 part 2; encode before)
    attr = "encode_batches" if hasattr(tasks.ShardJob, "encode_batches") else "encode"
    encode = getattr(tasks.ShardJob, attr)

    def timed_encode(self, *a, **k):
        phase[0] = min(phase[0], time.monotonic())
        yield from encode(self, *a, **k)
        phase[1] = max(phase[1], time.monotonic())

    setattr(tasks.ShardJob, attr, timed_encode)
    def job() -> None:
        recompress(src, dst, **kw)

    if chain in BINDING_CHAINS:  # pcodec's binding alone, on the chunks decoded before the window
        job = _binding_loop(src, chain, phase)
    with dask.config.set(scheduler="threads", num_workers=1):
        job()  # warm: imports, allocator, page cache
        phase[:] = [float("inf"), 0.0]  # the measured run's write phase only
        if method == "perf":
            probes = perf_probes()
            data = Path(work) / f"gil-{chain}.perf"
            # a 64 MiB ring buffer: on a loaded machine perf's reader runs late, and events it loses
            # would count as GIL released
            perf = subprocess.Popen(["perf", "record", "-q", "-m", "16384", "-k", "CLOCK_MONOTONIC", "-o", str(data),
                                     "--switch-events", "-e", probes[0], "-e", probes[1], "-p", str(os.getpid())],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(1.5)  # perf attaches
            while not data.exists() or data.stat().st_size == 0:  # later on a loaded machine
                time.sleep(0.1)
            time.sleep(0.5)
            r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
            job()
            t1, r1 = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF)
            perf.send_signal(signal.SIGINT)
            perf.wait()
            text = subprocess.run(["perf", "script", "-i", str(data), "--show-switch-events", "-F", "tid,time,event"],
                                  capture_output=True, text=True).stdout
            data.unlink(missing_ok=True)
            held, takes = held_cpu(text, t0, t1)
            cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
            p_held, p_takes = held_cpu(text, *phase)
            p_cpu = cpu_in(text, *phase)
            out = {"share": held / cpu, "held_s": held, "cpu_s": cpu, "takes": takes, "seconds": t1 - t0,
                   "phase_share": p_held / p_cpu, "phase_held_s": p_held, "phase_takes": p_takes}
        else:
            base = _canary_alone(2.0)
            stop, rates = threading.Event(), []
            t = threading.Thread(target=_canary, args=(stop, rates))
            t.start()
            t0 = time.monotonic()
            job()
            t1 = time.monotonic()
            stop.set()
            t.join()
            out = {"share": 1 - rates[0] / base, "seconds": t1 - t0}
    out.update(chunks=nbytes // (INNER**3 * 4), mbs=nbytes / out["seconds"] / 1e6)
    shutil.rmtree(dst, ignore_errors=True)
    print(json.dumps(out))


def run_gil(args, src: Path) -> None:
    method = args.gil_method or ("perf" if perf_probes() else "canary")
    chains = [c for c in args.chains.split(",") if c]
    load = os.getloadavg()[0]
    import zarr

    print(f"GIL share of a one-thread recompress job ({method}; {os.cpu_count()} cores, load average {load:.1f}; "
          f"minimum of {args.repeat} runs; Python {sys.version.split()[0]}, zarr {zarr.__version__})", flush=True)
    print("| chain | GIL share, write phase (min) | runs | GIL held per chunk µs | GIL acquisitions per chunk "
          "| GIL share, whole job | one thread MB/s |")
    print("|---|---|---|---|---|---|---|", flush=True)
    for chain in chains:
        runs = []
        for _ in range(args.repeat):
            p = subprocess.run([sys.executable, __file__, "--gil-child", chain, str(src), args.workdir, method,
                                str(max(16, int(args.gil_gib * 1024) // SLOW.get(chain, 1)))],
                               capture_output=True, text=True)
            if p.returncode:
                print(f"| {chain} | failed: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else p.returncode} |")
                break
            runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
        if not runs:
            continue
        key = "phase_share" if "phase_share" in runs[0] else "share"
        best = min(runs, key=lambda r: r[key])
        per_chunk = (f"{best['phase_held_s'] / best['chunks'] * 1e6:.0f}", f"{best['phase_takes'] / best['chunks']:.1f}") \
            if "phase_held_s" in best else ("–", "–")
        shares = ", ".join(f"{r[key]:.4f}" for r in runs)
        print(f"| {chain} | {best[key]:.4f} | {shares} | {per_chunk[0]} | {per_chunk[1]} | "
              f"{min(r['share'] for r in runs):.4f} | {max(r['mbs'] for r in runs):.0f} |", flush=True)


# -- driver --------------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", default="2,8,16", help="comma-separated worker counts N")
    ap.add_argument("--gib", type=float, default=4.0, help="array size in GiB (multiples of 1/4)")
    ap.add_argument("--workdir", default="bench-out/scaling")
    ap.add_argument("--runners", default=",".join(RUNNERS))
    ap.add_argument("--repeat", type=int, default=1, help="runs per cell (best MB/s; --gil: minimum share)")
    ap.add_argument("--gil", action="store_true", help="print the GIL share per chain instead")
    ap.add_argument("--gil-gib", type=float, default=0.25, help="--gil: GiB each chain rewrites (the slowest chains less)")
    ap.add_argument("--gil-method", choices=("perf", "canary"))
    ap.add_argument("--chains", default=",".join(GIL_CHAINS))
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    ap.add_argument("--gil-child", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        which, n, src, dst = args.child
        child(which, int(n), src, dst)
        return
    if args.gil_child:
        chain, src, work, method, stride = args.gil_child
        gil_child(chain, src, work, method, int(stride))
        return
    nz = max(INNER, round(args.gib * 256) // INNER * INNER)  # 1 GiB = 256 slabs of 1024 x 1024
    shape = (nz, 1024, 1024)
    logical = 4 * nz * 1024 * 1024
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    src = work / f"source-{nz}x1024x1024.zarr"
    t = time.perf_counter()
    make_source(src, shape)
    print(f"source {shape} float32, {logical / 2**30:.2f} GiB, 64³ chunks [bytes, zstd 3] ({time.perf_counter() - t:.0f} s); "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}", flush=True)
    if args.gil:
        run_gil(args, src)
        return
    ns = [int(x) for x in args.workers.split(",") if x]
    runners = [r for r in args.runners.split(",") if r]
    unknown = sorted(set(runners) - set(RUNNERS))
    if unknown:
        ap.error(f"--runners: unknown {unknown}; allowed: {', '.join(RUNNERS)}")
    rows = []
    for n in ns:
        for rep in range(args.repeat):
            for which in runners:
                dst = work / f"out-{which}-{n}.zarr"
                shutil.rmtree(dst, ignore_errors=True)
                p = subprocess.run([sys.executable, __file__, "--child", which, str(n), str(src), str(dst)],
                                   capture_output=True, text=True)
                shutil.rmtree(dst, ignore_errors=True)
                if p.returncode:
                    print(f"{which} n={n}: failed\n{p.stderr[-1500:]}", file=sys.stderr, flush=True)
                    continue
                r = json.loads(p.stdout.strip().splitlines()[-1])
                r.update(which=which, n=n, rep=rep, mbs=logical / r["seconds"] / 1e6)
                rows.append(r)
                print(f"  {which:22} n={n:2} rep {rep}: {r['seconds']:6.2f} s {r['mbs']:7.0f} MB/s, cores busy "
                      f"{r['cpu'] / r['seconds']:5.2f}, peak {r['peak_rss'] / 2**20:5.0f} MiB, ok {r.get('ok')} {r.get('note', '')}",
                      file=sys.stderr, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"shape": shape, "rows": rows}, indent=1))
    print_table(rows, runners, ns, logical)


def print_table(rows: list, runners: list, ns: list, logical: int) -> None:
    best = {}
    for r in rows:
        key = (r["which"], r["n"])
        if key not in best or r["mbs"] > best[key]["mbs"]:
            best[key] = r
    head = "| runner | " + " | ".join(f"N={n}: MB/s | × ceiling | × ceiling I/O | MB/CPU-s | cores busy | peak MiB"
                                      for n in ns)
    print("\n" + head + (f" | N={ns[-1]} / N={ns[0]} |" if len(ns) > 1 else " |"))
    print("|---|" + "---|---|---|---|---|---|" * len(ns) + ("---|" if len(ns) > 1 else ""))
    for w in runners:
        cells = []
        for n in ns:
            r = best.get((w, n))
            if r is None:
                cells.append("– | – | – | – | – | –")
                continue
            ceil = best.get((CEILING.get(w, w), n))
            ceil_io = best.get((CEILING.get(w, w).replace("ceiling-", "ceiling-io-"), n)) if not w.startswith("ceiling") \
                else best.get((w, n)) if w.startswith("ceiling-io") else None
            ratio = f"{r['mbs'] / ceil['mbs']:.2f}" if ceil and not w.startswith("ceiling-io") else "–"
            ratio_io = f"{r['mbs'] / ceil_io['mbs']:.2f}" if ceil_io else "–"
            mem = f"{r['peak_rss'] / 2**20:,.0f}" + (f" (Σ {r['rss_sum'] / 2**20:,.0f})" if r.get("rss_sum") else "")
            cells.append(f"{r['mbs']:,.0f} | {ratio} | {ratio_io} | {logical / 1e6 / r['cpu']:,.0f} | "
                         f"{r['cpu'] / r['seconds']:.1f} | {mem}")
        scale = ""
        if len(ns) > 1:
            a, b = best.get((w, ns[0])), best.get((w, ns[-1]))
            scale = f" | {b['mbs'] / a['mbs']:.1f}" if a and b else " | –"
        print(f"| {w} | " + " | ".join(cells) + scale + " |")
    print("\nMB/s: logical bytes, best of the repetitions; × ceiling: to ceiling-zstd (plain, tensorstore) or "
          "ceiling-pcodec (default) at the same N, × ceiling I/O: to ceiling-io-zstd / ceiling-io-pcodec; "
          "MB/CPU-s: logical MB per CPU-second (user + sys); cores busy: CPU seconds of the runner's processes / wall seconds.")


if __name__ == "__main__":
    main()

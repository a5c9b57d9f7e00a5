"""Object stores through fsspec and through obstore, side by side, on a local S3-compatible server.

Starts moto's S3 server (``python -m moto.server``) on 127.0.0.1 in its own process, puts a
float32 field of ``--mib`` MiB there as an uncompressed Zarr v3 store (8 MiB chunks), then
recompresses it with ``zopt.recompress`` (inner chunks 256×256 in shards of 512×4096, one fixed
cheap chain, ``bytes`` + ``zstd`` level 1, so that the client's work is mostly moving bytes):

- S3 → S3 and S3 → a local directory,
- with ``ZOPT_OBJECT_STORE=fsspec`` (s3fs, aiobotocore) and ``ZOPT_OBJECT_STORE=obstore`` (zarr's
  ``ObjectStore`` on obstore),

each job in a fresh child process (threads scheduler), the run of least CPU of ``--repeat``,
and the same job local → local (the floor: what the job costs without any object store). Prints
MB/s of the field and the client's CPU-seconds per GB (``getrusage`` of the child around the job:
every thread of the client, not the server's), and each client's share above the floor. The server runs on the same machine, so it caps the
MB/s; the CPU-seconds per GB are what a cluster's workers pay. Usage::

    python benchmarks/object_store.py [--mib 256] [--repeat 2]
    python benchmarks/object_store.py --mib 1024          # the 1 GiB run
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CODECS = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 1}}]
LAYOUT = {"chunks": (256, 256), "shards": (512, 4096)}


def _env(endpoint: str) -> dict[str, str]:
    return {**os.environ, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true",
            "FSSPEC_S3_ENDPOINT_URL": endpoint}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_server() -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return server, endpoint
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise RuntimeError("moto's server did not start")


def _child(src: str, dst: str) -> None:
    """One job, in this process: prints ``{"seconds", "cpu"}`` as JSON. A small local job runs
    first, so that imports and first calls are not counted."""
    import numpy as np
    import obstore  # noqa: F401
    import s3fs  # noqa: F401
    import zarr

    import zopt

    with tempfile.TemporaryDirectory() as tmp:
        zarr.create_array(f"{tmp}/w.zarr", shape=(512, 512), chunks=(256, 256), dtype="f4")[:] = np.ones((512, 512))
        zopt.recompress(f"{tmp}/w.zarr", f"{tmp}/o.zarr", codecs=CODECS, chunks=(256, 256),  # type: ignore[arg-type]
                        shards=(512, 512))

    before = resource.getrusage(resource.RUSAGE_SELF)
    t = time.perf_counter()
    zopt.recompress(src, dst, codecs=CODECS, **LAYOUT)  # type: ignore[arg-type]
    seconds = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    print(json.dumps({"seconds": seconds, "cpu": cpu}))


def _run(src: str, dst: str, client: str, env: dict[str, str]) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--child", src, dst], env={**env, "ZOPT_OBJECT_STORE": client},
                         check=True, capture_output=True, text=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=256, help="size of the float32 field in MiB (1024: 1 GiB)")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--child", nargs=2, metavar=("SRC", "DST"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(*args.child)
        return
    import fsspec
    import obstore
    import s3fs
    import zarr

    sys.path.insert(0, str(Path(__file__).parent))
    from field2d import sine_field

    server, endpoint = _start_server()
    env = _env(endpoint)
    os.environ.update(env)
    try:
        fs = s3fs.S3FileSystem(endpoint_url=endpoint, key="bench", secret="bench")
        fs.mkdir("bench")
        field = sine_field(args.mib)
        gb = field.nbytes / 1e9
        with tempfile.TemporaryDirectory() as tmp:
            local = Path(tmp) / "src.zarr"
            zarr.open_group(local, mode="w").create_array(
                "v", shape=field.shape, chunks=(512, 4096), dtype="f4", compressors=None,
                dimension_names=("y", "x"))[:] = field
            fs.put(str(local), "bench/src.zarr", recursive=True)
            del field
            print(f"zarr {zarr.__version__}, s3fs {s3fs.__version__}, fsspec {fsspec.__version__}, obstore "
                  f"{obstore.__version__}; moto S3 server on 127.0.0.1; field {args.mib} MiB float32, "
                  f"best of {args.repeat}")
            print(f"{'route':<16}{'client':<9}{'s':>8}{'MB/s':>8}{'CPU-s/GB':>10}")
            rows: dict[tuple[str, str], tuple[float, float]] = {}
            for route in ("S3 -> S3", "S3 -> local"):
                for client in ("fsspec", "obstore"):
                    best: dict[str, float] | None = None
                    for i in range(args.repeat):
                        if route == "S3 -> S3":
                            dst = f"s3://bench/out-{client}-{i}.zarr"
                        else:
                            dst = str(Path(tmp) / f"out-{client}-{i}.zarr")
                        got = _run("s3://bench/src.zarr", dst, client, env)
                        if route == "S3 -> S3":
                            fs.rm(dst.removeprefix("s3://"), recursive=True)
                        else:
                            shutil.rmtree(dst)
                        best = got if best is None or got["cpu"] < best["cpu"] else best
                    assert best is not None
                    rows[route, client] = (best["seconds"], best["cpu"] / gb)
                    print(f"{route:<16}{client:<9}{best['seconds']:>8.2f}{gb * 1e3 / best['seconds']:>8.0f}"
                          f"{best['cpu'] / gb:>10.2f}")
            floor = min((_run(str(local), str(Path(tmp) / f"floor-{i}.zarr"), "fsspec", env)
                         for i in range(args.repeat)), key=lambda r: r["cpu"])
            print(f"{'local -> local':<16}{'-':<9}{floor['seconds']:>8.2f}{gb * 1e3 / floor['seconds']:>8.0f}"
                  f"{floor['cpu'] / gb:>10.2f}")
            for route in ("S3 -> S3", "S3 -> local"):
                fss, obs = rows[route, "fsspec"][1], rows[route, "obstore"][1]
                base = floor["cpu"] / gb
                print(f"{route}: obstore's CPU-s/GB is {obs / fss:.2f}x fsspec's; above the local job's "
                      f"({base:.2f}), the store's share: {obs - base:.2f} vs {fss - base:.2f} "
                      f"({(obs - base) / (fss - base):.2f}x)")
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    main()

"""Recompress into an Icechunk repository: what the work branch, forked sessions and wave commits cost.

One float32 field (``--mb``, uncompressed local Zarr v3 source, 256×256 inner chunks in shards of
512×4096) written, best of ``--repeat``, by:

- ``zopt → directory``: ``zopt.recompress`` into a local directory (partial store, rename);
- ``zopt → icechunk``: ``zopt.recompress`` into a local Icechunk repository, one commit
  (waves of ``WAVE_UNITS`` shards), and again with waves of 2 shards (a commit, or on icechunk
  2.x an amend, every 2 shards);
- ``xarray → icechunk``: the peer, Icechunk's documented path: ``to_zarr`` into a writable
  session's store with zarr's default codecs on the same chunks and shards, then ``commit``.

Prints seconds, MB/s of the raw field and stored bytes. Usage::

    python benchmarks/icechunk_write.py [--mb 64] [--repeat 3]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import icechunk
import xarray as xr
import zarr

import zopt
from zopt.job import icechunk_target


def _repo(path: Path) -> icechunk.Repository:
    shutil.rmtree(path, ignore_errors=True)
    return icechunk.Repository.create(icechunk.local_filesystem_storage(str(path)))


def _dir_bytes(repo_path) -> int:
    """Bytes of the repository's chunk objects (shards over Icechunk's inline threshold are all there)."""
    return sum(f.stat().st_size for f in Path(repo_path, "chunks").rglob("*") if f.is_file())


sys.path.insert(0, str(Path(__file__).parent))
from field2d import sine_field  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=64, help="size of the float32 field in MB")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    field = sine_field(args.mb)
    layout = {"chunks": (256, 256), "shards": (512, 4096)}
    print(f"icechunk {icechunk.__version__}, zarr {zarr.__version__}, field {field.shape} float32 "
          f"({field.nbytes / 2**20:.0f} MiB), {field.shape[0] // 512} shards")
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src.zarr"
        zarr.open_group(src, mode="w").create_array("v", shape=field.shape, chunks=(512, 4096), dtype="f4",
                                                    compressors=None, dimension_names=("y", "x"))[:] = field

        def zopt_dir():
            shutil.rmtree(Path(tmp) / "d.zarr", ignore_errors=True)
            rep = zopt.recompress(src, Path(tmp) / "d.zarr", **layout)
            return rep.arrays[0].stored_after

        def zopt_ice(wave):
            def run():
                path = Path(tmp) / "z.icechunk"
                _repo(path)
                saved, icechunk_target.WAVE_UNITS = icechunk_target.WAVE_UNITS, wave
                try:
                    zopt.recompress(src, f"icechunk://{path}", **layout)
                finally:
                    icechunk_target.WAVE_UNITS = saved
                return _dir_bytes(path)
            return run

        def xarray_ice():
            path = Path(tmp) / "x.icechunk"
            repo = _repo(path)
            session = repo.writable_session("main")
            ds = xr.open_zarr(src, consolidated=False, chunks={"y": 512, "x": 4096})  # one Dask chunk per shard
            ds.to_zarr(session.store, zarr_format=3, consolidated=False,
                       encoding={"v": {"chunks": layout["chunks"], "shards": layout["shards"]}})
            session.commit("xarray to_zarr")
            return _dir_bytes(path)

        rows_out = []
        for name, fn in (("zopt → directory", zopt_dir), ("zopt → icechunk (one wave)", zopt_ice(256)),
                         ("zopt → icechunk (waves of 2 shards)", zopt_ice(2)),
                         ("xarray to_zarr → icechunk (zarr default codecs)", xarray_ice)):
            times, size = [], 0
            for _ in range(args.repeat):
                t = time.perf_counter()
                size = fn()
                times.append(time.perf_counter() - t)
            best = min(times)
            rows_out.append((name, best, field.nbytes / 2**20 / best, size))
    print("| writer | seconds | MB/s | stored bytes |\n| --- | ---: | ---: | ---: |")
    for name, s, mbs, size in rows_out:
        print(f"| {name} | {s:.2f} | {mbs:.0f} | {size:,} |".replace(",", " "))


if __name__ == "__main__":
    main()

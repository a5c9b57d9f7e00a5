"""Several processes writing inner chunks of the same shards at once (the HPC pattern: one rank
per process, each computing some time steps), with zopt's fixed-slot shard layout, then
``zopt compact`` packing the shards.

zarr-python alone cannot do this: writing part of a shard reads, re-encodes and rewrites the
whole shard, so concurrent writers lose each other's chunks. With fixed slots every inner chunk
``i`` of a shard has its own byte range (``i * slot_size``): each writer encodes its chunks and
``pwrite``s them into the shard's temporary file, and when all writers are done one finalize step
per shard writes the index and renames the file into place (``zopt.store.shards``).

Data: annual-mean air temperature over North America (``iris-sample-data``); year ``t`` is
written by rank ``t % RANKS``, so every shard gets chunks from every rank.

    python recipes/parallel_shard_writers.py [--small] [--out DIR] [--ranks N]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import uuid
from pathlib import Path

import iris_sample_data
import numpy as np
import xarray as xr
import zarr
from _outdir import recipe_out  # recipes/_outdir.py: the script's directory is on sys.path

from zopt import info as store_info
from zopt.planning.presets import get_preset
from zopt.store.shards import finalize_slots, layout_of, tmp_path, write_slots

SRC = os.path.join(iris_sample_data.path, "A1B_north_america.nc")
NAME = "air_temperature"


def shard_file(store: Path, array: zarr.Array, shard: tuple[int, ...]) -> Path:
    return store / NAME / array.metadata.encode_chunk_key(shard)


def rank_main(rank: int, ranks: int, store: str, steps: int, job: str) -> list[tuple[tuple[int, ...], int, int]]:
    """One writer: encode the years ``t % ranks == rank`` and write them into their slots.

    Returns ``(shard coords, i, nbytes)`` of every inner chunk written, for the finalize step."""
    array = zarr.open_array(store, path=NAME, mode="r")
    layout = layout_of(array)
    encoder = layout.inner_encoder().with_decision("compress_if_smaller")
    values = xr.open_dataset(SRC, mask_and_scale=False)[NAME]  # each rank reads only its years
    per_shard = layout.chunks_per_shard[0]
    written = []
    for t in range(rank, steps, ranks):
        shard, i = (t // per_shard, 0, 0), t % per_shard
        chunk = np.ascontiguousarray(values[t : t + 1].values)
        data = encoder.encode(chunk, (t, 0, 0), limit=layout.slot_size).data
        tmp = tmp_path(shard_file(Path(store), array, shard), job)
        for i_done, nbytes in write_slots(tmp, layout, [(i, data)]):  # os.pwrite into slot i
            written.append((shard, i_done, nbytes))
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="4 years instead of 20 (for CI)")
    parser.add_argument("--out", default="recipe-out", help="directory for the store (new or empty; a recipe's own: its outputs replaced)")
    parser.add_argument("--ranks", type=int, default=4, help="writer processes")
    args = parser.parse_args()
    out = recipe_out(args.out)  # refuses a non-empty directory no recipe made
    store = out / "model.zarr"

    src = xr.open_dataset(SRC, mask_and_scale=False)[NAME]
    steps = 48 if args.small else src.sizes["time"]
    # one year per inner chunk, 24 years per shard; the chain of the default preset
    preset = get_preset("default").chain()
    array = zarr.create_array(store, name=NAME, shape=(steps, *src.shape[1:]), dtype=src.dtype,
                              chunks=(1, *src.shape[1:]), shards=(24, *src.shape[1:]), fill_value=np.nan,
                              serializer=preset[0], compressors=preset[1:], dimension_names=src.dims)
    layout = layout_of(array)
    print(f"{steps} years, {-(-steps // 24)} shards of {layout.n_inner} inner chunks, slot {layout.slot_size} bytes")

    # the ranks: independent processes (spawned, as an MPI launcher would start them)
    job = uuid.uuid4().hex[:8]
    with multiprocessing.get_context("spawn").Pool(args.ranks) as pool:
        results = pool.starmap(rank_main, [(r, args.ranks, str(store), steps, job) for r in range(args.ranks)])

    # the finalize step, once all ranks are done (an MPI barrier): index + atomic rename per shard
    by_shard: dict[tuple[int, ...], list[tuple[int, int]]] = {}
    for shard, i, nbytes in (w for ws in results for w in ws):
        by_shard.setdefault(shard, []).append((i, nbytes))
    for shard, written in by_shard.items():
        path = shard_file(store, array, shard)
        finalize_slots(tmp_path(path, job), path, layout, written)

    before = store_info(store, [NAME])[0]
    assert before.layout == "fixed-slot" and before.chunks_stored == steps, "a chunk was lost"
    assert zarr.open_array(store, path=NAME)[:].tobytes() == src.values[:steps].tobytes(), "values differ"
    print(f"fixed-slot: {before.apparent_bytes} bytes apparent, {before.allocated_bytes} allocated")

    subprocess.run([sys.executable, "-m", "zopt", "compact", str(store), "--no-progress"], check=True)
    after = store_info(store, [NAME])[0]
    print(f"compact:    {after.apparent_bytes} bytes ({after.apparent_bytes / before.apparent_bytes:.0%})")
    assert after.layout == "compact" and after.chunks_stored == steps, "compaction lost a chunk"
    assert after.apparent_bytes < before.apparent_bytes
    assert zarr.open_array(store, path=NAME)[:].tobytes() == src.values[:steps].tobytes(), "values differ"


if __name__ == "__main__":
    main()

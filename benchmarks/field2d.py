"""The 2-D float32 source of ``benchmarks/shards.py`` (formerly in ``benchmarks/recompress.py``,
which now runs issue 19's 3-D job): a smooth field (sum of sines, 3 significant digits) over most
of the array, white noise in one band, a constant block — chunks that want different masks.
Shards of 2048×4096 with inner chunks of 256×256; variable ``field``; rows scale with the size."""

from __future__ import annotations

from pathlib import Path

SHAPE_PER_GIB = (16384, 16384)
INNER = (256, 256)
SHARD = (2048, 4096)


def make_source(path: Path, size_gib: float) -> tuple[int, int]:
    """Write the uncompressed source (chunks = shards) at ``path`` unless it exists; its shape."""
    import numpy as np
    import zarr

    rows = int(SHAPE_PER_GIB[0] * size_gib)
    shape = (rows - rows % SHARD[0], SHAPE_PER_GIB[1])
    if (path / "zarr.json").exists():
        return shape
    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    arr = root.create_array(
        "field", shape=shape, chunks=SHARD, dtype="f4", compressors=None, fill_value=0,
        dimension_names=("y", "x"),
    )
    rng = np.random.default_rng(42)
    x = np.linspace(0, 40, shape[1], dtype="f4")
    for r0 in range(0, shape[0], SHARD[0]):
        y = np.linspace(r0 / shape[0] * 30, (r0 + SHARD[0]) / shape[0] * 30, SHARD[0], dtype="f4")[:, None]
        block = np.round(np.sin(x) * np.cos(y) * 20 + 15, 3).astype("f4")
        if r0 // SHARD[0] % 4 == 1:
            block[:, : shape[1] // 4] = rng.standard_normal((SHARD[0], shape[1] // 4), dtype="f4")
        if r0 // SHARD[0] % 4 == 2:
            block[:, -shape[1] // 8 :] = -999.0
        arr[r0 : r0 + SHARD[0]] = block
    zarr.consolidate_metadata(str(path))
    return shape


def sine_field(mb: int, seed: int = 0):
    """A float32 field of ``mb`` MiB, 4096 wide: sin·cos waves × 100 plus unit noise, rounded to
    0.1 (the source of ``benchmarks/checksum.py`` and ``benchmarks/icechunk_write.py``)."""
    import numpy as np

    rows = mb * 2**20 // 4 // 4096
    rng = np.random.default_rng(seed)
    y = np.linspace(0, 40, rows, dtype="f4")[:, None]
    x = np.linspace(0, 60, 4096, dtype="f4")[None]
    return np.round(np.sin(y) * np.cos(x) * 100 + rng.standard_normal((rows, 4096), dtype="f4"), 1).astype("f4")

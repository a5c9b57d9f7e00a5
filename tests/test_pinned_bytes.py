"""The stored bytes of a fixed input and chain never change when the encode path is optimised.

The digests were taken before the hot encode path (``zopt.codecs.chain``, ``zopt.codecs.sync``,
``zopt.codecs.decisions``, the shard writers) was reworked for speed (issue 19): buffer reuse, trial
reuse and fewer copies must not change a single stored byte for the same chain and decisions.
The zstd frames come from the zstd library bundled with numcodecs, so the digests are keyed by
its version; an unknown version is skipped rather than guessed.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import zarr

from zopt import recompress

SHUFFLE_ZSTD = [{"name": "shuffle"}, {"name": "zstd", "configuration": {"level": 3}}]
CHAINS = {
    "conditional": [{"name": "bytes"}, {"name": "conditional", "configuration": {"codecs": SHUFFLE_ZSTD}}],
    "plain": [{"name": "bytes"}, *SHUFFLE_ZSTD],
}

# sha256 over (shard key, shard bytes) in key order, per numcodecs' bundled zstd version
PINNED: dict[str, dict[tuple[str, str, int], str]] = {
    "10506": {  # zstd 1.5.6 (numcodecs 0.16 and 0.17)
        ("conditional", "compact", 32): "db4e840bced2b80dad11b225bb5ef6334572cb666adba04dadd3caa09a1afe9c",
        ("conditional", "compact", 128): "785b59c7207745be1107ceb455c02160996040ca843d58f4b7a395ff1d84ca3d",
        ("conditional", "fixed-slot", 32): "7114f19adc0184960f1868efc5b5fc6f745016a8a93e7b85a04f6bd2fd592d80",
        ("conditional", "fixed-slot", 128): "5ffcafc8c0a6ef9d2831a8276a2796f941a2d97c6f22f0470a56d5a5e702f3ab",
        ("plain", "compact", 32): "d81b207c4e920af98aeec74651ec7c5d8a76352e2a0ae52dee5ca1921b8efda4",
        ("plain", "compact", 128): "6cb1b611e110087da505b15e567a9cfe7d77097185fdec39868d50ade5c3517e",
        ("plain", "fixed-slot", 32): "520d10a77adbca42e2e0d1a27dac672501a181763318bafab8dddca807b183c9",
        ("plain", "fixed-slot", 128): "b05a4f981738573698fb2432a176d4eebd0f5da92a728b083494ad9214143279",
    }
}


def _zstd_version() -> str:
    from numcodecs import zstd

    return str(getattr(zstd, "VERSION_NUMBER", f"numcodecs-{numcodecs.__version__}"))


def _data() -> np.ndarray:
    """(256, 512) float32: a smooth field, random bits, a constant block and a fill-value block,
    each aligned to the large chunks, so every mask is taken at both chunk sizes."""
    y = np.linspace(0, 12, 256, dtype="f4")[:, None]
    x = np.linspace(0, 30, 512, dtype="f4")[None]
    a = np.round(np.sin(x) * np.cos(y) * 20 + 15, 3).astype("f4")
    a[:128, :128] = np.random.default_rng(7).integers(0, 2**32, (128, 128), dtype=np.uint32).view("f4")
    a[128:, 256:384] = -999.0
    a[128:, 384:] = 0.0
    return a


def _digest(store: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in (store / "v" / "c").rglob("*") if p.is_file()):
        h.update(f.relative_to(store).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[tuple[str, int], Path]:
    """The same values stored three ways: in chunks of (128, 256) stored raw (read by region),
    and in chunks equal to the inner chunks, raw or zstd-compressed (read chunk by chunk into a
    reused buffer, ``zopt.store.chunk_feed``)."""
    from zarr.codecs import ZstdCodec

    root = tmp_path_factory.mktemp("pinned")
    a = _data()
    out = {}
    for kind, chunks, compressors in [("region", None, None), ("aligned-raw", 0, None), ("aligned-zstd", 0, [ZstdCodec(level=1)])]:
        for inner in (32, 128):
            path = root / f"{kind}-{inner}.zarr"
            g = zarr.open_group(path, mode="w")
            g.create_array("v", shape=a.shape, chunks=(128, 256) if chunks is None else (inner, inner), dtype="f4",
                           fill_value=0, dimension_names=("y", "x"), compressors=compressors)[:] = a
            out[(kind, inner)] = path
    return out


@pytest.mark.parametrize("kind", ["region", "aligned-raw", "aligned-zstd"])
@pytest.mark.parametrize("inner", [32, 128])  # 4 KiB chunks get full trials, 64 KiB ones sampled ones
@pytest.mark.parametrize("layout", ["compact", "fixed-slot"])
@pytest.mark.parametrize("chain", sorted(CHAINS))
def test_stored_shards_are_the_pinned_bytes(sources, tmp_path, chain, layout, inner, kind):
    dst = tmp_path / "d.zarr"
    report = recompress(
        sources[(kind, inner)], dst, codecs=json.dumps(CHAINS[chain]), chunks=(inner, inner), shards=(128, 256), layout=layout,
        checksum=False,  # the bytes of the chain as pinned; fixed-slot's default crc32c (issue 16) is tested elsewhere
    )
    np.testing.assert_array_equal(zarr.open_array(dst, path="v")[:], _data())
    if chain == "conditional":  # every mask the chain can take is exercised
        assert set(report.masks()) == {0b00, 0b10, 0b11}
    pinned = PINNED.get(_zstd_version())
    if pinned is None:
        pytest.skip(f"no pinned digests for zstd {_zstd_version()}")
    assert _digest(dst) == pinned[(chain, layout, inner)]

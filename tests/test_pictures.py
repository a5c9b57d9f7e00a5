"""Chunk-grid pictures: ``zopt info --png`` (masks and ratios read from a store) and
``zopt plan show --png`` (1-D and N-D plans)."""

from __future__ import annotations

import collections

import numpy as np
import zarr
from click.testing import CliRunner

from zopt import ConditionalCodec, ShuffleCodec
from zopt.cli.commands import main
from zopt.readback.info import chunk_grids, store_info

PNG = b"\x89PNG\r\n\x1a\n"


def _store(tmp_path, sharded: bool, name: str = "s.zarr"):
    """A 2-D array whose chunks are smooth (mask 11), random (00) or fill (not stored)."""
    from zarr.codecs import ZstdCodec

    rng = np.random.default_rng(0)
    a = np.tile(np.linspace(0, 1, 64, dtype="f4"), (64, 1))
    a[:16, 16:32] = rng.integers(0, 2**32, (16, 16), dtype=np.uint32).view("f4")  # random bytes
    a[16:32, :16] = 0  # the fill value
    codec = ConditionalCodec(codecs=[ShuffleCodec(), ZstdCodec(level=3)], decision="compress_if_smaller")
    z = zarr.create_array(tmp_path / name, name="v", shape=a.shape, dtype="f4", chunks=(16, 16),
                          shards=(32, 64) if sharded else None, compressors=[codec], fill_value=0,
                          dimension_names=("y", "x"), attributes={"units": "K"})
    z[:] = a
    return z


def test_chunk_grids_read_masks_and_ratios_of_every_chunk(tmp_path):
    for sharded in (True, False):
        store = tmp_path / f"{sharded}.zarr"
        z = _store(tmp_path, sharded, store.name)
        masks, ratios = chunk_grids(store, z)
        assert masks.shape == ratios.shape == (4, 4)
        assert masks[1, 0] == -1 and np.isnan(ratios[1, 0])  # fill chunk: not stored
        assert masks[0, 1] in (0, 0b10) and masks[2, 2] == 0b11
        assert ratios[2, 2] > 4 and ratios[0, 1] < 1.1
        stored = collections.Counter(int(m) for m in masks.ravel() if m >= 0)
        assert stored == store_info(store, ["v"])[0].masks  # the same headers as zopt info


def test_info_png_and_1d_plan_png(tmp_path):
    _store(tmp_path, True)
    runner = CliRunner()
    res = runner.invoke(main, ["info", str(tmp_path / "s.zarr"), "--png", str(tmp_path / "i.png")])
    assert res.exit_code == 0, res.output
    assert f"wrote {tmp_path / 'i.png'}" in res.output.replace("\n", "")
    assert (tmp_path / "i.png").read_bytes()[:8] == PNG and (tmp_path / "i.png").stat().st_size > 10_000
    # a 1-D array: mask strip and ratio bars
    a = np.repeat(np.arange(40, dtype="f4"), 48)
    a[480:960] = 0
    zarr.create_array(tmp_path / "one.zarr", name="t", shape=a.shape, dtype="f4", chunks=(48,), compressors=None,
                      fill_value=0, dimension_names=("time",))[:] = a
    res = runner.invoke(main, ["plan", str(tmp_path / "one.zarr"), "--policy", "smallest", "-o",
                               str(tmp_path / "p.zarr"), "--no-progress"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(main, ["plan", "show", str(tmp_path / "p.zarr"), "--png", str(tmp_path / "p.png")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "p.png").read_bytes()[:8] == PNG and (tmp_path / "p.png").stat().st_size > 10_000
    res = runner.invoke(main, ["info", str(tmp_path / "one.zarr"), "nope", "--png", str(tmp_path / "n.png")])
    assert res.exit_code == 1 and "nope" in res.output and not (tmp_path / "n.png").exists()

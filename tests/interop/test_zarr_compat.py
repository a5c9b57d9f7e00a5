"""zopt on every zarr-python it supports (3.1 on Python 3.11, 3.4 on Python 3.13: both CI legs).

What zarr changed between those versions lives in ``zopt.compat.zarr_compat``; these tests check that
module's answers and, end to end, that every codec works under every pipeline the installed zarr
ships, that outputs open in a fresh interpreter without ``import zopt`` and without warnings,
that big-endian sources survive recompress, raw reads and compaction, and that an array the
installed zarr cannot serve is named with its codec and the zarr version.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import zarr
from click.testing import CliRunner
from zarr.abc.codec import BytesBytesCodec
from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec, ZstdCodec
from zarr.registry import register_codec

from zopt.cli.commands import main
from zopt.codecs.conditional import ConditionalCodec
from zopt.codecs.decisions import MaskGrid
from zopt.codecs.shuffle import ShuffleCodec
from zopt.compat import zarr_compat as compat
from zopt.errors import ChunkIndexUnavailableError, UnsupportedArrayError, ZoptError

ZOPT_PIPELINE = "zopt.codecs.pipeline.ChunkIndexCodecPipeline"
PIPELINES = [ZOPT_PIPELINE, "zarr.core.codec_pipeline.BatchedCodecPipeline"]
if compat.HAS_FUSED_PIPELINE:  # zarr >= 3.3
    PIPELINES.append("zarr.core.codec_pipeline.FusedCodecPipeline")


def _field(shape=(64, 80), seed=0) -> np.ndarray:
    """Smooth rows, a noise block and a zero band: chunks that want different masks."""
    rng = np.random.default_rng(seed)
    a = np.round(np.sin(np.linspace(0, 9, shape[0]))[:, None] * np.arange(shape[1]), 2).astype("f4")
    a[:16, :20] = rng.standard_normal((16, 20))
    a[48:] = 0
    return a


# -- the compat module's answers ------------------------------------------------------------------


def test_enum_and_string_forms_read_the_same():
    """zarr <= 3.2 holds Endian/index_location enums, 3.3+ plain strings: both read alike."""
    big = BytesCodec(endian="big")
    assert compat.endian_of(big) == "big" and compat.endian_text("little") == "little"
    assert compat.endian_of(BytesCodec(endian=None)) is None
    sharding = ShardingCodec(chunk_shape=(2,), index_location="start")
    assert compat.index_location_of(sharding) == "start"

    @dataclass
    class _Enum:  # the shape of zarr 3.1's enums
        value: str

    assert compat.endian_text(_Enum("big")) == "big"
    with pytest.raises(ValueError, match="endian: 'middle'"):
        compat.endian_text("middle")


def test_unknown_codecs_and_refused_configurations_name_the_codec_and_zarr_version():
    with pytest.raises(ValueError, match=rf"codecs\[1\]: unknown codec 'nope'.*{zarr.__version__}"):
        compat.resolve_codec({"name": "nope"}, where="codecs[1]")
    with pytest.raises(ValueError, match=rf"codec 'zstd' refused its configuration under zarr-python {zarr.__version__}"):
        compat.resolve_codec({"name": "zstd", "configuration": {"level": "high"}})
    assert compat.resolve_codec({"name": "zstd", "configuration": {"level": 3}}) == ZstdCodec(level=3)


@pytest.mark.parametrize("sharded", [False, True])
def test_an_array_zarr_cannot_serve_is_named_with_codec_and_zarr_version(tmp_path, sharded):
    """A float where zstd wants an integer level: zarr 3.1 and 3.4 both refuse it, with a
    TypeError from deep inside zarr; zopt names the array, the codec and the zarr version."""
    from zopt import recompress

    g = zarr.open_group(tmp_path / "s.zarr", mode="w")
    g.create_array("v", shape=(4, 4), chunks=(2, 2), dtype="f4", fill_value=0,
                   shards=(4, 4) if sharded else None)[:] = 1
    meta_path = tmp_path / "s.zarr" / "v" / "zarr.json"
    meta = json.loads(meta_path.read_text())
    bad = {"name": "zstd", "configuration": {"level": 2.5, "checksum": False}}
    chain = meta["codecs"][0]["configuration"]["codecs"] if sharded else meta["codecs"]
    chain.append(bad)
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(UnsupportedArrayError, match=rf"array 'v'.*codec 'zstd' cannot be served with zarr-python {zarr.__version__}"):
        compat.open_array(tmp_path / "s.zarr", path="v")
    with pytest.raises(ZoptError, match="codec 'zstd'"):
        recompress(tmp_path / "s.zarr", tmp_path / "d.zarr")
    assert not (tmp_path / "d.zarr").exists()


# -- sync capability and pipelines ----------------------------------------------------------------


@dataclass(frozen=True)
class AsyncOnlyIdentity(BytesBytesCodec):
    """A bytes→bytes codec with no synchronous methods (as third-party codecs may be)."""

    is_fixed_size = True

    @classmethod
    def from_dict(cls, data):
        return cls()

    def to_dict(self):
        return {"name": "test.async_identity"}

    def compute_encoded_size(self, n, spec):
        return n

    async def _encode_single(self, chunk_bytes, chunk_spec):
        return chunk_bytes

    async def _decode_single(self, chunk_bytes, chunk_spec):
        return chunk_bytes


register_codec("test.async_identity", AsyncOnlyIdentity)


def test_conditional_is_sync_capable_exactly_when_all_its_codecs_are():
    sync = ConditionalCodec(codecs=[ShuffleCodec(element_size=4), ZstdCodec(level=3)])
    assert sync._sync_capable and compat.supports_sync(sync)
    not_sync = ConditionalCodec(codecs=[AsyncOnlyIdentity(), ZstdCodec(level=3)])
    assert not not_sync._sync_capable and not compat.supports_sync(not_sync)
    if compat.HAS_FUSED_PIPELINE:  # zarr's own check: sharding then declines its sync path too
        outer = ShardingCodec(chunk_shape=(4,), codecs=[BytesCodec(), not_sync])
        assert not compat.supports_sync(outer)


def _create(store, pipeline, *, sharded, compressors, shape=(64, 80)):
    with zarr.config.set({"codec_pipeline.path": pipeline}):
        return zarr.create_array(store, shape=shape, chunks=(16, 20), shards=(32, 40) if sharded else None,
                                 dtype="f4", fill_value=0, compressors=compressors)


def _stored(store: zarr.storage.MemoryStore) -> dict[str, bytes]:
    return {k: v.to_bytes() for k, v in store._store_dict.items() if not k.endswith("zarr.json")}


@pytest.mark.parametrize("sharded", [False, True], ids=["chunks", "shards"])
@pytest.mark.parametrize("inner", ["sync", "async-only"])
def test_every_pipeline_writes_and_reads_the_same_conditional_bytes(sharded, inner):
    """Each pipeline zarr ships (and zopt's) round-trips ``conditional`` chunks bit for bit and
    stores the very bytes zopt's pipeline stores, with sync-capable and async-only codecs."""
    a = _field()
    codecs = [ShuffleCodec(element_size=4), ZstdCodec(level=3)]
    if inner == "async-only":
        codecs.insert(0, AsyncOnlyIdentity())
    stored = {}
    for pipeline in PIPELINES:
        store = zarr.storage.MemoryStore()
        cond = ConditionalCodec(codecs=codecs, decision="compress_if_smaller")
        with zarr.config.set({"codec_pipeline.path": pipeline}):
            z = _create(store, pipeline, sharded=sharded, compressors=[cond])
            z[:] = a
            np.testing.assert_array_equal(zarr.open_array(store, mode="r")[:], a)
            np.testing.assert_array_equal(zarr.open_array(store, mode="r")[5:40, 7:61], a[5:40, 7:61])
        stored[pipeline] = _stored(store)
    reference = stored[ZOPT_PIPELINE]
    assert len(reference) == (4 if sharded else 12)  # the chunks of the zero band are not stored
    for pipeline, files in stored.items():
        assert files == reference, pipeline


@pytest.mark.parametrize("sharded", [False, True], ids=["chunks", "shards"])
def test_a_decision_needing_the_chunk_index_is_refused_where_the_pipeline_cannot_pass_it(sharded):
    """A mask grid under zarr's own pipelines: an error naming the pipeline, never masks decided
    with a wrong or missing index. Under zopt's pipeline every chunk gets its planned mask."""
    a = _field()
    grid = np.arange(16).reshape(4, 4) % 4  # masks 0..3 over the 4x4 (inner-)chunk grid
    a[48:] = 1  # every chunk stored
    for pipeline in PIPELINES:
        store = zarr.storage.MemoryStore()
        cond = ConditionalCodec(codecs=[ShuffleCodec(element_size=4), ZstdCodec(level=3)], decision=MaskGrid(grid))
        z = _create(store, pipeline, sharded=sharded, compressors=[cond])
        with zarr.config.set({"codec_pipeline.path": pipeline}):
            if pipeline != ZOPT_PIPELINE:
                with pytest.raises(ChunkIndexUnavailableError, match=pipeline.rsplit(".", 1)[1]):
                    z[:] = a
                continue
            z[:] = a
            np.testing.assert_array_equal(zarr.open_array(store, mode="r")[:], a)
        if not sharded:
            headers = {tuple(int(x) for x in k.split("/")[1:]): v[0] for k, v in _stored(store).items()}
            assert headers == {idx: grid[idx] for idx in np.ndindex(4, 4)}


# -- scale_offset / cast_value: zopt's and zarr's implementations ----------------------------------


def _zarr_has_own(name: str) -> bool:
    reg = compat.codec_registry(name)
    return reg is not None and any(not q.startswith("zopt.") for q in reg)


@pytest.mark.skipif(not _zarr_has_own("cast_value"), reason="zarr-python < 3.2 ships no scale_offset/cast_value of its own (docs/interop.md)")
def test_zarr_and_zopt_implementations_store_the_same_bytes():
    """Every case both implementations support: same stored bytes, and each reads the other's."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    targets = {"int8": np.int8, "uint8": np.uint8, "int16": np.int16, "uint16": np.uint16, "int32": np.int32}
    zarr_impl = {n: next(q for q in compat.codec_registry(n) if not q.startswith("zopt.")) for n in ("scale_offset", "cast_value")}
    zopt_impl = {n: next(q for q in compat.codec_registry(n) if q.startswith("zopt.")) for n in ("scale_offset", "cast_value")}

    @settings(max_examples=60, deadline=None)
    @given(
        src=st.sampled_from(["float32", "float64"]),
        target=st.sampled_from(sorted(targets)),
        rounding=st.sampled_from(["nearest-even", "towards-zero", "towards-positive", "towards-negative", "nearest-away"]),
        clamp=st.booleans(),
        scale=st.sampled_from([1, 2, 10, 0.5, 100]),
        offset=st.sampled_from([0, -3, 1.5]),
        seed=st.integers(0, 2**16),
    )
    def check(src, target, rounding, clamp, scale, offset, seed):
        info = np.iinfo(targets[target])
        rng = np.random.default_rng(seed)
        widen = 1.3 if clamp else 0.98  # out-of-range values only where clamp is asked for
        encoded = rng.uniform(info.min * widen, info.max * widen, 24)
        x = (encoded / scale + offset).astype(src)
        x[rng.integers(0, 24, 3)] = np.nan
        cast = {"data_type": target, "rounding": rounding, "scalar_map": {"encode": [["NaN", 0]], "decode": [[0, "NaN"]]}}
        if clamp:
            cast["out_of_range"] = "clamp"
        filters = [{"name": "scale_offset", "configuration": {"offset": offset, "scale": scale}},
                   {"name": "cast_value", "configuration": cast}]
        stored, values = {}, {}
        for label, impl in (("zarr", zarr_impl), ("zopt", zopt_impl)):
            with zarr.config.set({f"codecs.{k}": v for k, v in impl.items()}):
                store = zarr.storage.MemoryStore()
                z = zarr.create_array(store, shape=x.shape, chunks=(8,), dtype=src, fill_value=np.nan, filters=filters, compressors=None)
                assert type(z.metadata.codecs[0]).__module__.startswith(label)
                z[:] = x
                stored[label] = _stored(store)
                values[label] = z[:]
        assert stored["zarr"] == stored["zopt"]
        np.testing.assert_array_equal(values["zarr"], values["zopt"])

    check()


# -- fresh interpreters ------------------------------------------------------------------------------


def test_outputs_open_in_a_fresh_interpreter_without_import_or_warning(tmp_path):
    """ML data types, scale_offset/cast_value and sharded conditional arrays written with zopt
    read back bit for bit in a new process that never imports zopt itself, with warnings as
    errors (no "Codec 'scale_offset' not configured" warning on zarr >= 3.2)."""
    import ml_dtypes

    root = zarr.open_group(tmp_path / "s.zarr", mode="w")
    values = {
        "int4": np.arange(-8, 8).astype(ml_dtypes.int4),
        "bfloat16": np.linspace(-3, 3, 16).astype(ml_dtypes.bfloat16),
        "scaled": np.round(np.linspace(0, 5, 16), 1).astype("f4"),
        "cond": np.repeat(np.arange(4, dtype="f4"), 4),
    }
    root.create_array("int4", shape=(16,), chunks=(4,), dtype="int4", fill_value=0)[:] = values["int4"]
    root.create_array("bfloat16", shape=(16,), chunks=(4,), dtype="bfloat16", fill_value=0)[:] = values["bfloat16"]
    root.create_array("scaled", shape=(16,), chunks=(4,), dtype="f4", fill_value=0, filters=[
        {"name": "scale_offset", "configuration": {"offset": 0, "scale": 10}},
        {"name": "cast_value", "configuration": {"data_type": "uint8", "rounding": "nearest-even"}}])[:] = values["scaled"]
    root.create_array("cond", shape=(16,), chunks=(4,), shards=(8,), dtype="f4", fill_value=0, compressors=[
        ConditionalCodec(codecs=[ShuffleCodec(element_size=4), ZstdCodec(level=3)], decision="compress_if_smaller")])[:] = values["cond"]
    for name, v in values.items():
        np.save(tmp_path / f"{name}.npy", v.view(np.uint8 if v.dtype.itemsize == 1 else f"u{v.dtype.itemsize}"))
    code = textwrap.dedent(f"""
        import sys, warnings
        warnings.simplefilter("error")
        import numpy as np, zarr
        for name in {sorted(values)!r}:
            a = zarr.open_array({str(tmp_path / 's.zarr')!r}, path=name, mode="r")[:]
            ref = np.load({str(tmp_path)!r} + "/" + name + ".npy")
            assert np.array_equal(a.view(ref.dtype), ref), name
        print("ok", zarr.__version__)
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["ok", zarr.__version__]


def test_every_command_on_the_installed_zarr_and_a_fresh_reader(tmp_path):
    """recompress (compact and fixed-slot), compact, info, analyze, plan create, recompress --plan
    and --in-place through the CLI on the installed zarr; every output reads back bit for bit in a
    fresh interpreter that does not import zopt (tensorstore's reading of zopt's shards is
    tested in test_shards.py and test_packbits.py, on both legs)."""
    a = _field((96, 120), seed=3)
    src = tmp_path / "src.zarr"
    zarr.open_group(src, mode="w").create_array("v", shape=a.shape, chunks=(48, 60), dtype="f4", fill_value=0,
                                                 dimension_names=("y", "x"))[:] = a
    runner = CliRunner()

    def run(*args):
        res = runner.invoke(main, [*map(str, args), *(["--no-progress"] if args[0] in ("recompress", "compact") else [])])
        assert res.exit_code == 0, (args, res.output)
        return res.output

    shape = ["--chunks", "y=16,x=20", "--shards", "y=48,x=60"]
    run("recompress", src, tmp_path / "compact.zarr", *shape, "--menu", "classic")  # zopt's own chain here (test_candidates: the others)
    run("recompress", src, tmp_path / "slots.zarr", *shape, "--layout", "fixed-slot", "--slot-parts", "2")
    def row(output):
        return next(line for line in output.splitlines() if " v " in line)

    assert "fixed-slot" in row(run("info", tmp_path / "slots.zarr"))
    run("compact", tmp_path / "slots.zarr")
    assert "fixed-slot" not in row(run("info", tmp_path / "slots.zarr"))
    run("analyze", tmp_path / "compact.zarr", "-o", tmp_path / "analysis.zarr")
    plan_args = ["--policy", "compress_if_smaller", "-o", tmp_path / "plan.zarr", "--chunks", "y=16,x=20", "--no-progress"]
    run("plan", "create", src, *plan_args)
    run("recompress", src, tmp_path / "planned.zarr", *shape, "--plan", tmp_path / "plan.zarr")
    run("recompress", tmp_path / "compact.zarr", tmp_path / "never.zarr", *shape, "--decision", "never")
    run("recompress", tmp_path / "never.zarr", "--in-place", "--plan", tmp_path / "plan.zarr")
    outputs = ["compact", "slots", "planned", "never"]
    np.save(tmp_path / "a.npy", a)
    code = textwrap.dedent(f"""
        import warnings
        warnings.simplefilter("error")
        import numpy as np, zarr
        a = np.load({str(tmp_path / 'a.npy')!r})
        for name in {outputs!r}:
            out = zarr.open_array({str(tmp_path)!r} + "/" + name + ".zarr", path="v", mode="r")[:]
            assert out.tobytes() == a.tobytes(), name
        print("ok")
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr


# -- big-endian sources ------------------------------------------------------------------------------


def _big_endian_source(path: Path, a: np.ndarray, sharded: bool) -> None:
    big = BytesCodec(endian="big")
    if sharded:
        serializer = ShardingCodec(chunk_shape=(16, 20), codecs=[big],
                                   index_codecs=[BytesCodec(endian="big"), Crc32cCodec()], index_location="start")
        zarr.open_group(path, mode="w").create_array("v", shape=a.shape, chunks=(32, 40), dtype=">f4", fill_value=0,
                                                     serializer=serializer, compressors=None, dimension_names=("y", "x"))[:] = a
    else:
        zarr.open_group(path, mode="w").create_array("v", shape=a.shape, chunks=(16, 20), dtype=">f4", fill_value=0,
                                                     serializer=big, compressors=None, dimension_names=("y", "x"))[:] = a


@pytest.mark.parametrize("sharded", [False, True], ids=["chunks", "shards"])
def test_big_endian_sources_survive_raw_reads_recompress_and_compaction(tmp_path, sharded):
    from zopt import recompress
    from zopt.job.compact import compact
    from zopt.store.raw_read import RawChunkReader
    from zopt.store.shards import classify, layout_of, read_index

    a = _field(seed=5)
    a[48:] = -0.0  # sign bits survive only if every byte swap is right
    src = tmp_path / "big.zarr"
    _big_endian_source(src, a, sharded)
    if not sharded:  # the file really is big-endian
        assert (src / "v" / "c" / "0" / "0").read_bytes() == a[:16, :20].astype(">f4").tobytes()
    source = zarr.open_array(src, path="v")
    reader = RawChunkReader.open(src, source)
    assert reader is not None and reader.swap == (sys.byteorder == "little")
    region = (slice(3, 57), slice(5, 71))
    assert reader.read_region(region, 0).tobytes() == a[region].astype("f4").tobytes()

    dst = tmp_path / "slots.zarr"
    recompress(src, dst, chunks=(16, 20), shards=(32, 40), layout="fixed-slot", slot_parts=2)
    out = zarr.open_array(dst, path="v")
    assert out[:].tobytes() == a.astype(out.dtype).tobytes()
    lay = layout_of(out)
    files = [p for p in (dst / "v" / "c").rglob("*") if p.is_file()]
    assert {classify(read_index(f, lay), lay, f.stat().st_size) for f in files} == {"fixed-slot"}
    compact(dst)
    assert {classify(read_index(f, lay), lay, f.stat().st_size) for f in files} == {"compact"}
    assert zarr.open_array(dst, path="v")[:].tobytes() == a.astype(out.dtype).tobytes()


def test_a_big_endian_shard_index_is_read_and_compacted(tmp_path):
    """A fixed-slot shard whose index is big-endian (index_codecs bytes/big + crc32c), written
    by zopt's tasks: its index reads right, compaction keeps every chunk, readers agree."""
    from zopt.job.compact import compact
    from zopt.job.tasks import ShardJob as _ShardJob
    from zopt.job.tasks import finalize_shard as _finalize_shard
    from zopt.job.tasks import write_slot_part as _write_slot_part
    from zopt.job.work import slot_parts as _slot_parts
    from zopt.store.shards import classify, layout_of, read_index

    a = _field(seed=6)
    src = tmp_path / "src.zarr"
    zarr.open_group(src, mode="w").create_array("v", shape=a.shape, chunks=a.shape, dtype="f4", fill_value=0)[:] = a
    dst = tmp_path / "d.zarr"
    sharding = ShardingCodec(
        chunk_shape=(16, 20), index_location="end",
        codecs=[BytesCodec(endian="big"), ConditionalCodec(codecs=[ShuffleCodec(element_size=4), ZstdCodec(level=3)])],
        index_codecs=[BytesCodec(endian="big"), Crc32cCodec()],
    )
    z = zarr.open_group(dst, mode="w").create_array("v", shape=a.shape, chunks=(32, 40), dtype="f4", fill_value=0,
                                                    serializer=sharding, compressors=None)
    lay = layout_of(z)
    job = _ShardJob(str(src), "v", str(dst / "v"), lay, a.shape, "compress_if_smaller", "test", z.metadata.chunk_key_encoding)
    for coords in np.ndindex(2, 2):
        _finalize_shard(job, coords, *[_write_slot_part(job, coords, p) for p in _slot_parts(lay, 2)])
    files = sorted(p for p in (dst / "v" / "c").rglob("*") if p.is_file())
    index = read_index(files[0], lay)
    raw = files[0].read_bytes()[-lay.index_nbytes:-4]
    assert index.ravel().tolist() == np.frombuffer(raw, ">u8").tolist()
    assert {classify(read_index(f, lay), lay, f.stat().st_size) for f in files} == {"fixed-slot"}
    np.testing.assert_array_equal(zarr.open_array(dst, path="v")[:], a)
    compact(dst)
    assert {classify(read_index(f, lay), lay, f.stat().st_size) for f in files} == {"compact"}
    np.testing.assert_array_equal(zarr.open_array(dst, path="v")[:], a)


def test_the_startup_hook_imports_zopt_only_where_zarr_does_not_load_data_types():
    """zarr 3.1-3.3 never load ``zarr.data_type`` entry points: the hook imports zopt right
    after zarr there. zarr >= 3.4 loads them when it parses a data type: the hook stays out."""
    code = "import sys, zarr; print('zopt' in sys.modules)"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.strip() == str(not compat.DATA_TYPE_ENTRY_POINTS_LOADED)

"""The ``conditional`` conformance fixtures (``tests/fixtures/conditional``, issue 29).

(a) zarr-python with zopt decodes every fixture to its ``.npy`` bit for bit, under every codec
pipeline zarr ships; (b) ``generate.py`` rebuilds the folder byte for byte, so the fixtures
cannot drift from zopt silently; (c) a reader written here from the spec's text alone — header
bytes, bit ``i`` = bit ``i % 8`` of byte ``i // 8``, reserved bits 0, reverse-order decoding,
the registered fixed-slot offsets — decodes every chunk without zopt and must agree with the
``.npy`` and with the masks in ``fixtures.json``; a spec reading mistake shared by zopt's writer
and reader would show here. The last test keeps the README's coverage claims true.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import json
import math
import re
import sys
from pathlib import Path

import google_crc32c
import numcodecs
import numpy as np
import pytest
import zarr
from zarr.storage import LocalStore

from zopt.codecs.conditional import ConditionalCodec, conditional_codecs_in
from zopt.compat import zarr_compat as compat

FIXDIR = Path(__file__).resolve().parents[1] / "fixtures" / "conditional"
MANIFEST = json.loads((FIXDIR / "fixtures.json").read_text())
NAMES = sorted(MANIFEST)
PIPELINES = ["zopt.codecs.pipeline.ChunkIndexCodecPipeline", "zarr.core.codec_pipeline.BatchedCodecPipeline"]
if compat.HAS_FUSED_PIPELINE:  # zarr >= 3.3
    PIPELINES.append("zarr.core.codec_pipeline.FusedCodecPipeline")
EMPTY = 2**64 - 1


@functools.cache
def _generator():
    """``generate.py`` as a module (registered in ``sys.modules``: its dataclasses need it)."""
    spec = importlib.util.spec_from_file_location("conditional_fixtures_generate", FIXDIR / "generate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _expected(name: str) -> np.ndarray:
    return np.load(FIXDIR / f"{name}.npy")


# -- (a) zarr-python + zopt ------------------------------------------------------------------------


@pytest.mark.parametrize("pipeline", PIPELINES)
@pytest.mark.parametrize("name", NAMES)
def test_zarr_python_with_zopt_decodes_every_fixture(name, pipeline):
    with zarr.config.set({"codec_pipeline.path": pipeline}):
        arr = zarr.open_array(LocalStore(FIXDIR / f"{name}.zarr", read_only=True), mode="r")
        got = arr[...]
    want = _expected(name)
    assert (got.dtype, got.shape) == (want.dtype, want.shape)
    assert got.tobytes() == want.tobytes()  # bit for bit: NaN, -0.0 and the edge chunks included
    (codec,) = conditional_codecs_in(arr.metadata.codecs)
    assert isinstance(codec, ConditionalCodec)
    assert (codec.codec_name, codec.header_bits) == (MANIFEST[name]["codec_name"], MANIFEST[name]["header_bits"])


def test_the_readme_python_block_runs_in_the_fixture_folder(monkeypatch):
    (block,) = re.findall(r"```python\n(.*?)```", (FIXDIR / "README.md").read_text(), re.S)
    monkeypatch.chdir(FIXDIR)
    exec(compile(block, "fixtures README", "exec"), {})  # noqa: S102 - the README's own code


# -- (b) the generator ------------------------------------------------------------------------------


def _files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and p.name != "generate.py" and "__pycache__" not in p.parts
    }


def test_generator_rebuilds_the_committed_bytes(tmp_path):
    _generator().build(tmp_path / "out")
    committed, rebuilt = _files(FIXDIR), _files(tmp_path / "out")
    assert sorted(rebuilt) == sorted(committed)
    assert [k for k in sorted(committed) if committed[k] != rebuilt[k]] == []


def test_generator_refuses_a_folder_that_is_not_a_fixture_folder(tmp_path):
    (tmp_path / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="out: .*notes.txt"):
        _generator().build(tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "keep me"


# -- (c) a reference reader from the spec's text ----------------------------------------------------


def _unshuffle(data: bytes, element_size: int) -> bytes:
    # shuffle (the spec's examples): byte b of element e is stored at b * n_elements + e
    assert len(data) % element_size == 0, "the fixtures shuffle whole elements only"
    return np.frombuffer(data, np.uint8).reshape(element_size, -1).T.tobytes()


def _strip_crc32c(data: bytes) -> bytes:
    assert google_crc32c.value(data[:-4]) == int.from_bytes(data[-4:], "little"), "crc32c mismatch"
    return data[:-4]


def _decode_wrapped(codec: dict, data: bytes) -> bytes:
    name, config = codec["name"], codec.get("configuration", {})
    if name == "shuffle":
        return _unshuffle(data, config["element_size"])
    if name == "numcodecs.shuffle":  # the registered name: the same bytes, ``elementsize``
        return _unshuffle(data, config["elementsize"])
    if name == "zstd":
        return bytes(numcodecs.Zstd().decode(data))
    if name == "gzip":
        return gzip.decompress(data)
    if name == "crc32c":
        return _strip_crc32c(data)
    raise AssertionError(f"the reference reader knows no codec {name!r}")


def _decode_conditional(config: dict, stored: bytes) -> tuple[int, bytes]:
    """Spec "Decoding Process": header of header_bits / 8 bytes, then the wrapped codecs whose
    bit is 1, last to first. Returns (mask, decoded bytes)."""
    codecs = config["codecs"]
    header_bits = config.get("header_bits", math.ceil(len(codecs) / 8) * 8)  # "Codec Configuration"
    assert header_bits % 8 == 0 and header_bits >= len(codecs)
    header, data = stored[: header_bits // 8], stored[header_bits // 8 :]
    bits = [header[i // 8] >> (i % 8) & 1 for i in range(header_bits)]  # little-endian bit order
    assert not any(bits[len(codecs) :]), f"reserved bits set in header {header.hex()}"
    for i in reversed(range(len(codecs))):
        if bits[i]:
            data = _decode_wrapped(codecs[i], data)
    return sum(b << i for i, b in enumerate(bits)), data


def _decode_chain(codecs: list[dict], stored: bytes, shape: list[int], dtype: str) -> tuple[int, np.ndarray]:
    """``[bytes(little), conditional, crc32c?]`` → (mask, chunk array)."""
    assert codecs[0] == {"name": "bytes", "configuration": {"endian": "little"}}
    mask = None
    for codec in reversed(codecs[1:]):
        assert codec["name"] in ("conditional", "optional", "crc32c"), codec
        if codec["name"] == "crc32c":
            stored = _strip_crc32c(stored)
        else:
            mask, stored = _decode_conditional(codec["configuration"], stored)
    return mask, np.frombuffer(stored, np.dtype(dtype).newbyteorder("<")).reshape(shape)


def _read_shard(config: dict, blob: bytes, shard: list[int], dtype: str) -> list[tuple[int, int, np.ndarray] | None]:
    """``sharding_indexed`` with index codecs ``[bytes(little), crc32c]``: per inner chunk (C
    order) ``(offset, mask, array)`` or None when absent."""
    assert config["index_codecs"] == [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]
    n = math.prod(s // c for s, c in zip(shard, config["chunk_shape"], strict=True))
    nbytes = 16 * n + 4
    index = blob[-nbytes:] if config["index_location"] == "end" else blob[:nbytes]
    table = np.frombuffer(_strip_crc32c(index), "<u8").reshape(n, 2)
    out = []
    for offset, size in table.tolist():
        if offset == EMPTY:
            assert size == EMPTY
            out.append(None)
            continue
        mask, chunk = _decode_chain(config["codecs"], blob[offset : offset + size], config["chunk_shape"], dtype)
        out.append((offset, mask, chunk))
    return out


def _place(out: np.ndarray, coords: tuple[int, ...], shape: list[int], chunk: np.ndarray) -> None:
    region = tuple(slice(c * s, min((c + 1) * s, n)) for c, s, n in zip(coords, shape, out.shape, strict=True))
    out[region] = chunk[tuple(slice(0, r.stop - r.start) for r in region)]


@pytest.mark.parametrize("name", NAMES)
def test_reference_reader_from_the_spec_agrees(name):
    root = FIXDIR / f"{name}.zarr"
    meta = json.loads((root / "zarr.json").read_text())
    assert meta["chunk_key_encoding"] == {"name": "default", "configuration": {"separator": "/"}}
    dtype, grid_shape = meta["data_type"], meta["chunk_grid"]["configuration"]["chunk_shape"]
    out = np.full(meta["shape"], meta["fill_value"], dtype=np.dtype(dtype))
    expected_masks = MANIFEST[name]["masks"]
    top = meta["codecs"][0] if meta["codecs"][0]["name"] == "sharding_indexed" else None
    seen = {}
    for coords in np.ndindex(*[math.ceil(n / c) for n, c in zip(meta["shape"], grid_shape, strict=True)]):
        key = "c/" + "/".join(map(str, coords))
        blob = (root / key).read_bytes()
        if top is None:
            seen[key], chunk = _decode_chain(meta["codecs"], blob, grid_shape, dtype)
            _place(out, coords, grid_shape, chunk)
            continue
        config, inner = top["configuration"], top["configuration"]["chunk_shape"]
        cps = [s // c for s, c in zip(grid_shape, inner, strict=True)]
        entries = _read_shard(config, blob, grid_shape, dtype)
        seen[key] = [None if e is None else e[1] for e in entries]
        for i, entry in enumerate(entries):
            if entry is None:
                continue
            local = np.unravel_index(i, cps)
            _place(out, tuple(c * k + j for c, k, j in zip(coords, cps, local, strict=True)), inner, entry[2])
            if MANIFEST[name]["layout"] == "fixed-slot":
                # zarr-extensions' `conditional`: offset = chunk_index_in_shard * padded_slot_size,
                # padded_slot_size = uncompressed_chunk_size + ceil(header_bits / 8)
                (cond,) = [c for c in config["codecs"] if c["name"] == "conditional"]
                slot = math.prod(inner) * np.dtype(dtype).itemsize + cond["configuration"]["header_bits"] // 8
                assert entry[0] == i * slot
    assert seen == expected_masks
    want = _expected(name)
    assert out.dtype == want.dtype and out.tobytes() == want.tobytes()


def test_a_mask_over_two_header_bytes_is_stored_little_endian():
    # bits 0 and 9 of 10 codecs ("little-endian bit order", header_bits 16): bytes 01 02
    assert MANIFEST["n10_uint8_hb16"]["masks"]["c/1/0"] == 0x201
    assert (FIXDIR / "n10_uint8_hb16.zarr" / "c" / "1" / "0").read_bytes()[:2] == b"\x01\x02"


# -- coverage and size -------------------------------------------------------------------------------

#: codec names registered in zarr-extensions (``codecs/<name>``)
REGISTERED = {"bytes", "sharding_indexed", "conditional", "zstd", "gzip", "crc32c", "numcodecs.shuffle"}


def _codec_names(codecs: list[dict]):
    for c in codecs:
        yield c["name"]
        for key in ("codecs", "index_codecs"):
            yield from _codec_names(c.get("configuration", {}).get(key, []))



def test_fixtures_cover_what_the_readme_says():
    m = MANIFEST
    assert {f["header_bits"] for f in m.values()} == set(range(8, 65, 8))
    for n in range(1, 9):  # each codec count has all-zero, all-ones and (n > 1) skipping masks
        masks = {x for f in m.values() if f["n_codecs"] == n for v in f["masks"].values()
                 for x in (v if isinstance(v, list) else [v]) if x is not None}
        assert {0, (1 << n) - 1} <= masks, n
        assert n == 1 or masks - {0, (1 << n) - 1}, n
    assert {f["layout"] for f in m.values()} == {"unsharded", "packed", "fixed-slot"}
    assert {f["codec_name"] for f in m.values()} == {"conditional", "optional"}
    metas = {name: json.loads((FIXDIR / f"{name}.zarr" / "zarr.json").read_text()) for name in m}
    assert {"uint8", "int16", "float32", "float64"} <= {x["data_type"] for x in metas.values()}
    assert any("header_bits" not in json.dumps(x) for x in metas.values())  # the spec's default
    edges = [n for n, x in metas.items()
             if any(s % c for s, c in zip(x["shape"], x["chunk_grid"]["configuration"]["chunk_shape"], strict=True))]
    assert len(edges) >= len(m) // 2
    registered = {n for n, f in m.items() if f["registered_codecs_only"]}
    assert {n for n, f in m.items() if f["layout"] != "unsharded"} <= registered
    for name, x in metas.items():  # the flag says whether every codec is registered in zarr-extensions
        assert (name in registered) == (set(_codec_names(x["codecs"])) <= REGISTERED), name
    readme = (FIXDIR / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in m)


def test_fixtures_stay_small():
    sizes = {p.name: sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) for p in FIXDIR.glob("*.zarr")}
    assert max(sizes.values()) < 4096, sizes
    assert sum(f.stat().st_size for f in FIXDIR.rglob("*") if f.is_file()) < 256 * 1024

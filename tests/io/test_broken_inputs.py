"""Inputs that used to slip through (issue 28): a broken array ``zarr.json`` silently dropped,
truncated or invalid JSON reported without its file, a zero-length dimension."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

from zopt import recompress
from zopt.cli.commands import main
from zopt.io.paths import PARTIAL_SUFFIX
from zopt.io.source_check import BrokenMetadataError, check_store, load_json
from zopt.readback.verify import verify


def _store(tmp_path: Path) -> Path:
    src = tmp_path / "src.zarr"
    g = zarr.create_group(str(src), attributes={"title": "t"})
    g.create_array("a", shape=(10, 8), chunks=(5, 4), dtype="f4", dimension_names=("y", "x"))[...] = 1.5
    g.create_array("b", shape=(10, 8), chunks=(5, 4), dtype="i2", dimension_names=("y", "x"))[...] = 7
    sub = g.create_group("sub")
    sub.create_array("c", shape=(10, 8), chunks=(5, 4), dtype="f8", dimension_names=("y", "x"))[...] = 2.5
    return src


def _cli(*args) -> tuple[int, str]:
    r = CliRunner().invoke(main, [*map(str, args), "--no-progress"])
    return r.exit_code, " ".join(r.output.split())


@pytest.mark.parametrize("path", ["b", "sub/c"])
def test_a_broken_array_document_fails_naming_the_file_unless_skip_broken(tmp_path, path):
    src = _store(tmp_path)
    doc = src / path / "zarr.json"
    d = json.loads(doc.read_text())
    del d["shape"]  # zarr-python skips such a node with a warning: the array silently vanished
    doc.write_text(json.dumps(d))
    dst = tmp_path / "out.zarr"
    code, out = _cli("recompress", src, dst)
    assert code == 1 and str(doc) in out and "field 'shape' is missing" in out and "--skip-broken" in out
    assert not dst.exists()
    code, out = _cli("verify", src, _store(tmp_path / "other"))
    assert code == 1 and str(doc) in out

    code, out = _cli("recompress", src, dst, "--skip-broken")
    assert code == 3 and f"skipped 1 array(s) with broken metadata: {path}" in out
    written = {p for p, _ in zarr.open_group(str(dst), mode="r").members(max_depth=None)}
    assert path not in written and "a" in written
    code, out = _cli("verify", src, dst, "--skip-broken")
    assert code == 3 and f"skipped 1 source array(s) with broken metadata: {path}" in out
    assert _cli("verify", src, dst)[0] == 1


@pytest.mark.parametrize("content, offset", [
    (b'{"zarr_format": 3, "node_type": "array", "shape": [10', 53),
    (b'{"zarr_format": 3,, "node_type": "group"}', 18),
    (b'{"attributes": {"t": "\xc3\xa9\xc3\xa9"}, oops}', 30),  # a byte offset (character 28)
])
def test_invalid_json_names_the_file_and_the_byte_offset(tmp_path, content, offset):
    src = _store(tmp_path)
    doc = src / "b" / "zarr.json"
    doc.write_bytes(content)
    with pytest.raises(BrokenMetadataError, match=rf"{doc}: invalid JSON at byte {offset} of {len(content)}"):
        check_store(str(src), skip_broken=True)  # never skipped: what is below cannot be trusted
    code, out = _cli("recompress", src, tmp_path / "out.zarr")
    assert code == 1 and f"{doc}: invalid JSON at byte {offset}" in out and "Traceback" not in out
    code, out = _cli("verify", _store(tmp_path / "other"), src)
    assert code == 1 and f"{doc}: invalid JSON at byte {offset}" in out


@pytest.mark.parametrize("command", ["info", "analyze", "compact"])
def test_every_command_names_the_file_of_invalid_json(tmp_path, command):
    src = _store(tmp_path)
    doc = src / "sub" / "zarr.json"
    doc.write_bytes(b'{"zarr_format": 3, "node_type": "gro')
    r = CliRunner().invoke(main, [command, str(src)])
    out = " ".join(r.output.split())
    assert r.exit_code == 1 and f"{doc}: invalid JSON at byte 32 of 36: Unterminated string" in out, out


@pytest.mark.parametrize("content", [b"null", b"[]", b'"x"'])
def test_a_document_that_is_not_an_object_is_named(tmp_path, content):
    src = _store(tmp_path)
    (src / "zarr.json").write_bytes(content)
    code, out = _cli("recompress", src, tmp_path / "out.zarr")
    assert code == 1 and f"{src / 'zarr.json'}: holds" in out and "not a JSON object" in out


def test_non_utf8_json_names_the_byte(tmp_path):
    with pytest.raises(BrokenMetadataError, match=r"f.json: not UTF-8 at byte 3 of 5"):
        load_json(b'{"a\xff"', "f.json")


def test_a_bad_data_type_names_the_file(tmp_path):
    src = _store(tmp_path)
    doc = src / "a" / "zarr.json"
    d = json.loads(doc.read_text())
    d["data_type"] = "bogus"
    doc.write_text(json.dumps(d))
    code, out = _cli("recompress", src, tmp_path / "out.zarr")
    assert code == 1 and str(doc) in out and "data type 'bogus'" in out


def test_what_zarr_cannot_skip_is_refused_even_with_skip_broken(tmp_path):
    src = _store(tmp_path)
    doc = src / "a" / "zarr.json"
    d = json.loads(doc.read_text())
    d["shape"] = "ten"  # zarr-python fails on the whole group, it does not skip the array
    doc.write_text(json.dumps(d))
    code, out = _cli("recompress", src, tmp_path / "out.zarr", "--skip-broken")
    assert code == 1 and "cannot be skipped" in out and f"{doc}: field 'shape' is str, not list" in out
    assert not (tmp_path / "out.zarr").exists()


def test_a_valid_store_passes_the_check_untouched(tmp_path):
    src = _store(tmp_path)
    before = {p: p.read_bytes() for p in src.rglob("*") if p.is_file()}
    assert check_store(str(src)) == []
    dst = tmp_path / "out.zarr"
    recompress(src, dst, scheduler="synchronous")
    assert verify(src, dst).ok
    assert {p: p.read_bytes() for p in src.rglob("*") if p.is_file()} == before
    np.testing.assert_array_equal(zarr.open_array(str(dst), path="sub/c")[...], 2.5)


# -- zero-length dimensions ---------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(0,), (0, 8), (6, 0), (0, 0, 3)])
def test_chunk_choice_for_a_zero_length_dimension(shape):
    from zopt.planning.chunking import choose_chunks

    chunks, shards = choose_chunks(shape, 4, None, None)
    assert len(chunks) == len(shape) and all(c >= 1 for c in chunks)
    assert all(c <= max(1, s) for c, s in zip(chunks, shape, strict=True))


@pytest.mark.parametrize("extra", [{}, {"chunks": "y=2,x=4", "shards": "y=4,x=8"}])
def test_empty_arrays_copy_as_empty_arrays_with_their_metadata(tmp_path, extra):
    src = tmp_path / "src.zarr"
    g = zarr.create_group(str(src), attributes={"title": "t"})
    g.create_array("e", shape=(0, 8), chunks=(4, 4), dtype="f4", dimension_names=("y", "x"), fill_value=-9.0,
                   attributes={"units": "K"})
    g.create_array("v", shape=(6, 8), chunks=(3, 4), dtype="i4", dimension_names=("y", "x"))[...] = np.arange(48).reshape(6, 8)
    root = tmp_path / "root.zarr"
    zarr.create_array(str(root), shape=(0,), chunks=(5,), dtype="u2", attributes={"a": 1})
    for s in (src, root):
        dst = tmp_path / f"out-{s.name}"
        recompress(s, dst, scheduler="synchronous", **(extra if s is src else {}))
        assert verify(s, dst).ok
    assert [p.name for p in (tmp_path / "out-src.zarr" / "e").rglob("*")] == ["zarr.json"]  # no chunk written
    e = zarr.open_array(str(tmp_path / "out-src.zarr"), path="e", mode="r")
    assert e.shape == (0, 8) and e.dtype == np.float32 and e.fill_value == -9.0
    assert dict(e.attrs) == {"units": "K"} and e.metadata.dimension_names == ("y", "x")
    assert e[...].shape == (0, 8)
    r = zarr.open_array(str(tmp_path / "out-root.zarr"), mode="r")
    assert r.shape == (0,) and r.dtype == np.uint16 and dict(r.attrs) == {"a": 1}


def _edit_doc(doc: Path, change) -> None:
    d = json.loads(doc.read_text())
    change(d)
    doc.write_text(json.dumps(d))


def _grid(d, shape):
    d["chunk_grid"]["configuration"]["chunk_shape"] = shape


@pytest.mark.parametrize("change,words", [
    (lambda d: _grid(d, [0, 4]), "chunk_grid chunk_shape [0, 4] is not a list of 2 integers >= 1"),  # ZeroDivisionError
    (lambda d: _grid(d, [-5, 4]), "chunk_grid chunk_shape [-5, 4] is not a list of 2 integers >= 1"),  # numpy's words
    (lambda d: _grid(d, [5]), "chunk_grid chunk_shape [5] is not a list of 2 integers >= 1"),
    (lambda d: d.update(shape=[2**62, 8]), "shape [4611686018427387904, 8] in chunks of [5, 4] is 1.84e+18 chunks, "
                                           "more than zopt handles"),  # MemoryError
])
@pytest.mark.parametrize("command", ["recompress", "verify", "info", "analyze"])
def test_impossible_chunking_is_one_line_naming_the_file(tmp_path, change, words, command):
    src = _store(tmp_path)
    doc = src / "b" / "zarr.json"
    _edit_doc(doc, change)
    args = {"recompress": [src, tmp_path / "out.zarr"], "verify": [src, src], "info": [src], "analyze": [src]}[command]
    r = CliRunner().invoke(main, [command, *map(str, args)])
    line = " ".join(r.output.split())
    assert r.exit_code == 1 and f"{doc}: {words}" in line and "Traceback" not in r.output, line
    assert len(r.output.strip().splitlines()) == 1 and not (tmp_path / "out.zarr").exists()


def test_an_inner_chunk_shape_of_zero_is_named(tmp_path):
    src = tmp_path / "s.zarr"
    zarr.create_array(str(src), shape=(10, 8), chunks=(5, 4), shards=(10, 8), dtype="f4")[...] = 1
    doc = src / "zarr.json"
    _edit_doc(doc, lambda d: d["codecs"][0]["configuration"].update(chunk_shape=[0, 4]))
    code, out = _cli("recompress", src, tmp_path / "out.zarr")
    assert code == 1 and f"{doc}: sharding_indexed chunk_shape [0, 4] is not a list of 2 integers >= 1" in out, out


def test_a_symlink_loop_in_a_source_store_is_named_and_nothing_is_written(tmp_path):
    """``loop -> .`` inside a store: recompress recursed into loop/loop/… for 37 s until
    ENAMETOOLONG and left an 11 MB partial store; now refused before anything is written."""
    src = _store(tmp_path)
    os.symlink(".", src / "sub" / "loop")
    dst = tmp_path / "out.zarr"
    for args in (["recompress", src, dst], ["verify", src, src], ["info", src], ["analyze", src]):
        r = CliRunner().invoke(main, [*map(str, args)])
        line = " ".join(r.output.split())
        assert r.exit_code == 1 and f"{src / 'sub' / 'loop'}: a symbolic link to {src / 'sub'}, which holds the link" \
            in line, (args, line)
    assert not dst.exists() and not Path(str(dst) + PARTIAL_SUFFIX).exists()
    os.remove(src / "sub" / "loop")
    os.symlink(str(src / "sub"), src / "alias")  # a link to a sibling is no loop: not refused by this check
    check_store(str(src))


def test_garbage_chunk_bytes_name_the_chunk_and_the_store_once(tmp_path):
    src = _store(tmp_path)
    (src / "a" / "c" / "1" / "0").write_bytes(b"garbage" * 10)
    code, out = _cli("recompress", src, tmp_path / "out.zarr")
    assert code == 1 and f"cannot decode chunk 'a/c/1/0' in {src}: zstd: ValueError" in out, out
    assert out.count("cannot decode") == 1
    code, out = _cli("verify", src, src)
    assert code == 1 and f"cannot decode chunk 'a/c/1/0' in {src}" in out and out.count("cannot decode") == 1, out


@pytest.mark.parametrize("kind", ["garbage", "index"])
def test_a_corrupt_shard_is_named_once_with_its_store(tmp_path, kind):
    src = tmp_path / "s.zarr"
    g = zarr.create_group(str(src))
    g.create_array("a", shape=(20, 10), chunks=(5, 10), shards=(10, 10), dtype="f4")[...] = np.arange(200.0).reshape(20, 10)
    shard = src / "a" / "c" / "1" / "0"
    data = bytearray(shard.read_bytes())
    if kind == "garbage":
        data[:40] = b"\x07" * 40  # the first inner chunk's bytes
    else:
        data[-20:-10] = b"\x00\x01" * 5  # the index
    shard.write_bytes(bytes(data))
    for args in (["recompress", src, tmp_path / "out.zarr"], ["verify", src, src]):
        code, out = _cli(*args)
        if kind == "garbage":
            assert code == 1 and f"cannot decode inner chunk (0, 0) of shard 'a/c/1/0' in {src}: zstd" in out, out
            assert out.count("cannot decode") == 1
        else:
            assert code == 1 and f"shard 'a/c/1/0' in {src}: index does not decode" in out, out


def test_info_on_a_folder_says_it_is_not_a_zarr_store_and_names_the_stores_inside(tmp_path):
    plain = tmp_path / "plain"
    (plain / "x").mkdir(parents=True)
    (plain / "f.txt").write_text("hi")
    holder = tmp_path / "holder"
    holder.mkdir()
    zarr.create_group(str(holder / "inner.zarr")).create_array("a", shape=(3,), dtype="i1")
    for command in ("info", "analyze", "compact"):
        r = CliRunner().invoke(main, [command, str(plain)])
        code, out = r.exit_code, " ".join(r.output.split())
        assert code == 1 and f"store: '{plain}' is not a Zarr store (no zarr.json, .zgroup or .zarray at its root)" \
            in out and "No group found" not in out, out
    r = CliRunner().invoke(main, ["info", str(holder)])
    line = " ".join(r.output.split())
    assert r.exit_code == 1 and f"'{holder}' is not a Zarr store" in line and \
        f"it holds the Zarr store inner.zarr: give it ({holder / 'inner.zarr'})" in line, line
    code, out = _cli("recompress", holder, tmp_path / "out.zarr")
    assert code == 1 and "is not a Zarr store" in out and "inner.zarr" in out and "netCDF" not in out, out
    code, out = _cli("verify", _store(tmp_path / "s"), holder)
    assert code == 1 and f"dst: '{holder}' is not a Zarr store" in out and "inner.zarr" in out, out

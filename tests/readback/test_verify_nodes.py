"""``zopt verify``'s blind spots (issue 28): each test edits DST the way a user or a hostile
file could, and verify must exit 1 naming the path."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

from zopt import recompress
from zopt.cli.commands import main


def _edit(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def _verify(src, dst, *extra) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["verify", str(src), str(dst), "--no-progress", *extra])
    return r.exit_code, " ".join(r.output.split())


@pytest.fixture
def pair(tmp_path):
    src = tmp_path / "src.zarr"
    g = zarr.create_group(str(src), attributes={"title": "t", "history": ["a", "b"]})
    g.create_array("a", shape=(20, 30), chunks=(10, 10), dtype="f4", fill_value=-1.0)[...] = np.arange(600).reshape(20, 30)
    sub = g.create_group("sub", attributes={"level": 1})
    sub.create_array("b", shape=(20, 30), chunks=(10, 10), dtype="i2")[...] = np.arange(600).reshape(20, 30)
    dst = tmp_path / "out.zarr"
    recompress(src, dst, chunks=(10, 10), scheduler="synchronous")
    assert _verify(src, dst)[0] == 0
    return src, dst


@pytest.mark.parametrize("where, name", [("", "root group"), ("sub", "group 'sub'")])
def test_an_edited_group_attribute_fails_naming_the_group(pair, where, name):
    src, dst = pair
    doc = dst / where / "zarr.json"
    _edit(doc, lambda d: d["attributes"].update(title="forged"))
    code, out = _verify(src, dst)
    assert code == 1 and f"{name}: attribute 'title' only in dst" in out or f"{name}: attribute 'title':" in out


def test_a_consolidated_copy_that_disagrees_with_the_array_fails_naming_it(pair):
    src, dst = pair
    root = json.loads((dst / "zarr.json").read_text())
    assert set(root["consolidated_metadata"]["metadata"]) >= {"a", "sub", "sub/b"}

    def forge(d):
        entry = d["consolidated_metadata"]["metadata"]["a"]
        entry["data_type"], entry["fill_value"] = "float64", 7.0

    _edit(dst / "zarr.json", forge)
    assert zarr.open_group(str(dst), mode="r")["a"].dtype == np.float64  # what a consolidated reader sees
    code, out = _verify(src, dst)
    assert code == 1
    assert "consolidated metadata: 'a' disagrees with its zarr.json in data_type, fill_value" in out


def test_a_node_missing_from_the_consolidated_copy_fails_naming_it(pair):
    src, dst = pair
    _edit(dst / "zarr.json", lambda d: d["consolidated_metadata"]["metadata"].pop("sub/b"))
    code, out = _verify(src, dst)
    assert code == 1 and "consolidated metadata: 'sub/b' is missing" in out


def _lossy_pair(tmp_path):
    src = tmp_path / "src.zarr"
    z = zarr.create_group(str(src)).create_array("v", shape=(40, 40), chunks=(20, 20), dtype="f4", fill_value=np.nan)
    z[...] = np.random.default_rng(0).normal(size=(40, 40)).astype("f4")
    dst = tmp_path / "out.zarr"
    recompress(src, dst, chunks=(20, 20), lossy=["v=abs:0.01"], scheduler="synchronous")
    return src, dst


def test_a_forged_lossy_bound_is_caught(tmp_path):
    src, dst = _lossy_pair(tmp_path)
    assert _verify(src, dst)[0] == 0
    # the stored values are replaced by values 0.5 away, and the attribute widened to match
    a = zarr.open_array(str(dst), path="v", mode="r+")
    a[...] = a[...] + np.float32(0.5)
    _edit(dst / "v" / "zarr.json", lambda d: d["attributes"]["zopt_lossy"].update({"abs": 1.0}))
    code, out = _verify(src, dst)
    assert code == 1 and "zopt_lossy records abs 1.0 but its spec is 'abs:0.01'" in out
    # the spec forged too: only the user can say which bound holds
    forged = {"abs": 1.0, "spec": "abs:1.0"}
    _edit(dst / "v" / "zarr.json", lambda d: d["attributes"]["zopt_lossy"].update(forged))
    code, out = _verify(src, dst)
    assert code == 1 and "consolidated metadata: 'v' disagrees with its zarr.json in attributes" in out
    _edit(dst / "zarr.json", lambda d: d["consolidated_metadata"]["metadata"]["v"]["attributes"]["zopt_lossy"].update(forged))
    assert _verify(src, dst)[0] == 0  # a consistent forgery: the attribute alone cannot tell
    code, out = _verify(src, dst, "--bound", "v=abs:0.01")
    assert code == 1 and "v (4 of 4 chunks differ" in out
    from zopt.readback.verify import verify

    (check,) = verify(src, dst, bounds={"v": "abs:0.01"}).checks
    assert check.bound == "abs 0.01 (--bound)" and check.violations == 1600


def test_bound_option_is_checked(tmp_path):
    src, dst = _lossy_pair(tmp_path)
    assert _verify(src, dst, "--bound", "v=abs:0.01")[0] == 0
    code, out = _verify(src, dst, "--bound", "v=abs:0")
    assert code == 1 and "--bound: 'abs:0' is not abs:E" in out
    code, out = _verify(src, dst, "--bound", "nope=abs:1")
    assert code == 1 and "--bound: ['nope'] are not arrays" in out

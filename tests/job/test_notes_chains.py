"""Every note naming a chain names the chain the array's zarr.json holds (issue 35 item 5), over
every kind of job: one file, a group with child groups, several files with re-expressed packing,
lossy abs/rel/keepbits/info (and a lossy variable written lossless), a plan, in-place, Icechunk,
a store URL.

The notes checked: ``chains chosen from the menu`` / ``chains recorded in the plan``
(``NAME=CANDIDATE``, optionally ``(after the re-expression's scale_offset + cast_value T)``),
``lossy tails chosen by trial`` (``NAME=TAIL``) and ``lossy NAME=…: … lossless default
(CANDIDATE) … written lossless``. The expected chain is built independently of the job: the
candidate's chain for the data type it receives, through ``zarr.create_array`` in memory, compared
with the stored inner chain (``sharding_indexed``'s codecs, ``crc32c`` left out)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.storage import MemoryStore

from zopt import recompress, recompress_in_place
from zopt.planning.candidates import CANDIDATES
from zopt.planning.chains import split_chain

TAIL_CANDIDATE = {"pcodec": "pcodec-8", "blosc": "blosc-shuffle-5"}


def _field(shape, seed=0, scale=50.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.meshgrid(np.linspace(0, 6, shape[-2]), np.linspace(0, 9, shape[-1]), indexing="ij")
    base = scale * np.sin(y) * np.cos(x) + 3 * x
    return (base + rng.normal(0, scale / 200, size=shape)).astype("f4")


def _dem() -> np.ndarray:
    """Whole metres as float32 (a DEM): pcodec stores it losslessly in fewer bytes than any rounding."""
    return np.round(_field((96, 128), 3, 800.0)).astype("f4")


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("notes")
    out = {}
    nc = root / "one.nc"
    xr.Dataset({"tos": (("time", "y", "x"), np.stack([_field((96, 128), s) for s in range(3)])),
                "dem": (("y", "x"), _dem()),
                "count": (("y", "x"), (np.arange(96 * 128) % 700).reshape(96, 128).astype("i2"))},
               coords={"time": np.arange(3.0)}).to_netcdf(nc)
    out["nc"] = str(nc)
    store = root / "groups.zarr"
    g = zarr.open_group(store, mode="w", zarr_format=3)
    g.create_array("tos", shape=(96, 128), chunks=(48, 128), dtype="f4", compressors=None,
                   dimension_names=("y", "x"))[...] = _field((96, 128), 1)
    sub = g.create_group("sub")
    sub.create_array("dem", shape=(96, 128), chunks=(48, 128), dtype="f4", compressors=None,
                     dimension_names=("y", "x"))[...] = _dem()
    sub.create_array("n", shape=(96, 128), chunks=(48, 128), dtype="i4", compressors=None,
                     dimension_names=("y", "x"))[...] = np.arange(96 * 128, dtype="i4").reshape(96, 128) // 7
    out["groups"] = str(store)
    many = root / "many"
    many.mkdir()
    for i in range(6):  # two files of six packed differently
        scale, offset = (0.02, 10.0) if i in (2, 4) else (0.01, 0.0)
        sst = _field((4, 40, 50), 10 + i, 10.0).astype("f8").round(2)
        xr.Dataset({"sst": (("time", "y", "x"), sst)}, coords={"time": np.arange(4.0 * i, 4.0 * i + 4)}).to_netcdf(
            many / f"f{i}.nc", encoding={"sst": {"dtype": "int16", "scale_factor": scale, "add_offset": offset,
                                                 "_FillValue": -32767}})
    out["many"] = str(many / "*.nc")
    return out


def _named(notes: list[str]) -> tuple[dict[str, tuple[str, str | None]], dict[str, str], dict[str, str]]:
    """({array: (candidate, cast_value type or None)}, {array: lossy tail}, {array: lossless candidate})."""
    menu, tails, lossless = {}, {}, {}
    for note in notes:
        group, _, text = note.rpartition(": chains ") if ": chains " in note else ("", "", note)
        prefix = f"{group}/" if group else ""
        text = "chains " + text if group else text
        m = re.match(r"chains (?:chosen from the menu|recorded in the plan) \([^)]*\): (.*)$", text)
        if m:
            for item in re.findall(r"([\w/]+)=([\w-]+)( \(after the re-expression's scale_offset \+ cast_value (\w+)\))?",
                                   m.group(1)):
                menu[prefix + item[0]] = (item[1], item[3] or None)
        m = re.match(r"(?:(\w+): )?lossy tails chosen by trial \([^)]*\): (.*)$", note)
        if m:
            for name, tail in re.findall(r"([\w/]+)=([\w:,]+)", m.group(2)):
                tails[(f"{m.group(1)}/" if m.group(1) else "") + name] = tail
        m = re.match(r"(?:(\w+): )?lossy (\w+)=\S+: on sampled chunks the lossless default \(([\w-]+)\).*written lossless",
                     note)
        if m:
            lossless[(f"{m.group(1)}/" if m.group(1) else "") + m.group(2)] = m.group(3)
    return menu, tails, lossless


def _inner(array: zarr.Array) -> list[dict]:
    codecs = array.metadata.to_dict()["codecs"]
    if len(codecs) == 1 and codecs[0]["name"] == "sharding_indexed":
        codecs = codecs[0]["configuration"]["codecs"]
    return json.loads(json.dumps([c for c in codecs if c["name"] != "crc32c"]))


def _expected(chain: list[dict], dtype) -> list[dict]:
    """The codecs zarr stores for ``chain`` on an array of ``dtype`` (an unsharded array in memory)."""
    a = zarr.create_array(MemoryStore(), shape=(8,), chunks=(8,), dtype=dtype, **split_chain(chain))
    return json.loads(json.dumps(a.metadata.to_dict()["codecs"]))


def check_notes(notes: list[str], open_array, lossy_base: list[dict] | None = None) -> int:
    """Assert that every chain the notes name is the stored chain; return how many were checked."""
    menu, tails, lossless = _named(notes)
    checked = 0
    for name, (cand, cast) in menu.items():
        a = open_array(name)
        stored = _inner(a)
        if cast is not None:  # files packed differently: the candidate after scale_offset + cast_value
            assert [c["name"] for c in stored[:2]] == ["scale_offset", "cast_value"], (name, stored)
            assert stored[1]["configuration"]["data_type"] == cast, (name, stored)
            stored, dtype = stored[2:], np.dtype(cast)
        else:
            dtype = a.dtype
        assert stored == _expected(CANDIDATES[cand].chain(dtype), dtype), (name, cand, stored)
        checked += 1
    for name, tail in tails.items():
        a = open_array(name)
        record = a.attrs["zopt_lossy"]
        assert record["tail"] == tail
        stored = _inner(a)
        if record["method"] == "abs":
            assert [c["name"] for c in stored[:2]] == ["scale_offset", "cast_value"], (name, stored)
            dtype = np.dtype(stored[1]["configuration"]["data_type"])
            stored = stored[2:]
        else:
            dtype = a.dtype
        chain = CANDIDATES[TAIL_CANDIDATE[tail]].chain(dtype) if tail in TAIL_CANDIDATE else lossy_base
        assert stored == _expected(chain, dtype), (name, tail, stored)
        checked += 1
    for name, cand in lossless.items():
        a = open_array(name)
        assert "zopt_lossy" not in a.attrs and _inner(a) == _expected(CANDIDATES[cand].chain(a.dtype), a.dtype)
        assert menu.get(name, (cand, None))[0] == cand  # the menu note, when it names it, agrees
        checked += 1
    return checked


def _local(dst: Path):
    return lambda name: zarr.open_array(dst, path=name, mode="r")


JOBS = ["one-file", "child-groups", "re-expressed", "lossy-abs", "lossy-rel", "lossy-keepbits", "lossy-info",
        "lossy-written-lossless", "plan", "in-place", "icechunk", "store-url"]


@pytest.mark.parametrize("job", JOBS)
def test_every_note_names_the_chain_zarr_json_holds(files, tmp_path, job):
    dst = tmp_path / "out.zarr"
    opener = _local(dst)
    expect = {"one-file": 3, "child-groups": 3, "re-expressed": 2, "plan": 2, "in-place": 0}.get(job, 1)
    if job == "one-file":
        report = recompress(files["nc"], dst)
    elif job == "child-groups":
        report = recompress(files["groups"], dst)
    elif job == "re-expressed":
        report = recompress(files["many"], dst, concat_dim="time", readers="zarr-python-3.2")
        assert "sst" in _named(report.notes)[0] and _named(report.notes)[0]["sst"][1] == "int16"
    elif job.startswith("lossy-"):
        spec = {"lossy-abs": "tos=abs:0.01", "lossy-rel": "tos=rel:0.001", "lossy-keepbits": "tos=keepbits:8",
                "lossy-info": "tos=info:0.99", "lossy-written-lossless": "dem=abs:0.16"}[job]
        report = recompress(files["nc"], dst, lossy=[spec], variables=["tos", "dem"])
        menu, tails, lossless = _named(report.notes)
        if job == "lossy-written-lossless":
            assert lossless == {"dem": "pcodec-8"}, report.notes
        else:
            assert set(tails) == {"tos"} and "dem" in menu, report.notes
        expect = 2 + (job == "lossy-written-lossless")
    elif job == "plan":
        from zopt.job.analyze import analyze
        from zopt.planning.plan import make_plan

        src = tmp_path / "src.zarr"
        recompress(files["nc"], src, variables=["tos", "dem"], codecs='[{"name": "bytes"}]')
        make_plan(analyze(str(src), menu="default")).save(tmp_path / "p.zarr")
        report = recompress(str(src), dst, plan=tmp_path / "p.zarr")
    elif job == "in-place":
        recompress(files["nc"], dst, menu="classic", variables=["tos"])
        report = recompress_in_place(str(dst))
    elif job == "icechunk":
        ic = pytest.importorskip("icechunk")
        repo_path = str(tmp_path / "repo")
        ic.Repository.create(ic.local_filesystem_storage(repo_path))
        report = recompress(files["nc"], f"icechunk://{repo_path}")
        repo = ic.Repository.open(ic.local_filesystem_storage(repo_path))
        store = repo.readonly_session(branch="main").store
        opener = lambda name: zarr.open_array(store, path=name, mode="r")  # noqa: E731
        expect = 3
    else:
        url = f"memory://notes-{tmp_path.name}.zarr"
        report = recompress(files["nc"], url)
        store = zarr.storage.FsspecStore.from_url(url, read_only=True)
        opener = lambda name: zarr.open_array(store, path=name, mode="r")  # noqa: E731
        expect = 3
    assert check_notes(report.notes, opener, lossy_base=None) >= expect, report.notes

"""One job object (issue 29): ``zopt recompress``, ``zopt.recompress`` and ``zopt.xarray.recompress``
build the same ``RecompressJob``; the journal fingerprints it by its fields; child groups get every
option, with only their paths changed."""

from __future__ import annotations

import dataclasses
import inspect
import json
import re

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

import zopt
import zopt.xarray
from zopt.cli.commands import main
from zopt.job import api
from zopt.job.options import RecompressJob
from zopt.planning.candidates import MENUS
from zopt.store.journal import fingerprint


def _tree(path) -> None:
    """A store with a root array ``T`` and a child group ``child`` with ``T`` and ``U``, float32."""
    rng = np.random.default_rng(0)
    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    for where in (root, root.create_group("child")):
        for name in ("T", "U"):
            data = np.cumsum(rng.normal(size=(40, 64)), axis=1).astype("f4")
            a = where.create_array(name, shape=data.shape, dtype="f4", chunks=(40, 64), compressors=None,
                                   dimension_names=("y", "x"))
            a[:] = data


def test_the_public_functions_are_importable_from_zopt():
    for name in ("recompress", "recompress_in_place", "verify", "analyze", "plan", "compact", "info"):
        fn = getattr(zopt, name)
        assert callable(fn) and fn.__doc__ and len(fn.__doc__) > 200, name
    assert "Raises" in zopt.recompress.__doc__ and "bytes" in zopt.recompress.__doc__


def test_recompress_takes_exactly_the_job_fields():
    params = list(inspect.signature(api.recompress).parameters)
    fields = [f.name for f in dataclasses.fields(RecompressJob) if not f.metadata.get("derived")]
    assert sorted(params) == sorted(fields)  # the derived fields: what RecompressJob.parse makes of them


def test_the_three_front_doors_build_the_same_job(tmp_path, monkeypatch):
    src = tmp_path / "src.zarr"
    _tree(src)
    seen: list[RecompressJob] = []

    def capture(job):
        seen.append(job)
        return api.RecompressReport(dst=str(job.dst), arrays=[], seconds=0.0, job=job)

    monkeypatch.setattr(api, "run_job", capture)
    dst = str(tmp_path / "out.zarr")
    opts = {"chunks": "y=20", "shards": "y=40", "preset": "archive", "layout": "fixed-slot", "slot_parts": 2,
            "variables": ["T", "child/T"], "lossy": ["child/T=abs:0.01"], "readers": "zopt", "max_memory": "1GiB"}
    result = CliRunner().invoke(main, ["recompress", str(src), dst, "--chunks", "y=20", "--shards", "y=40",
                                       "--preset", "archive", "--layout", "fixed-slot", "--slot-parts", "2",
                                       "--variable", "T", "--variable", "child/T", "--lossy", "child/T=abs:0.01",
                                       "--readers", "zopt", "--max-memory", "1GiB", "--no-progress"])
    assert result.exit_code == 0, result.output
    zopt.recompress(str(src), dst, **opts)
    zopt.xarray.recompress(str(src), dst, **opts)
    cli_job, py_job, xr_job = seen
    assert cli_job == py_job == xr_job
    names = ["T"]
    fps = [fingerprint(str(src), names, j.fingerprinted()) for j in seen]
    assert fps[0] == fps[1] == fps[2]
    assert json.loads(json.dumps(fps[0]["options"]))["decision"] == "compress_if_smaller"  # the archive preset's


def test_a_field_added_is_fingerprinted_unless_it_says_how():
    job = RecompressJob.parse("a", "b")
    keys = set(job.fingerprinted())
    how = {f.name for f in dataclasses.fields(RecompressJob) if f.metadata.get("fingerprint") is False}
    assert keys == {f.name for f in dataclasses.fields(RecompressJob)} - how - {"src", "dst", "preset"}
    assert RecompressJob.parse("a", "b", layout="fixed-slot").fingerprinted() != job.fingerprinted()
    assert RecompressJob.parse("a", "b", scheduler="synchronous").fingerprinted() == job.fingerprinted()


@pytest.mark.parametrize(("option", "value", "allowed"), [
    ("layout", "slots", "compact"), ("checksum", "yes", "None, True, False"), ("slot_parts", 0, ">= 1"),
    ("preset", "tiny", "archive"), ("max_memory", "lots", "2GiB"), ("lossy", ["T"], "VAR=SPEC"),
])
def test_bad_options_are_refused_by_name(option, value, allowed):
    with pytest.raises(ValueError, match=option) as info:
        RecompressJob.parse("a", "b", **{option: value})
    assert allowed in str(info.value)


def _child_codecs(dst, name="child/T"):
    return json.dumps(zarr.open_array(str(dst), path=name).metadata.to_dict()["codecs"])


# each option given to a source with a child group, and how it shows in the child's output
CHILD_OPTIONS = {
    "codecs": ({"codecs": [{"name": "bytes"}, {"name": "zstd", "configuration": {"level": 7}}]},
               lambda dst, rep: '"level": 7' in _child_codecs(dst)),
    "preset": ({"preset": "fast"}, lambda dst, rep: re.search(r'"level": 1[,}]', _child_codecs(dst)) is not None),
    "menu": ({"menu": "pcodec-8"}, lambda dst, rep: "pcodec" in _child_codecs(dst)),
    "chunks": ({"chunks": "y=10"}, lambda dst, rep: zarr.open_array(str(dst), path="child/T").chunks == (10, 64)),
    "shards": ({"chunks": "y=10", "shards": "y=20"},
               lambda dst, rep: zarr.open_array(str(dst), path="child/T").shards == (20, 64)),
    "decision": ({"decision": "never"}, lambda dst, rep: set(next(a for a in rep.arrays if a.name == "child/T").masks) == {0}),
    "variables": ({"variables": ["child/U"]},  # child/U rewritten (compressed), child/T copied as it was (raw)
                  lambda dst, rep: len(_child_codecs(dst, "child/U")) > len(_child_codecs(dst)) and
                  [a.name for a in rep.arrays] == ["child/U"]),
    "layout": ({"shards": "y=20", "chunks": "y=10", "layout": "fixed-slot"},
               lambda dst, rep: next(a for a in rep.arrays if a.name == "child/T").layout == "fixed-slot"),
    "slot_parts": ({"shards": "y=40", "chunks": "y=10", "layout": "fixed-slot", "slot_parts": 4},
                   lambda dst, rep: next(a for a in rep.arrays if a.name == "child/T").tasks >= 4),
    "lossy": ({"lossy": ["child/T=abs:0.5"]},
              lambda dst, rep: "zopt_lossy" in zarr.open_array(str(dst), path="child/T").attrs),
    "checksum": ({"chunks": "y=10", "shards": "y=20", "checksum": True}, lambda dst, rep: "crc32c" in _child_codecs(dst)),
    "scheduler": ({"scheduler": "synchronous"}, lambda dst, rep: any(a.name == "child/T" for a in rep.arrays)),
}


@pytest.mark.parametrize("option", sorted(CHILD_OPTIONS))
def test_every_option_reaches_the_child_groups(tmp_path, option):
    src, dst = tmp_path / "src.zarr", tmp_path / "out.zarr"
    _tree(src)
    kwargs, honoured = CHILD_OPTIONS[option]
    report = zopt.recompress(str(src), str(dst), **kwargs)
    assert honoured(dst, report), option


def test_readers_max_memory_and_progress_reach_the_child_groups(tmp_path):
    src = tmp_path / "src.zarr"
    _tree(src)
    conditional = [{"name": "bytes"}, {"name": "conditional", "configuration": {"codecs": [{"name": "zstd", "configuration": {"level": 3}}]}}]
    with pytest.raises(ValueError, match="readers"):  # tensorstore cannot read conditional: refused in the child
        zopt.recompress(str(src), str(tmp_path / "a.zarr"), codecs=conditional, readers="tensorstore",
                        variables=["child/T"])
    assert not (tmp_path / "a.zarr").exists()
    zopt.recompress(str(src), str(tmp_path / "n.zarr"), readers="tensorstore")  # readers narrow the child's menu
    assert not {"conditional", "pcodec"} & set(re.findall(r"[a-z]+", _child_codecs(tmp_path / "n.zarr")))
    with pytest.raises(ValueError, match="max_memory"):
        zopt.recompress(str(src), str(tmp_path / "b.zarr"), max_memory=1000, variables=["child/T"])
    events = []
    zopt.recompress(str(src), str(tmp_path / "c.zarr"), progress=events.append)
    starts = [e for e in events if e.phase == "writing" and e.done == 0]
    assert len(starts) >= 2  # the root group's graph and the child's


def test_before_publish_sees_the_child_arrays_once(tmp_path):
    src = tmp_path / "src.zarr"
    _tree(src)
    seen = []
    zopt.recompress(str(src), str(tmp_path / "o.zarr"), before_publish=lambda partial, names: seen.append(sorted(names)))
    assert seen == [["T", "U", "child/T", "child/U"]]


def test_dry_run_plans_the_child_groups_and_prints_the_job(tmp_path):
    src = tmp_path / "src.zarr"
    _tree(src)
    result = CliRunner().invoke(main, ["recompress", str(src), str(tmp_path / "o.zarr"), "--dry-run", "--chunks", "y=10",
                                       "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "job: chunks=y=10, progress=False, dry_run=True" in result.output and "child/T" in result.output
    assert not (tmp_path / "o.zarr").exists()


def test_naming_only_root_variables_leaves_the_child_groups_as_they_were(tmp_path):
    src, dst = tmp_path / "src.zarr", tmp_path / "out.zarr"
    _tree(src)
    report = zopt.recompress(str(src), str(dst), variables=["T"])
    assert [a.name for a in report.arrays] == ["T"]
    raw = json.dumps(zarr.open_array(str(src), path="child/T").metadata.to_dict()["codecs"])
    assert _child_codecs(dst) == raw and _child_codecs(dst, "child/U") == raw


def test_lossy_for_a_group_the_source_lacks_is_refused_before_writing(tmp_path):
    src = tmp_path / "src.zarr"
    _tree(src)
    with pytest.raises(ValueError, match=r"lossy: \['zz'\] are not child groups"):
        zopt.recompress(str(src), str(tmp_path / "o.zarr"), lossy=["zz/T=abs:0.1"])
    assert not (tmp_path / "o.zarr").exists() and not (tmp_path / "o.zarr.zopt-partial").exists()


def test_a_presets_menu_and_budget_are_each_kept_unless_given():
    archive = RecompressJob.parse("a", "b", preset="archive", budget=2)
    assert archive.menu == MENUS["archive"] and archive.budget == 2.0
    assert RecompressJob.parse("a", "b", preset="archive", menu="default").budget == float("inf")
    with pytest.raises(ValueError, match="menu, budget"):  # fast names a chain: a menu would be ignored
        RecompressJob.parse("a", "b", preset="fast", menu="archive")


def test_a_plan_rewritten_at_the_same_path_is_a_different_job(tmp_path, monkeypatch):
    """The journal fingerprints the loaded plan's content, not the path it was given as."""
    import zopt.job.prepare

    src = tmp_path / "src.zarr"  # one group: a plan covers the arrays of one group
    data = np.cumsum(np.random.default_rng(1).normal(size=(40, 64)), axis=1).astype("f4")
    zarr.create_array(str(src), name="T", shape=data.shape, dtype="f4", chunks=(20, 64), compressors=None)[:] = data
    zopt.plan(str(src), ["T"], output=tmp_path / "p.zarr")
    seen = []
    real = zopt.job.prepare.fingerprint
    monkeypatch.setattr(zopt.job.prepare, "fingerprint", lambda *a, **k: seen.append(a[2]) or real(*a, **k))
    zopt.recompress(str(src), str(tmp_path / "o.zarr"), plan=str(tmp_path / "p.zarr"), variables=["T"], dry_run=True)
    assert isinstance(seen[0]["plan"], zopt.Plan)  # hashed by content (zopt.store.journal.fingerprint)


@pytest.mark.parametrize("options", [{"layout": "fixed-slot"}, {"slot_parts": 2}, {"checksum": True}])
def test_shard_options_with_no_sharded_array_are_named_in_a_note(tmp_path, options):
    """A small array stays unsharded by default: the shard-only options then change nothing, and
    the report says so instead of leaving them silently unapplied."""
    src = tmp_path / "s.zarr"
    zarr.create_array(src, name="v", shape=(40, 30), chunks=(40, 30), dtype="f4", fill_value=0)[:] = 1.5
    report = zopt.recompress(str(src), tmp_path / "a.zarr", **options)
    assert report.arrays[0].layout == "unsharded"
    assert any(re.match(rf"{list(options)[0]}\S*: no array is sharded", n) for n in report.notes), report.notes
    sharded = zopt.recompress(str(src), tmp_path / "b.zarr", shards=(40, 30), chunks=(20, 30), **options)
    assert sharded.arrays[0].layout != "unsharded" and not any("no array is sharded" in n for n in sharded.notes)


def test_the_unsharded_note_is_said_by_each_group_for_its_own_arrays(tmp_path):
    """With child groups, the root job does not speak for them: each child's job says it for its
    own arrays (prefixed with the child's name)."""
    _tree(tmp_path / "s.zarr")
    report = zopt.recompress(str(tmp_path / "s.zarr"), tmp_path / "o.zarr", layout="fixed-slot")
    said = [n for n in report.notes if "no array is sharded" in n]
    assert said and all(n.startswith("child: ") for n in said), report.notes
    # issue 37: every note says what it is about (a Note with a kind, none left to the catch-all "info")
    assert all(type(n).__name__ == "Note" and n.kind != "info" for n in report.notes), [repr(n) for n in report.notes]
    assert {n.kind for n in said} == {"layout"}


def test_notes_are_objects_picked_by_kind_and_print_as_their_text():
    """A note carries its kind and array (a child group's job's notes are re-rooted, its skipped
    arrays' note dropped by kind, not by text) and prints, pickles and compares as its text."""
    import pickle

    from zopt.notes import Note, as_note

    note = Note("T: files packed differently, re-expressed as one exact packing", "repacked", "T")
    child = note.in_child("child")
    assert (child.kind, child.array, str(child)) == ("repacked", "child/T", f"child: {note}")
    assert f"note: {note}" == "note: T: files packed differently, re-expressed as one exact packing"
    again = pickle.loads(pickle.dumps(child))
    assert (again, again.kind, again.array) == (child, "repacked", "child/T") and json.dumps([again]) == json.dumps([str(child)])
    assert as_note("plain text").kind == "info" and as_note(note) is note

"""The codec menu (``zopt.planning.candidates``), the per-array choice (``zopt.planning.optimizer``) and their interop:
every chain of the menu read back by plain zarr-python without zopt, and by zarrs where it reads it."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import zarr
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from zopt import recompress
from zopt.cli.commands import main
from zopt.planning.candidates import CANDIDATES, MENUS, menu_for, parse_menu
from zopt.planning.optimizer import (
    choose,
    parse_budget,
    trial_encode,
    trial_indices,
    zarr_data_type,
)
from zopt.planning.readers import unreadable


def _store(tmp_path, arrays: dict[str, np.ndarray], chunks) -> str:
    g = zarr.open_group(tmp_path / "src.zarr", mode="w")
    for name, a in arrays.items():
        g.create_array(name, shape=a.shape, chunks=chunks, dtype=a.dtype, fill_value=0, compressors=None,
                       dimension_names=tuple(f"d{i}" for i in range(a.ndim)))[...] = a
    return str(tmp_path / "src.zarr")


def _inner_chain(dst, name: str) -> list[dict]:
    codecs = json.loads((dst / name / "zarr.json").read_text())["codecs"]
    return codecs[0]["configuration"]["codecs"] if codecs[0]["name"] == "sharding_indexed" else codecs


def _smooth_int16() -> np.ndarray:
    """A smooth elevation-like int16 field: pcodec stores it in well under half of shuffle + zstd."""
    y, x = np.mgrid[0:256, 0:256]
    return (1000 * np.sin(x / 40) * np.cos(y / 30) + 3 * x).astype(np.int16)


# -- the menu ---------------------------------------------------------------------------------------


def test_each_candidate_applies_to_the_types_its_codecs_encode():
    assert CANDIDATES["pcodec-8"].chain("u1") is None and CANDIDATES["pcodec-8"].chain(bool) is None
    assert CANDIDATES["pcodec-8"].chain("f4") == [{"name": "numcodecs.pcodec", "configuration": {"level": 8}}]
    assert CANDIDATES["shuffle-zstd-3"].chain("u1") is None
    blosc = CANDIDATES["blosc-bitshuffle-5"].chain("i2")[1]["configuration"]
    assert blosc["typesize"] == 2 and blosc["shuffle"] == "bitshuffle"
    # ML types: only zopt's own chains (their bytes are zopt's)
    import ml_dtypes

    assert set(menu_for(ml_dtypes.bfloat16)) == {"classic"}
    assert list(menu_for("u1")) == ["classic", "plain-zstd-10", "blosc-shuffle-5", "blosc-bitshuffle-5"]
    assert list(menu_for("f8", "archive")) == list(MENUS["archive"][:1]) + [
        "zstd-19", "numcodecs-shuffle-zstd-19", "plain-zstd-19", "blosc-shuffle-5", "blosc-bitshuffle-5", "pcodec-8",
        "pcodec-12"]
    # the portable twins of classic: its bytes without the mask header, read without zopt
    assert CANDIDATES["numcodecs-shuffle-zstd-3"].chain("f4")[1:] == [
        {"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}}, {"name": "zstd", "configuration": {"level": 3}}]
    assert CANDIDATES["numcodecs-shuffle-zstd-3"].chain("u1") is None and CANDIDATES["plain-zstd-10"].chain("f4") is None
    assert CANDIDATES["plain-zstd-3"].chain("u1") is None and CANDIDATES["plain-zstd-19"].chain("u1") is not None
    assert CANDIDATES["plain-zstd-10"].chain(bool)[1:] == [{"name": "zstd", "configuration": {"level": 10}}]


def test_readers_narrow_the_menu_and_every_candidate_states_its_readers_truthfully():
    assert list(menu_for("f4", readers="tensorstore")) == ["plain-zstd-3", "blosc-shuffle-5", "blosc-bitshuffle-5"]
    assert list(menu_for("u1", readers="tensorstore")) == ["plain-zstd-10", "blosc-shuffle-5", "blosc-bitshuffle-5"]
    assert list(menu_for("f4", readers=["zarrs", "zarr-python"])) == ["numcodecs-shuffle-zstd-3", "plain-zstd-3",
                                                                       "blosc-shuffle-5", "blosc-bitshuffle-5", "pcodec-8"]
    for c in CANDIDATES.values():  # the stated readers agree with zopt.planning.readers codec by codec
        chain = c.chain("f4") or c.chain("u1")
        assert not unreadable(chain, sorted(c.readers)), c.name


def test_bad_menu_readers_and_budget_are_value_errors_naming_the_parameter():
    with pytest.raises(ValueError, match=r"readers: \['tiledb'\] are not among"):
        menu_for("f4", readers="zarrs,tiledb")
    with pytest.raises(ValueError, match=r"menu: unknown candidate 'lz4'; allowed: a menu of \['default', 'archive'\]"):
        parse_menu("pcodec-8,lz4")
    with pytest.raises(ValueError, match=r"readers: no candidate .* u1 .*tensorstore.*allowed"):
        menu_for("u1", "pcodec-8,classic", readers="tensorstore")
    for bad in (0, -1, "0", float("nan"), "fast", True):
        with pytest.raises(ValueError, match=r"budget: .* allowed: a number > 0"):
            parse_budget(bad)
    assert parse_budget("inf") == math.inf and parse_budget(None) == 1.0 and parse_budget("2.5") == 2.5


def test_a_candidate_whose_package_is_missing_is_left_out_or_refused_naming_codec_and_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "pcodec", None)  # `import pcodec` fails, as where it is not installed
    assert "pcodec-8" not in menu_for("f4") and "pcodec-12" not in menu_for("f4", "archive")
    with pytest.raises(ValueError, match=r"menu: candidate 'pcodec-8' writes codec 'numcodecs.pcodec', whose package "
                                         r"'pcodec' is not installed"):
        menu_for("f4", "pcodec-8,classic")


_NO_PCODEC = """
import sys
sys.modules["pcodec"] = None  # a reader without the pcodec package
import zarr
import zopt
zopt.use_pipeline()  # zopt's pipeline names the codec and the package (zarr's own says "codec not available")
try:
    zarr.open_array(sys.argv[1], path="dem")[...]
except ValueError as exc:
    print(type(exc).__name__, exc)
"""


def test_a_reader_without_pcodec_is_told_the_codec_and_the_package(tmp_path):
    src = _store(tmp_path, {"dem": _smooth_int16()}, (64, 256))
    recompress(src, tmp_path / "p.zarr", menu="pcodec-8", chunks=(64, 256))
    res = subprocess.run([sys.executable, "-c", _NO_PCODEC, str(tmp_path / "p.zarr")], capture_output=True, text=True,
                         check=True)
    # whichever inner chunk zarr decodes first
    assert re.match(r"ChunkDecodeError cannot decode inner chunk \(\d, 0\) of shard 'dem/c/0/0'", res.stdout), res.stdout
    assert "'numcodecs.pcodec'" in res.stdout and "package 'pcodec'" in res.stdout and "pip install pcodec" in res.stdout


# -- the cost model ---------------------------------------------------------------------------------


def test_the_budget_trades_size_for_encode_time():
    chains = {"ref": [], "slow": [], "fast": []}
    trials = {"ref": (1000, 1.0), "slow": (980, 4.0), "fast": (1010, 0.5)}
    # 2 % smaller for 3 extra reference times: paid at budget 2 (1.5 % needed), not at budget 1 (3 %)
    assert choose(trials, chains, 1).name == "ref"
    assert choose(trials, chains, 2).name == "slow"
    assert choose(trials, chains, "inf").name == "slow"
    # a faster candidate is never charged: it wins only by size
    assert choose({"ref": (1000, 1.0), "fast": (990, 0.5)}, {"ref": [], "fast": []}, 1).name == "fast"
    assert choose(trials, {"ref": [], "fast": []}, 1).name == "ref"
    # the floor: nothing larger than blosc-shuffle-5 on the trials, whatever the budget
    floor = {"ref": (1000, 1.0), "blosc-shuffle-5": (990, 3.0), "slow": (900, 6.0)}
    assert choose(floor, {"ref": [], "blosc-shuffle-5": [], "slow": []}, 1).name == "slow"
    assert choose(floor, {"ref": [], "blosc-shuffle-5": [], "slow": []}, 0.1).name == "blosc-shuffle-5"
    assert choose(floor, {"ref": [], "slow": []}, 0.1).name == "ref"  # no floor off the menu


def test_trial_chunks_are_spread_over_the_whole_grid_and_bounded():
    assert trial_indices((100, 100), (10, 10), 4) == [(2, 0), (4, 0), (5, 9), (7, 9)]
    assert trial_indices((105,), (10,), 100) == [(i,) for i in range(11)]  # the edge chunk too
    assert trial_indices((148, 180), (91, 90), 4) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert trial_indices((5,), (10,), 4) == [(0,)]
    assert len(trial_indices((4096, 4096), (256, 256), 4, max_bytes=2 * 256 * 256 * 4, itemsize=4)) == 2


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(["f4", "f8", "i2", "u2", "i4"]), st.integers(0, 2**32 - 1), st.sampled_from([0.0, 0.5, 1.0]))
def test_every_chain_of_the_menus_round_trips_and_its_trial_size_is_what_is_stored(dtype, seed, smooth):
    rng = np.random.default_rng(seed)
    noise = rng.normal(size=(16, 24))
    a = (np.cumsum(noise, axis=1) * 100 * smooth + noise * 5).astype(dtype)
    chains = menu_for(a.dtype, list(dict.fromkeys(MENUS["default"] + MENUS["archive"])))
    trials = trial_encode([a], chains, zarr_data_type(a.dtype), np.zeros((), a.dtype))
    for name, chain in chains.items():
        z = zarr.create_array(zarr.storage.MemoryStore(), shape=a.shape, chunks=a.shape, dtype=a.dtype,
                              fill_value=0, **_split(chain))
        z[...] = a
        np.testing.assert_array_equal(z[...], a)
        assert trials[name][0] == len(z.store._store_dict["c/0/0"].to_bytes()), name


def _split(chain):
    """``create_array`` arguments for a chain, ``conditional`` deciding as the trials and recompress do."""
    from zopt.codecs.conditional import with_decision_in
    from zopt.planning.chains import split_chain

    split = split_chain(json.loads(json.dumps(chain)))
    split["compressors"] = list(with_decision_in(split["compressors"] or (), "compress_if_smaller")) or None
    return split


# -- recompress chooses -----------------------------------------------------------------------------


def test_recompress_chooses_pcodec_where_it_pays_and_the_default_chain_where_it_does_not(tmp_path):
    rng = np.random.default_rng(1)
    random = rng.integers(-(2**15), 2**15, (256, 256), dtype=np.int16)  # incompressible: nothing pays for time
    src = _store(tmp_path, {"dem": _smooth_int16(), "noise": random}, (64, 256))
    dst = tmp_path / "d.zarr"
    report = recompress(src, dst, chunks=(64, 256), shards=(128, 256))
    assert _inner_chain(dst, "dem") == [{"name": "numcodecs.pcodec", "configuration": {"level": 8}}]
    assert _inner_chain(dst, "noise")[1]["name"] == "numcodecs.shuffle"  # the reference: plain zarr-python reads it
    assert any("dem=pcodec-8" in n and "noise=numcodecs-shuffle-zstd-3" in n for n in report.notes)
    for name, a in (("dem", _smooth_int16()), ("noise", random)):
        np.testing.assert_array_equal(zarr.open_array(dst, path=name)[...], a)
    # readers zopt: the reference is zopt's own classic chain, as before issue 36
    report = recompress(src, tmp_path / "z.zarr", chunks=(64, 256), shards=(128, 256), readers="zopt")
    assert _inner_chain(tmp_path / "z.zarr", "noise")[1]["name"] == "conditional"
    assert any("dem=pcodec-8" in n and "noise=classic" in n for n in report.notes)
    # the choice is the smaller one: dem with the chain it did not get is larger
    recompress(src, tmp_path / "c.zarr", chunks=(64, 256), shards=(128, 256), menu="classic", variables=["dem"])
    size = {p: sum(f.stat().st_size for f in (p / "dem" / "c").rglob("*") if f.is_file()) for p in (dst, tmp_path / "c.zarr")}
    assert size[dst] < 0.6 * size[tmp_path / "c.zarr"]


def test_a_decision_keeps_the_menu_to_masks_and_fixed_slots_to_bounded_chains(tmp_path):
    src = _store(tmp_path, {"dem": _smooth_int16()}, (64, 256))
    recompress(src, tmp_path / "a.zarr", chunks=(64, 256), shards=(128, 256), decision="always")
    assert _inner_chain(tmp_path / "a.zarr", "dem")[1]["name"] == "conditional"  # the decision is honoured
    recompress(src, tmp_path / "b.zarr", chunks=(64, 256), shards=(128, 256), layout="fixed-slot")
    assert "numcodecs.pcodec" not in json.dumps(_inner_chain(tmp_path / "b.zarr", "dem"))
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "b.zarr", path="dem")[...], _smooth_int16())
    with pytest.raises(ValueError, match="menu, budget: .* not both"):
        recompress(src, tmp_path / "c.zarr", codecs='[{"name": "bytes"}]', budget=2)


def test_cli_budget_and_readers_refuse_bad_values_in_one_line(tmp_path):
    src = _store(tmp_path, {"dem": _smooth_int16()}, (64, 256))
    runner = CliRunner()
    res = runner.invoke(main, ["recompress", src, str(tmp_path / "a.zarr"), "--budget", "0", "--no-progress"])
    assert res.exit_code != 0 and "budget: '0' is not allowed; allowed: a number > 0" in res.output
    res = runner.invoke(main, ["recompress", src, str(tmp_path / "a.zarr"), "--budget", "fast", "--no-progress"])
    assert res.exit_code != 0 and "budget: 'fast' is not allowed" in res.output
    res = runner.invoke(main, ["recompress", src, str(tmp_path / "a.zarr"), "--readers", "zarrs,h5py", "--no-progress"])
    assert res.exit_code != 0 and "readers: ['h5py'] are not among" in res.output
    res = runner.invoke(main, ["recompress", src, str(tmp_path / "a.zarr"), "--menu", "zfp", "--no-progress"])
    assert res.exit_code != 0 and "menu: unknown candidate 'zfp'" in res.output
    assert not (tmp_path / "a.zarr").exists()
    res = runner.invoke(main, ["recompress", src, str(tmp_path / "t.zarr"), "--readers", "tensorstore", "--no-progress"])
    assert res.exit_code == 0, res.output
    assert _inner_chain(tmp_path / "t.zarr", "dem")[1]["name"] == "blosc"  # narrowed, not refused


# -- interop: plain zarr-python without zopt, zarrs -----------------------------------------------

_NO_ZOPT = """
import importlib.metadata as md, json, sys
sys.modules["zopt"] = None  # `import zopt` fails: the startup hook (zopt-zarr-startup.pth) does nothing
_all = md.entry_points  # zarr sees no entry point of zopt's, as where zopt is not installed
def _entry_points(**kw):
    eps = _all(**kw)
    flat = [e for v in eps.values() for e in v] if isinstance(eps, dict) else list(eps)  # Python 3.11: by group
    return md.EntryPoints([e for e in flat if not e.value.startswith("zopt")])
md.entry_points = _entry_points
import numpy as np, zarr
out = {}
for name in json.loads(sys.argv[2]):
    out[name] = zarr.open_array(sys.argv[1], path=name)[...].tobytes().hex()
assert not any(m == "zopt" or m.startswith("zopt.") for m in sys.modules if sys.modules[m] is not None)
print(json.dumps(out))
"""


@pytest.mark.parametrize("menu_name", ["default", "archive"])
def test_every_non_zopt_chain_of_the_menu_is_read_by_plain_zarr_python_and_zarrs(tmp_path, menu_name):
    arrays = {"i2": _smooth_int16(), "f4": (_smooth_int16() / 7).astype("f4"),
              "u1": (_smooth_int16() % 200).astype("u1"), "f8": np.linspace(0, 1, 256 * 256).reshape(256, 256)}
    src = _store(tmp_path, arrays, (64, 256))
    written = {}
    for cname in MENUS[menu_name]:
        c = CANDIDATES[cname]
        if c.readers == {"zopt"}:
            continue  # conditional: zopt's own (docs/interop.md)
        for dt, a in arrays.items():
            chain = c.chain(a.dtype)
            if chain is None:
                continue
            dst = tmp_path / f"{cname}-{dt}.zarr"
            recompress(src, dst, codecs=json.dumps(chain), variables=[dt], chunks=(64, 256), shards=(128, 256))
            written[(cname, dt)] = dst
    assert {c for c, _ in written} == {c for c in MENUS[menu_name] if CANDIDATES[c].readers != {"zopt"}}
    for (cname, dt), dst in written.items():
        res = subprocess.run([sys.executable, "-c", textwrap.dedent(_NO_ZOPT), str(dst), json.dumps([dt])],
                             capture_output=True, text=True, check=False)
        assert res.returncode == 0, (cname, res.stderr[-2000:])
        assert bytes.fromhex(json.loads(res.stdout)[dt]) == arrays[dt].tobytes(), (cname, dt)
        if "zarrs" in CANDIDATES[cname].readers:
            pytest.importorskip("zarrs")
            with zarr.config.set({"codec_pipeline.path": "zarrs.ZarrsCodecPipeline"}), warnings.catch_warnings():
                warnings.filterwarnings("error", message=".*unsupported by ZarrsCodecPipeline")  # no fallback
                np.testing.assert_array_equal(zarr.open_array(dst, path=dt)[...], arrays[dt])


def test_the_menus_candidates_are_charged_their_fixed_cost_not_the_trials_timing():
    """The same data gets the same chain whatever the machine's load: a menu candidate's time is
    its fixed ``encode_cost``, so a trial timed 100× slower (or faster) chooses the same way."""
    chains = {"classic": [], "pcodec-8": []}
    for slow in (0.01, 1.0, 100.0):  # pcodec-8 costs 2× classic: 1 % of size per extra classic time
        assert choose({"classic": (1000, 1.0), "pcodec-8": (985, slow)}, chains, 1).name == "pcodec-8"
        assert choose({"classic": (1000, 1.0), "pcodec-8": (995, slow)}, chains, 1).name == "classic"
    assert CANDIDATES["classic"].encode_cost == 1.0
    assert all(c.encode_cost >= 1.0 for c in CANDIDATES.values() if c.name not in ("classic", "shuffle-zstd-3"))


def test_trials_of_candidates_with_fixed_costs_encode_each_chunk_once(tmp_path, monkeypatch):
    """choose() uses each menu candidate's fixed encode_cost, so its trials need no timing: one
    encode per trial chunk and candidate, not a warm-up plus TIMINGS repetitions."""
    from zopt.codecs.chain import ChunkEncoder
    from zopt.planning.optimizer import TIMINGS, menu_trial_task

    assert TIMINGS > 1
    src = tmp_path / "s.zarr"
    a = zarr.create_array(src, name="v", shape=(64, 64), chunks=(16, 16), dtype="f4", fill_value=0)
    a[:] = np.sin(np.linspace(0, 9, 64 * 64)).reshape(64, 64).astype("f4")
    calls = []
    real = ChunkEncoder.encode

    def counting(self, *args, **kw):
        calls.append(1)
        return real(self, *args, **kw)

    monkeypatch.setattr(ChunkEncoder, "encode", counting)
    chains = menu_for("f4", "default")
    out = menu_trial_task(str(src), "v", (64, 64), "f4", (16, 16), chains)
    assert set(out["trials"]) == set(chains) and all(b > 0 for b, _ in out["trials"].values())
    assert len(calls) == 4 * len(chains)
    calls.clear()
    custom = {"classic": chains["classic"], "mine": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd", "configuration": {"level": 1}}]}
    menu_trial_task(str(src), "v", (64, 64), "f4", (16, 16), custom)
    assert len(calls) == len(custom) * (1 + 4 * TIMINGS)  # a chain without a fixed cost: timed as before


def test_the_per_candidate_trial_graph_chooses_as_the_single_trial_task(tmp_path, monkeypatch):
    """choose_chains runs one task per candidate (parallel trials); the sizes and the choice are
    those of menu_trial_task, which runs the same steps in one task."""
    from zopt.io.sources import SourceVariable
    from zopt.planning.optimizer import MenuOptions, choose_chains, menu_trial_task

    src = tmp_path / "s.zarr"
    g = zarr.open_group(src, mode="w")
    rng = np.random.default_rng(3)
    smooth = np.cumsum(rng.normal(size=(48, 40)), axis=1).astype("f4")
    g.create_array("a", shape=(48, 40), chunks=(16, 16), dtype="f4", fill_value=0)[:] = smooth
    g.create_array("b", shape=(48, 40), chunks=(16, 16), dtype="i2", fill_value=0)[:] = (smooth * 10).astype("i2")
    variables = {n: SourceVariable((48, 40), np.dtype(d), ("y", "x")) for n, d in (("a", "f4"), ("b", "i2"))}
    layouts = {n: ((16, 16), None) for n in variables}
    import zopt.compat.scheduling as scheduling

    keys: list[str] = []
    real_compute = scheduling.compute

    def recording(tasks, *args, **kw):
        import dask

        for t in tasks:
            keys.extend(str(k) for k in dask.core.flatten(t.__dask_graph__().keys()))
        return real_compute(tasks, *args, **kw)

    monkeypatch.setattr(scheduling, "compute", recording)
    got = choose_chains(str(src), variables, layouts, MenuOptions(parse_menu("archive")), scheduler="threads")
    for n, v in variables.items():  # one trial task per candidate, each variable's chunks read once
        assert len({k for k in keys if k.startswith(f"zopt-menu-trial-{n}-")}) == len(menu_for(v.dtype, "archive"))
        assert len({k for k in keys if k.startswith(f"zopt-menu-chunks-{n}-")}) == 1
    for n, v in variables.items():
        one = menu_trial_task(str(src), n, v.shape, v.dtype.str, (16, 16), menu_for(v.dtype, "archive"))
        assert got[n].name == one["candidate"] and got[n].raw_bytes == one["raw_bytes"]
        assert {k: b for k, (b, _) in got[n].trials.items()} == {k: b for k, (b, _) in one["trials"].items()}
        assert len(got[n].trials) == len(menu_for(v.dtype, "archive")) > 1

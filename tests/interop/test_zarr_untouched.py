"""Installing zopt changes nothing for zarr users who do not use it.

A corpus of standard Zarr v3 stores (zstd chunks of two concatenated frames, a skippable-frame
prefix, plain zstd, blosc, gzip, crc32c, sharded, a corrupt and a truncated chunk) is read with
plain zarr code in three subprocesses: one where zopt is neither importable nor visible to zarr's
entry points (``tests/plain_reader.py`` explains how), one where zopt is installed (its startup
hook and entry points active) and one that also runs ``import zopt`` first. Every store gives the
same values, or the same error, in all three. In process, ``import zopt`` leaves zarr's codec
pipeline and ``bytes`` codec selected; zopt's apply inside ``zopt_pipeline()`` (a job) and after
``zopt.use_pipeline()``.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import zarr
from numcodecs import Zstd
from plain_reader import PRELUDE_WITHOUT_ZOPT, site_paths

import zopt
from zopt.codecs import zarr_config

READ = """
import hashlib, json, sys, warnings
warnings.simplefilter("ignore")
import zarr
if sys.argv[3] == "import":
    import zopt
out = {}
for store in json.loads(sys.argv[2]):
    try:
        a = zarr.open_array(store, mode="r")[...]
        out[store] = ["values", str(a.dtype), list(a.shape), hashlib.sha256(a.tobytes()).hexdigest()]
    except Exception as exc:
        out[store] = ["error", type(exc).__name__, str(exc)]
out["pipeline"] = zarr.config.get("codec_pipeline.path")
print(json.dumps(out))
"""


def _frame(raw: bytes) -> bytes:
    return Zstd(level=3).encode(raw)


def _skippable(payload: bytes) -> bytes:
    return struct.pack("<II", 0x184D2A50, len(payload)) + payload


def _corpus(root: Path) -> dict[str, Path]:
    """Standard stores whose every chunk is 4 × 25 float32 (``c/0/0`` rewritten where named)."""
    values = np.arange(400, dtype="float32").reshape(16, 25)
    stores = {}

    def make(name: str, **kw) -> Path:
        path = root / f"{name}.zarr"
        a = zarr.create_array(path, shape=values.shape, chunks=(4, 25), dtype="float32", fill_value=0, **kw)
        a[...] = values
        stores[name] = path
        return path

    zstd = [zarr.codecs.ZstdCodec(level=3)]
    raw = values[:4].tobytes()
    (make("two_frames", compressors=zstd) / "c/0/0").write_bytes(_frame(raw[:150]) + _frame(raw[150:]))
    (make("skippable_prefix", compressors=zstd) / "c/0/0").write_bytes(_skippable(b"zopt?") + _frame(raw))
    make("zstd", compressors=zstd)
    make("blosc", compressors=[zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")])
    make("gzip", compressors=[zarr.codecs.GzipCodec(level=5)])
    make("crc32c", compressors=[zarr.codecs.Crc32cCodec()])
    make("sharded", compressors=zstd, shards=(8, 25))
    corrupt = make("corrupt", compressors=zstd) / "c/0/0"
    data = bytearray(corrupt.read_bytes())
    data[len(data) // 2] ^= 0xFF
    corrupt.write_bytes(bytes(data))
    truncated = make("truncated", compressors=zstd) / "c/0/0"
    truncated.write_bytes(truncated.read_bytes()[:-7])
    return stores


def _read(stores: list[str], mode: str, cwd: Path) -> dict:
    """Read ``stores`` with plain zarr in a subprocess: ``mode`` "without" (no zopt), "installed"
    (zopt's startup hook and entry points) or "import" (``import zopt`` first)."""
    if mode == "without":
        args = [sys.executable, "-I", "-S", "-c", PRELUDE_WITHOUT_ZOPT + READ, json.dumps(site_paths())]
    else:
        args = [sys.executable, "-c", READ, "[]"]
    res = subprocess.run([*args, json.dumps(stores), mode], capture_output=True, text=True, check=False, cwd=cwd)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_zarr_reads_standard_stores_the_same_with_and_without_zopt(tmp_path):
    stores = [str(p) for p in _corpus(tmp_path).values()]
    without = _read(stores, "without", tmp_path)
    assert without["pipeline"] == zarr_config.ZARR_DEFAULTS["codec_pipeline.path"]
    # the corpus holds what it should: the two-frame and skippable-frame chunks read, the damaged fail
    kinds = {Path(s).stem: without[s][0] for s in stores if Path(s).stem != "corrupt"}  # zstd without checksum
    assert kinds == {"two_frames": "values", "skippable_prefix": "values", "zstd": "values", "blosc": "values",
                     "gzip": "values", "crc32c": "values", "sharded": "values", "truncated": "error"}, kinds
    assert len({without[s][3] for s in stores if Path(s).stem in kinds and kinds[Path(s).stem] == "values"}) == 1
    for mode in ("installed", "import"):
        got = _read(stores, mode, tmp_path)
        for store in stores:
            assert got[store] == without[store], (mode, Path(store).stem, got[store], without[store])
        assert got["pipeline"] == without["pipeline"], mode


def test_import_zopt_leaves_zarrs_pipeline_and_bytes_codec_selected():
    from zarr.codecs.bytes import BytesCodec as ZarrBytes
    from zarr.registry import get_codec_class, get_pipeline_class

    assert zopt.__version__
    zopt.ConditionalCodec  # noqa: B018 - the lazy names load the codecs: still no setting changes
    assert zarr.config.get("codec_pipeline.path") == "zarr.core.codec_pipeline.BatchedCodecPipeline"
    assert get_pipeline_class().__module__.startswith("zarr.")
    assert get_codec_class("bytes") is ZarrBytes
    with zarr_config.zopt_pipeline():
        assert zarr.config.get("codec_pipeline.path") == "zopt.codecs.pipeline.ChunkIndexCodecPipeline"
        with zarr_config.zopt_pipeline():  # nested (a job's tasks in its threads)
            assert get_codec_class("bytes") is zopt.BytesCodec
        assert get_codec_class("bytes") is zopt.BytesCodec
    assert zarr.config.get("codec_pipeline.path") == "zarr.core.codec_pipeline.BatchedCodecPipeline"
    assert get_codec_class("bytes") is ZarrBytes


def test_a_users_choice_is_kept_and_use_pipeline_is_opt_in():
    chosen = {"codec_pipeline.path": "zarr.core.codec_pipeline.BatchedCodecPipeline", "codecs.bytes": "x.Y"}
    with zarr.config.set({"codecs.bytes": "x.Y"}):
        assert "codecs.bytes" not in zarr_config.settings()
        assert chosen["codecs.bytes"] == zarr.config.get("codecs.bytes")
    code = textwrap.dedent("""
        import zarr, zopt
        before = zarr.config.get("codec_pipeline.path")
        changed = zopt.use_pipeline()
        print(before, zarr.config.get("codec_pipeline.path"), zarr.config.get("codecs.bytes"), sorted(changed)[:2])
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.split() == ["zarr.core.codec_pipeline.BatchedCodecPipeline",
                                  "zopt.codecs.pipeline.ChunkIndexCodecPipeline", "zopt.codecs.bytes.BytesCodec",
                                  "['codec_pipeline.path',", "'codecs.bytes']"]


def test_the_startup_hook_registers_data_types_and_changes_no_setting(tmp_path):
    """zarr 3.1-3.3 never load the ``zarr.data_type`` entry points: the hook registers zopt's data
    types right after zarr (an int4 store opens with ``import zarr`` alone) and loads none of zopt's
    jobs (zarr itself loads zopt's codecs through the ``zarr.codecs`` entry points)."""
    zarr.create_array(tmp_path / "i4.zarr", shape=(4,), dtype="int4", fill_value=0)[:] = np.array([-8, -1, 0, 7])
    code = textwrap.dedent(f"""
        import sys, zarr
        a = zarr.open_array({str(tmp_path / "i4.zarr")!r})[:]
        print(a.astype(int).tolist(), zarr.config.get("codec_pipeline.path"),
              sorted(m for m in sys.modules if m.startswith("zopt.") and m.split(".")[1] in ("job", "io", "planning", "readback")))
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "[-8, -1, 0, 7] zarr.core.codec_pipeline.BatchedCodecPipeline []"


def test_zopts_jobs_still_run_zopts_pipeline(tmp_path, monkeypatch):
    """A recompress opens its arrays with zopt's pipeline (chunk keys in errors, bounded
    decoding) and leaves zarr's default selected afterwards."""
    from zopt.codecs.pipeline import ChunkIndexCodecPipeline

    src = tmp_path / "src.zarr"
    a = zarr.create_array(src, shape=(64,), chunks=(16,), dtype="float32", fill_value=0)
    a[:] = np.arange(64, dtype="float32")
    opened = []
    original = ChunkIndexCodecPipeline.from_codecs.__func__

    def spy(cls, codecs, **kw):
        opened.append(cls)
        return original(cls, codecs, **kw)

    monkeypatch.setattr(ChunkIndexCodecPipeline, "from_codecs", classmethod(spy))
    zopt.recompress(src, tmp_path / "dst.zarr")
    assert opened, "the job opened no array with zopt's pipeline"
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "dst.zarr")[:], a[:])
    assert zarr.config.get("codec_pipeline.path") == "zarr.core.codec_pipeline.BatchedCodecPipeline"


def test_zopts_conditional_stores_read_with_zarrs_own_pipeline(tmp_path):
    """The pipeline is an optimisation: zarr's default pipeline, in a process that never imports
    zopt (zarr finds ``conditional`` through its entry point), reads every conformance fixture of
    zopt's ``conditional`` codec (sharded ones included) with the values they hold."""
    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "conditional"
    code = textwrap.dedent(f"""
        import json, pathlib, sys, warnings
        import numpy as np, zarr
        warnings.simplefilter("ignore")
        root = pathlib.Path({str(fixtures)!r})
        names = json.loads((root / "fixtures.json").read_text())
        bad = [n for n in names
               if zarr.open_array(str(root / f"{{n}}.zarr"), mode="r")[...].tobytes() != np.load(root / f"{{n}}.npy").tobytes()]
        print(len(names), bad, zarr.config.get("codec_pipeline.path"), "zopt" in sys.modules and "zopt.job" in sys.modules)
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    n, rest = res.stdout.split(" ", 1)
    assert int(n) >= 10 and rest.strip() == "[] zarr.core.codec_pipeline.BatchedCodecPipeline False", res.stdout

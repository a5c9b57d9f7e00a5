"""A seeded fuzz campaign on source chunk files, bounded in time: mutated chunks (bit flips,
truncation, appended bytes, another chunk's frame, an empty file, a frame declaring a huge content
size, two frames, a skippable frame first, a symlink to ``/dev/zero``) through a recompress to
another chain (the decode path), a re-shard with the source's own chain (the copy path) and
``verify``, on the compiled loops and on the Python ones (``ZOPT_NO_LOOPS=1``).

Held: 0 crashes (an error that is not a ``ZoptError``), 0 hangs (each leg runs in a subprocess with
a timeout), 0 jobs that succeed with values other than what zarr-python reads (its ``zstd`` codec is
numcodecs' ``Zstd``: the reference decodes each chunk with it); where zarr-python fails on a chunk,
zopt fails naming it. ``ZOPT_FUZZ_MUTANTS=N`` runs a bigger campaign (``ZOPT_FUZZ_SEED`` another seed).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX files")

SEED = int(os.environ.get("ZOPT_FUZZ_SEED", "44"))
MUTANTS = int(os.environ.get("ZOPT_FUZZ_MUTANTS", "10"))
KINDS = ("bit flips", "truncation", "appended bytes", "another chunk's frame", "empty file", "huge content size",
         "two frames", "skippable frame first", "/dev/zero")
SHAPE, CHUNK = (64, 64), (16, 16)
RAW = CHUNK[0] * CHUNK[1] * 4


def _values() -> np.ndarray:
    return np.cumsum(np.random.default_rng(7).normal(size=SHAPE), axis=0).astype("f4")


def _mutant(rng: np.random.Generator, kind: str, blob: bytes, other: bytes, raw: bytes) -> bytes | None:
    """The bytes of a mutant of the chunk ``blob`` (None: a symlink to /dev/zero)."""
    import numcodecs

    if kind == "bit flips":
        b = bytearray(blob)
        for at in rng.integers(0, len(b) * 8, int(rng.integers(1, 4))).tolist():
            b[at // 8] ^= 1 << (at % 8)
        return bytes(b)
    if kind == "truncation":
        return blob[: int(rng.integers(0, len(blob)))]
    if kind == "appended bytes":
        return blob + rng.integers(0, 256, int(rng.integers(1, 65)), dtype=np.uint8).tobytes()
    if kind == "another chunk's frame":
        return other
    if kind == "empty file":
        return b""
    if kind == "huge content size":  # a frame header declaring 2^40 bytes, then one raw block
        size = int(rng.choice([2**40, 2**32, RAW * 2]))
        return (0xFD2FB528).to_bytes(4, "little") + bytes([0xE0]) + size.to_bytes(8, "little") + \
            (1 | (4 << 3)).to_bytes(3, "little") + b"abcd"
    if kind == "two frames":
        cut = int(rng.integers(1, len(raw)))
        return numcodecs.zstd.compress(raw[:cut], 3) + numcodecs.zstd.compress(raw[cut:], 3)
    if kind == "skippable frame first":
        pad = rng.integers(0, 256, int(rng.integers(0, 32)), dtype=np.uint8).tobytes()
        return (0x184D2A50 + int(rng.integers(0, 16))).to_bytes(4, "little") + len(pad).to_bytes(4, "little") + pad + blob
    assert kind == "/dev/zero"
    return None


def _zarr_reads(data: bytes | None) -> np.ndarray | None:
    """What zarr-python reads for a chunk of these bytes (its zstd codec is numcodecs' Zstd), or
    None where it fails."""
    import numcodecs

    if data is None:
        return None  # /dev/zero: zarr-python reads until memory runs out
    try:
        out = bytes(numcodecs.Zstd().decode(data))
    except Exception:  # noqa: BLE001 - numcodecs raises RuntimeError, ValueError
        return None
    return np.frombuffer(out, dtype="f4").reshape(CHUNK) if len(out) == RAW else None


def campaign(base: str, seed: int, count: int) -> dict[str, int]:
    """Run ``count`` mutants through the three paths; returns the counts (see module docstring)."""
    import numcodecs
    import zarr
    from zarr.codecs import ZstdCodec

    from zopt import recompress, verify
    from zopt.errors import ZoptError

    root = Path(base)
    good = root / "good.zarr"
    values = _values()
    zarr.open_group(good, mode="w").create_array("v", shape=SHAPE, chunks=CHUNK, dtype="f4", fill_value=0,
                                                 compressors=[ZstdCodec(level=3)])[...] = values
    bytes_ = {"name": "bytes", "configuration": {"endian": "little"}}
    chains = {"decode": [bytes_, {"name": "zstd", "configuration": {"level": 5, "checksum": False}}],
              "copy": [bytes_, {"name": "zstd", "configuration": {"level": 3, "checksum": False}}]}
    reference = root / "reference.zarr"
    recompress(good, reference, codecs=chains["copy"], chunks=CHUNK, shards=SHAPE, checksum=False,
               scheduler="synchronous")
    keys = [(i, j) for i in range(SHAPE[0] // CHUNK[0]) for j in range(SHAPE[1] // CHUNK[1])]
    rng = np.random.default_rng(seed)
    counts: Counter[str] = Counter()
    for m in range(count):
        kind = KINDS[m % len(KINDS)]
        key = keys[int(rng.integers(len(keys)))]
        other = keys[(keys.index(key) + 1 + int(rng.integers(len(keys) - 1))) % len(keys)]
        name = f"v/c/{key[0]}/{key[1]}"
        src = root / f"m{m}.zarr"
        shutil.copytree(good, src)
        path = src / "v" / "c" / str(key[0]) / str(key[1])
        blob = path.read_bytes()
        region = tuple(slice(k * c, (k + 1) * c) for k, c in zip(key, CHUNK, strict=True))
        data = _mutant(rng, kind, blob, (good / "v" / "c" / str(other[0]) / str(other[1])).read_bytes(),
                       values[region].tobytes())
        path.unlink()
        if data is None:
            os.symlink("/dev/zero", path)
        else:
            path.write_bytes(data)
        expected = _zarr_reads(data)
        counts["mutants"] += 1
        counts["zarr-python fails" if expected is None else "zarr-python reads"] += 1
        for leg in ("decode", "copy", "verify"):
            counts["runs"] += 1
            try:
                if leg == "verify":
                    report = verify(src, reference, scheduler="synchronous")
                else:
                    dst = root / f"m{m}-{leg}.zarr"
                    recompress(src, dst, codecs=chains[leg], chunks=CHUNK, shards=SHAPE, checksum=False,
                               scheduler="synchronous")
            except ZoptError as exc:
                if expected is not None:
                    counts["refused what zarr-python reads"] += 1
                    print(f"{leg} {kind} {name}: refused what zarr reads: {exc}", file=sys.stderr)
                elif name not in str(exc):
                    counts["failed without naming the chunk"] += 1
                    print(f"{leg} {kind} {name}: not named: {exc}", file=sys.stderr)
                else:
                    counts["refused naming the chunk"] += 1
                continue
            except Exception as exc:  # noqa: BLE001 - a crash: anything but a ZoptError
                counts["crashes"] += 1
                print(f"{leg} {kind} {name}: crash {type(exc).__name__}: {exc}", file=sys.stderr)
                continue
            if expected is None:
                counts["succeeded where zarr-python fails"] += 1
                print(f"{leg} {kind} {name}: succeeded where zarr fails", file=sys.stderr)
                continue
            want = values.copy()
            want[region] = expected
            if leg == "verify":
                same = np.array_equal(want.view("u4"), values.view("u4"))
                if report.ok != same:
                    counts["values differ from zarr-python's"] += 1
                    print(f"{leg} {kind} {name}: verify said ok={report.ok}, values same={same}", file=sys.stderr)
                else:
                    counts["read as zarr-python reads"] += 1
                continue
            got = zarr.open_array(dst / "v", mode="r")[...]
            if not np.array_equal(got.view("u4"), want.view("u4")):
                counts["values differ from zarr-python's"] += 1
                print(f"{leg} {kind} {name}: values differ", file=sys.stderr)
            else:
                counts["read as zarr-python reads"] += 1
        shutil.rmtree(src)
        _ = numcodecs  # the reference decoder, imported with the campaign
    return dict(counts)


BAD = ("crashes", "succeeded where zarr-python fails", "values differ from zarr-python's",
       "failed without naming the chunk", "refused what zarr-python reads")


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled loops", "python loops"])
def test_fuzzed_chunk_files_are_read_as_zarr_python_reads_them_or_refused_naming_them(tmp_path, compiled):
    from zopt.compat import loops

    if compiled and not loops.available():
        pytest.skip("zopt's compiled loops are not built here")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(Path(__file__).parent)])}
    env.pop("ZOPT_NO_LOOPS", None)
    if not compiled:
        env["ZOPT_NO_LOOPS"] = "1"
    code = ("import json, sys; from test_fuzz_chunks import campaign; "
            "print(json.dumps(campaign(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))))")
    try:
        r = subprocess.run([sys.executable, "-c", code, str(tmp_path), str(SEED), str(MUTANTS)], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=60 + 20 * MUTANTS)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the campaign hung:\n{exc.stderr}")
    assert r.returncode == 0, r.stderr[-4000:]
    counts = json.loads(r.stdout.strip().splitlines()[-1])
    print(json.dumps(counts, indent=1))
    assert counts["mutants"] == MUTANTS and counts["runs"] == 3 * MUTANTS
    assert not any(counts.get(bad) for bad in BAD), (counts, r.stderr[-4000:])

"""Benchmark: cast_value and scale_offset encode/decode speed, zopt next to its peers.

    python benchmarks/cast.py [--mib 64] [--repeat 3]

Each case converts an in-memory array of ``--mib`` MiB (of the float source) and back, on one
core, best of ``--repeat``. MB/s counts bytes of the float array (10^6). "peak" is the largest
extra memory allocated during the call (tracemalloc, which sees numpy's allocations; Rust-side
temporaries of cast-value-rs are not seen), as a multiple of the float array's size.

Peers, same data, same run:
- cast-value-rs (the engine behind zarr-python >= 3.2's cast_value) on the types it supports
  (standard integers and float16/32/64); "n/a" otherwise.
- ml_dtypes' ``astype`` for the microfloats: *not* a correct cast_value (it saturates, wraps,
  turns NaN into -0.0 and checks nothing) — shown as the unchecked speed limit.
- numcodecs ``FixedScaleOffset`` for the spec's combined scale_offset + cast_value example: it
  promotes to float64 and has no NaN mapping, so it is a speed reference only.
- for the lossy chains' decode (``uint16``/``uint32`` codes → float32 with a reserved NaN code,
  and the float32 sentinel map), numpy's ``astype`` plus a masked store: the fastest plain-numpy
  equivalent (exact there, as every code is a float32 value).
"""

from __future__ import annotations

import argparse
import time
import tracemalloc
import warnings

import ml_dtypes
import numpy as np

from zopt.codecs.exact_cast import cast_array
from zopt.codecs.scale_offset import scale_offset_decode, scale_offset_encode


def timed(fn, repeat: int) -> tuple[float, float, object]:
    best, peak, out = float("inf"), 0, None
    for _ in range(repeat):
        tracemalloc.start()
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
        peak = max(peak, tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    return best, peak, out


def cases(mib: int):
    rng = np.random.default_rng(0)
    n64 = mib * 2**20 // 8
    n32 = mib * 2**20 // 4
    temps = rng.uniform(-10, 15.5, n64)
    temps[rng.random(n64) < 0.05] = np.nan
    normal32 = (rng.standard_normal(n32) * 4).astype(np.float32)
    nan_enc = [(np.float64(np.nan), np.uint8(0))]
    nan_dec = [(np.uint8(0), np.float64(np.nan))]
    off, scale = np.float64(-10), np.float64(0.1)

    def cvr(x, target, **kw):
        import cast_value_rs

        return lambda: cast_value_rs.cast_array(x, target_dtype=target, rounding_mode="nearest-even", **kw)

    q = np.rint(temps * 10).clip(0, 255)
    stored = np.where(np.isnan(temps), 0, q).astype(np.uint8)
    yield ("float64 → uint8, scalar_map NaN↔0", temps.nbytes, {
        "zopt": (lambda: cast_array(np.where(np.isnan(temps), np.nan, q), np.uint8, scalar_map=nan_enc),
                 lambda: cast_array(stored, np.float64, scalar_map=nan_dec)),
        "cast-value-rs": (cvr(np.where(np.isnan(temps), np.nan, q), "uint8", scalar_map_entries=[(np.nan, 0)]),
                          cvr(stored, "float64", scalar_map_entries=[(0, np.nan)])),
    })

    def zopt_chain_encode():
        return cast_array(scale_offset_encode(temps, off, scale), np.uint8, scalar_map=nan_enc)

    def zopt_chain_decode():
        return scale_offset_decode(cast_array(stored, np.float64, scalar_map=nan_dec), off, scale)

    def numcodecs_peer():
        from numcodecs import FixedScaleOffset

        codec = FixedScaleOffset(offset=-10, scale=10, dtype="f8", astype="u1")
        finite = np.nan_to_num(temps, nan=-10)
        return (lambda: codec.encode(finite)), (lambda: codec.decode(stored))

    yield ("spec example: scale_offset + cast_value (float64 → uint8)", temps.nbytes, {
        "zopt": (zopt_chain_encode, zopt_chain_decode),
        "numcodecs FixedScaleOffset (no NaN map)": numcodecs_peer(),
    })
    for name, target in [("float8_e4m3", ml_dtypes.float8_e4m3), ("float4_e2m1fn", ml_dtypes.float4_e2m1fn)]:
        enc = cast_array(normal32, target, out_of_range="clamp")
        yield (f"float32 → {name} (clamp)", normal32.nbytes, {
            "zopt": (lambda t=target: cast_array(normal32, t, out_of_range="clamp"),
                     lambda e=enc: cast_array(e, np.float32)),
            "cast-value-rs": None,
            "ml_dtypes astype (unchecked)": (lambda t=target: normal32.astype(t), lambda e=enc: e.astype(np.float32)),
        })
    enc16 = normal32.astype(np.float16)
    yield ("float32 → float16", normal32.nbytes, {
        "zopt": (lambda: cast_array(normal32, np.float16), lambda: cast_array(enc16, np.float32)),
        "cast-value-rs": (cvr(normal32, "float16"), cvr(enc16, "float32")),
        "numpy astype (unchecked)": (lambda: normal32.astype(np.float16), lambda: enc16.astype(np.float32)),
    })
    # the lossy abs chains' decode (zopt.lossy.bounds): integer codes back to the float type, a
    # reserved code to NaN, then the sentinel map (±Infinity back to the fill value)
    for code_type, top in [(np.uint16, 60000), (np.uint32, 2**20)]:
        codes = rng.integers(0, top, n32).astype(code_type)
        codes[rng.random(n32) < 0.05] = top + 1
        nan_code = [(code_type(top + 1), np.float32(np.nan))]

        def numpy_decode(c=codes, t=top):
            out = c.astype(np.float32)
            out[c == t + 1] = np.nan
            return out

        yield (f"lossy decode: {np.dtype(code_type).name} codes → float32, NaN code", n32 * 4, {
            "zopt": (None, lambda c=codes, m=nan_code: cast_array(c, np.float32, scalar_map=m)),
            "cast-value-rs": (None, cvr(codes, "float32", scalar_map_entries=[(top + 1, np.nan)])),
            "numpy astype + masked store": (None, numpy_decode),
        })
    field = normal32.copy()
    field[rng.random(n32) < 0.05] = np.inf
    sentinel = [(np.float32(np.inf), np.float32(-1e34))]

    def numpy_sentinel():
        out = field.copy()
        out[field == np.inf] = np.float32(-1e34)
        return out

    yield ("lossy decode: float32 sentinel map (+Infinity → -1e34)", field.nbytes, {
        "zopt": (None, lambda: cast_array(field, np.float32, scalar_map=sentinel)),
        "cast-value-rs": (None, cvr(field, "float32", scalar_map_entries=[(np.inf, -1e34)])),
        "numpy copy + masked store": (None, numpy_sentinel),
    })
    wide = temps[~np.isnan(temps)] * 5000
    enc_i16 = np.clip(np.rint(wide), -32768, 32767).astype(np.int16)
    yield ("float64 → int16 (clamp)", wide.nbytes, {
        "zopt": (lambda: cast_array(wide, np.int16, out_of_range="clamp"), lambda: cast_array(enc_i16, np.float64)),
        "cast-value-rs": (cvr(wide, "int16", out_of_range_mode="clamp"), cvr(enc_i16, "float64")),
    })


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    print(f"{args.mib} MiB per case, best of {args.repeat}; MB/s of the float array; peak = extra memory / input\n")
    print("| case | implementation | encode MB/s | decode MB/s | encode peak | decode peak |")
    print("|---|---|---:|---:|---:|---:|")
    for title, nbytes, impls in cases(args.mib):
        for impl, fns in impls.items():
            if fns is None:
                print(f"| {title} | {impl} | n/a | n/a | | |")
                continue
            cells = []
            for fn in fns:  # encode, decode (None: a decode-only case)
                if fn is None:
                    cells.append(("", ""))
                    continue
                t, peak, _ = timed(fn, args.repeat)
                cells.append((f"{nbytes / t / 1e6:,.0f}", f"{peak / nbytes:.2f}×"))
            (e, pe), (d, pd) = cells
            print(f"| {title} | {impl} | {e} | {d} | {pe} | {pd} |", flush=True)


if __name__ == "__main__":
    main()

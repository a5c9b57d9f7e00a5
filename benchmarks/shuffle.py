"""Benchmark: byte shuffle / unshuffle, zopt's ``shuffle`` codec next to numcodecs and numpy.

    python benchmarks/shuffle.py [--kib 256 1024] [--sizes 2 4 8] [--repeat 50]

Each case shuffles (encode) and unshuffles (decode) one in-memory chunk of random bytes of
``--kib`` KiB with element size ``--sizes``, best of ``--repeat`` calls on one thread (the
best of many calls is what a loaded machine distorts least). MB/s = 10^6 bytes of the chunk
per second. Every output is checked against ``numcodecs.Shuffle`` first.

Peers, same bytes, same run:
- ``numcodecs.Shuffle`` (a Cython byte loop; its Python entry point holds the GIL, so threads
  decoding different chunks take turns, while numpy's ufuncs and copies release it);
- ``numpy transpose``: one transposed copy, what zopt did for both directions before issue 28.
"""

from __future__ import annotations

import argparse
import time

import numcodecs
import numpy as np

from zopt.codecs.shuffle import ShuffleCodec


def best(fn, repeat: int) -> float:
    fn()
    out = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t)
    return out


def transpose(data: np.ndarray, size: int, inverse: bool) -> np.ndarray:
    shape = (size, -1) if inverse else (-1, size)
    return np.ascontiguousarray(data.reshape(shape).T).reshape(-1)


def implementations(raw: np.ndarray, size: int) -> tuple[np.ndarray, dict]:
    """The shuffled bytes and {name: (encode, decode)} callables for one chunk and element size."""
    peer = numcodecs.Shuffle(size)
    shuffled = np.asarray(peer.encode(raw)).view(np.uint8)
    codec = ShuffleCodec(element_size=size)
    return shuffled, {
        "zopt shuffle": (lambda: codec.encode_bytes(raw), lambda: codec.decode_bytes(shuffled)),
        "numcodecs Shuffle": (lambda: peer.encode(raw), lambda: peer.decode(shuffled)),
        "numpy transpose": (lambda: transpose(raw, size, False), lambda: transpose(shuffled, size, True)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kib", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    print(f"best of {args.repeat}, one thread\n")
    print("| chunk | element size | implementation | encode MB/s | decode MB/s |")
    print("|---|---:|---|---:|---:|")
    rng = np.random.default_rng(0)
    for kib in args.kib:
        raw = rng.integers(0, 256, kib * 1024, dtype=np.uint8)
        for size in args.sizes:
            shuffled, impls = implementations(raw, size)
            for name, (enc, dec) in impls.items():
                assert np.asarray(enc()).tobytes() == shuffled.tobytes(), name
                assert np.asarray(dec()).tobytes() == raw.tobytes(), name
                rates = [raw.nbytes / best(fn, args.repeat) / 1e6 for fn in (enc, dec)]
                print(f"| {kib} KiB | {size} | {name} | " + " | ".join(f"{r:,.0f}" for r in rates) + " |", flush=True)


if __name__ == "__main__":
    main()

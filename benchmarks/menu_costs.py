"""Benchmark: each codec-menu candidate's encode CPU time relative to ``classic``, on the corpus.

    python benchmarks/menu_costs.py [--datasets NAME,NAME] [--chunk-elements 65536]

The optimizer (``zopt.planning.optimizer``) charges every candidate a fixed ``encode_cost`` from
``zopt.planning.candidates``, so that the same data always gets the same chain; this prints the
figures those costs come from: for every 2-, 4- and 8-byte numeric array of
``benchmarks/corpus_data.py``, up to 4 chunks of ``--chunk-elements`` elements encoded with each
candidate's whole chain (``trial_encode``: thread CPU seconds, fastest of its timings), as a ratio
to ``classic``; median, min and max over the arrays, beside the fixed cost in use.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from corpus_data import load_corpus  # noqa: E402


def main() -> None:
    from zopt.planning.candidates import CANDIDATES
    from zopt.planning.optimizer import trial_encode, zarr_data_type

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default=None, help="comma-separated dataset names (default: all)")
    ap.add_argument("--chunk-elements", type=int, default=65536, help="elements per trial chunk (default 65536)")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    names = args.datasets.split(",") if args.datasets else None
    ratios: dict[str, list[float]] = {n: [] for n in CANDIDATES}
    for _name, _kind, a, _note in load_corpus(names):
        if a is None or a.dtype.itemsize < 2 or a.dtype.kind not in "iuf":
            continue
        flat = a.reshape(-1)
        n = min(flat.size, args.chunk_elements)
        chunks = [np.ascontiguousarray(flat[i * n:(i + 1) * n]) for i in range(max(1, min(4, flat.size // n)))]
        chains = {c: CANDIDATES[c].chain(a.dtype) for c in CANDIDATES}
        trials = trial_encode(chunks, {c: v for c, v in chains.items() if v is not None}, zarr_data_type(a.dtype), 0)
        for c, (_size, seconds) in trials.items():
            ratios[c].append(seconds / trials["classic"][1])
    print(f"{'candidate':20s} {'median':>7s} {'min':>6s} {'max':>6s} {'arrays':>6s} {'encode_cost':>11s}")
    for c, r in ratios.items():
        if r:
            print(f"{c:20s} {statistics.median(r):7.2f} {min(r):6.2f} {max(r):6.2f} {len(r):6d} "
                  f"{CANDIDATES[c].encode_cost:11.1f}")


if __name__ == "__main__":
    main()

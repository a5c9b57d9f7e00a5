"""Store a trained network's weights in low precision — bfloat16, float8 (e4m3) and int4 — with
the ``cast_value`` codec (and ``scale_offset`` for int4) in front of ``packbits``, and measure
the sizes, the round-trip error and what it does to the model's accuracy.

The array keeps its float32 data type: readers get float32 back, the store holds 16, 8 or 4
bits per weight. ``packbits`` packs two int4 values per byte.

Data: a small multi-layer perceptron trained on the handwritten digits shipped with
scikit-learn (1797 images of 8×8 pixels); its weight matrices are the arrays stored.

    python recipes/ml_low_precision.py [--small] [--out DIR]
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import zarr
from _outdir import recipe_out  # recipes/_outdir.py: the script's directory is on sys.path
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier

from zopt.codecs import CastValueCodec, PackBitsCodec, ScaleOffsetCodec

# zarr-python >= 3.2 has its own cast_value/scale_offset without the sub-byte and float8 types:
# select zopt's (with zarr 3.1 they are the only ones; see docs/scale-offset-cast-value.md)
zarr.config.set({"codecs.cast_value": "zopt.codecs.cast_value.CastValueCodec",
                 "codecs.scale_offset": "zopt.codecs.scale_offset.ScaleOffsetCodec"})


def formats(w: np.ndarray) -> dict[str, tuple[list, PackBitsCodec]]:
    """Per storage format of weight matrix ``w``: (array→array filters, serializer)."""
    scale = 7 / float(np.abs(w).max())  # int4 holds -8..7: the largest weight maps to ±7
    return {
        "float32": ([], PackBitsCodec()),
        "bfloat16": ([CastValueCodec(data_type="bfloat16")], PackBitsCodec()),
        "float8_e4m3": ([CastValueCodec(data_type="float8_e4m3")], PackBitsCodec()),
        "int4": ([ScaleOffsetCodec(scale=scale), CastValueCodec(data_type="int4", out_of_range="clamp")],
                 PackBitsCodec()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a smaller network, fewer iterations (for CI)")
    parser.add_argument("--out", default="recipe-out", help="directory for the store (new or empty; a recipe's own: its outputs replaced)")
    args = parser.parse_args()
    out = recipe_out(args.out)  # refuses a non-empty directory no recipe made

    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x / 16, y, test_size=0.3, random_state=0)
    hidden = (32,) if args.small else (256, 128)
    model = MLPClassifier(hidden_layer_sizes=hidden, max_iter=60 if args.small else 400, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(x_train, y_train)
    weights = [w.astype(np.float32) for w in model.coefs_]
    accuracy = model.score(x_test, y_test)
    print(f"network {[w.shape for w in weights]}, test accuracy {accuracy:.3f}")

    root = zarr.open_group(out / "weights.zarr", mode="w", zarr_format=3)
    results = {}
    for name in formats(weights[0]):
        stored = 0
        restored = []
        for k, w in enumerate(weights):
            filters, serializer = formats(w)[name]
            z = root.create_array(f"{name}/layer{k}", shape=w.shape, dtype="float32", chunks=w.shape,
                                  filters=filters, serializer=serializer, compressors=None)
            z[:] = w
            stored += z.nbytes_stored() - len((out / "weights.zarr" / name / f"layer{k}" / "zarr.json").read_bytes())
            restored.append(zarr.open_array(out / "weights.zarr", path=f"{name}/layer{k}")[:])
        model.coefs_ = restored
        err = max(float(np.abs(r - w).max() / np.abs(w).max()) for r, w in zip(restored, weights, strict=True))
        results[name] = (stored, err, model.score(x_test, y_test))
        print(f"{name:12s} {stored:>8} bytes  max error {err:8.2e} of the largest weight  "
              f"test accuracy {results[name][2]:.3f}")

    raw = sum(w.nbytes for w in weights)
    assert results["float32"][0] == raw and results["float32"][1] == 0.0, "float32 must round-trip exactly"
    for name, bits in (("bfloat16", 16), ("float8_e4m3", 8), ("int4", 4)):
        assert results[name][0] <= raw * bits // 32 + 2 * len(weights), f"{name}: more than {bits} bits per weight"
    assert results["bfloat16"][1] <= 2**-8 and results["float8_e4m3"][1] <= 2**-3
    assert results["int4"][1] <= 1 / 14 + 1e-6  # half a step of 1/7 of the largest weight
    assert results["bfloat16"][2] >= accuracy - 0.01, "bfloat16 weights should keep the accuracy"


if __name__ == "__main__":
    main()

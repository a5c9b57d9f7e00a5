"""Every default output opens in the oldest reader environment a user can get: Python 3.11,
zarr-python 3.1, numcodecs 0.16 (the last for Python 3.11; it pins ``pcodec < 0.4``) and pcodec
0.3.6 (the first 0.3 release that reads pcodec's format 4, which pcodec ≥ 1.0 writes and 0.3.0-0.3.5
refuse), without zopt; the values are the ones the current reader reads.

That environment is a virtual environment CI makes once on leg 1 (``.ci/run``); its Python is given
in ``ZOPT_OLDEST_READER_PYTHON``. Locally::

    python3.11 -m venv .venv-oldest
    .venv-oldest/bin/pip install "zarr==3.1.*" "numcodecs==0.16.*" "pcodec==0.3.6" xarray
    ZOPT_OLDEST_READER_PYTHON=$PWD/.venv-oldest/bin/python python -m pytest tests/interop/test_oldest_reader.py
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap

import numpy as np
import pytest
import xarray as xr
import zarr

import zopt
import zopt.xarray
from zopt.planning.readers import MIN_VERSIONS

OLDEST = os.environ.get("ZOPT_OLDEST_READER_PYTHON")
pytestmark = pytest.mark.skipif(not OLDEST, reason="ZOPT_OLDEST_READER_PYTHON is not set (the oldest reader's "
                                "venv: zarr 3.1, numcodecs 0.16, pcodec 0.3.6; .ci/run makes it on leg 1)")
iris_sample_data = pytest.importorskip("iris_sample_data")

#: each variable's raw stored values (no CF decoding: time units and masks are xarray's business,
#: the codecs' output is what is compared), as (dtype, shape, digest)
DIGEST = textwrap.dedent("""
    import hashlib, json, sys, warnings
    warnings.simplefilter("ignore")
    import xarray as xr

    def digest(values):
        data = repr(values.tolist()).encode() if values.dtype.kind in "OUS" else values.tobytes()
        return [values.dtype.str, list(values.shape), hashlib.sha256(data).hexdigest()]

    out = {}
    for store in json.loads(sys.argv[1]):
        with xr.open_zarr(store, chunks=None, decode_cf=False) as ds:
            out[store] = {str(k): digest(v.values) for k, v in ds.variables.items()}
    if len(sys.argv) > 2:
        import numcodecs, pcodec, zarr
        out["versions"] = [sys.version.split()[0], zarr.__version__, numcodecs.__version__, pcodec.__version__]
    print(json.dumps(out))
""")


def _digests(python: str, stores: list[str], cwd, versions: bool = False) -> dict:
    res = subprocess.run([python, "-I", "-c", DIGEST, json.dumps(stores), *(["versions"] if versions else [])],
                         capture_output=True, text=True, check=False, cwd=cwd)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_every_default_output_opens_in_the_oldest_reader_environment(tmp_path):
    import sys

    from test_portable import A1B, NETCDF, SAMPLE, _every_type

    stores = []
    readme = tmp_path / "a1b.zarr"
    zopt.recompress(A1B, readme, chunks="time=12", shards="time=120")
    stores.append(readme)
    for name in NETCDF[1:]:
        dst = tmp_path / (os.path.basename(name) + ".zarr")
        assert "zopt only" not in zopt.recompress(os.path.join(SAMPLE, name), dst).readers
        stores.append(dst)
    with xr.open_dataset(A1B) as ds:
        ds.to_zarr(tmp_path / "enc.zarr", zarr_format=3, encoding=zopt.xarray.encoding(ds), consolidated=True)
    stores.append(tmp_path / "enc.zarr")
    src = tmp_path / "types.zarr"
    g = zarr.open_group(src, mode="w", zarr_format=3)
    for name, a in _every_type().items():
        g.create_array(name, shape=a.shape, chunks=(30, 50), dtype=a.dtype.name, dimension_names=("y", "x"))[...] = a
    zarr.consolidate_metadata(src)
    for layout in ("compact", "fixed-slot"):
        zopt.recompress(str(src), tmp_path / f"{layout}.zarr", chunks="y=20", shards="y=60", layout=layout)
        stores.append(tmp_path / f"{layout}.zarr")
    paths = [str(s) for s in stores]
    assert any("numcodecs.pcodec" in json.dumps(zarr.open_group(s).metadata.to_dict()) for s in paths)  # pcodec's format 4
    oldest = _digests(OLDEST, paths, tmp_path, versions=True)
    py, zarr_v, numcodecs_v, pcodec_v = oldest.pop("versions")
    assert py.startswith("3.11.") and zarr_v.startswith(MIN_VERSIONS["zarr-python"] + ".")
    assert numcodecs_v.startswith("0.16.") and pcodec_v == MIN_VERSIONS["pcodec"]
    current = _digests(sys.executable, paths, tmp_path)
    for store in paths:
        assert oldest[store] == current[store], store
    assert np.all([len(oldest[s]) > 0 for s in paths])

"""Open Zarr stores with xarray in a subprocess that has no zopt (issue 36): the reader a user
without zopt has.

How zopt is kept out, robustly (the test process itself has zopt installed, editable or not):

- the subprocess runs ``python -I -S``: no current directory on ``sys.path`` (``-I``; the
  repository root would make ``zopt`` importable from the checkout), no ``site`` module, so no
  ``.pth`` file runs: neither the editable install's path entry nor zopt's zarr startup hook
  (``zopt-zarr-startup.pth``, which imports zopt after zarr);
- ``sys.path`` gets this interpreter's site-packages directories back (numpy, zarr, numcodecs,
  pcodec, xarray …), as plain directories;
- ``sys.modules["zopt"] = None``: even a zopt installed into site-packages (not editable)
  cannot be imported;
- ``importlib.metadata.distributions`` leaves out the ``zopt`` distribution, so its entry points
  (``zarr.codecs``, ``zarr.data_type``, ``zarr.codec_pipeline``) are not seen: zarr reads entry
  points through it. A zopt codec in a store is then zarr's ``Unknown codec`` error, as for a
  user who never installed zopt;
- at the end the script checks that no ``zopt`` module was imported and that zarr's entry
  point groups hold nothing of zopt's.

``open_plain(stores, out)`` opens every store with ``xarray.open_zarr`` (consolidated metadata:
every array's metadata is parsed), loads it, and pickles ``{store: Dataset}`` into ``out``; it
returns the ``subprocess.CompletedProcess``.
"""

from __future__ import annotations

import json
import site
import subprocess
import sys
import textwrap
from pathlib import Path

#: the start of a script run in a process where zopt cannot be imported and has no entry points
#: (``sys.argv[1]``: the JSON list of site paths, ``site_paths()``)
PRELUDE_WITHOUT_ZOPT = textwrap.dedent("""
    import json, sys
    sys.path.extend(json.loads(sys.argv[1]))
    sys.modules["zopt"] = None
    import importlib.metadata as md
    _every = md.distributions
    def _without_zopt(**kw):
        return (d for d in _every(**kw) if (d.metadata["Name"] or "").lower() != "zopt")
    md.distributions = _without_zopt
""")

SCRIPT = PRELUDE_WITHOUT_ZOPT + textwrap.dedent("""
    import pickle, warnings
    import xarray as xr
    warnings.filterwarnings("ignore", message="Numcodecs codecs are not in the Zarr version 3 specification")
    out = {}
    for store in json.loads(sys.argv[2]):
        out[store] = xr.open_zarr(store, chunks=None).load()
    for group in ("zarr.codecs", "zarr.data_type", "zarr.codec_pipeline"):
        assert not [e for e in md.entry_points(group=group) if e.value.startswith("zopt")], group
    assert not [m for m in sys.modules if (m == "zopt" or m.startswith("zopt.")) and sys.modules[m] is not None]
    with open(sys.argv[3], "wb") as f:
        pickle.dump(out, f)
""")


def site_paths() -> list[str]:
    """This interpreter's site-packages directories (a venv's, or the system's)."""
    paths = list(site.getsitepackages())
    user = site.getusersitepackages()
    return [p for p in paths + ([user] if isinstance(user, str) else []) if Path(p).is_dir()]


def open_plain(stores: list, out: Path) -> subprocess.CompletedProcess:
    """Open ``stores`` (paths) with plain xarray in a subprocess without zopt; the loaded Datasets
    are pickled into ``out`` (``{str(store): Dataset}``) when it succeeds."""
    return subprocess.run([sys.executable, "-I", "-S", "-c", SCRIPT, json.dumps(site_paths()),
                           json.dumps([str(s) for s in stores]), str(out)],
                          capture_output=True, text=True, check=False, cwd=out.parent)

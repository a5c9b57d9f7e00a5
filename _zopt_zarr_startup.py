"""Startup hook (run from ``zopt-zarr-startup.pth``): register zopt's data types right after zarr < 3.4.

zarr-python 3.1 to 3.3 collect ``zarr.data_type`` entry points but never load them, and it parses an
array's ``data_type`` before anything else, so without this a store using zopt's data types
(int4, bfloat16, float8_*, …) would not open without ``import zopt``. This module is imported by
Python at startup; it costs a few microseconds and imports nothing itself. When ``zarr`` is first
imported, the one-shot finder below lets the import finish and then imports ``zopt.dtypes`` (not
the codecs, not the jobs) and registers the data types: that is all it does. It changes no zarr
setting: zarr keeps its own codec pipeline and ``bytes`` codec (``zopt.codecs.zarr_config``).
Errors in that import are swallowed so zarr itself always imports; ``import zopt.dtypes`` then
shows them. With zarr >= 3.4, which loads the entry points when it parses a data type, the hook
does nothing (``zopt.compat.zarr_compat.DATA_TYPE_ENTRY_POINTS_LOADED``).
"""

import sys


class _ImportZoptAfterZarr:
    def find_spec(self, name, path=None, target=None):
        if name != "zarr":
            return None
        sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_zarr = spec.loader.exec_module

        def exec_module(module):
            exec_zarr(module)
            try:
                version = tuple(int(x) for x in str(module.__version__).split(".")[:2])
            except (AttributeError, ValueError):
                version = (0, 0)
            if version >= (3, 4):
                return  # zarr >= 3.4 loads the zarr.data_type entry points itself
            try:  # noqa: SIM105 - never break `import zarr`; no contextlib at startup
                from zopt.dtypes import register_data_types

                register_data_types()
            except Exception:
                pass

        spec.loader.exec_module = exec_module
        return spec


if "zarr" not in sys.modules and not any(
    type(f).__name__ == "_ImportZoptAfterZarr" for f in sys.meta_path
):
    sys.meta_path.insert(0, _ImportZoptAfterZarr())

"""zopt's codecs are tested as zopt's jobs run them: inside ``zopt_pipeline()`` (zopt's codec
pipeline and ``bytes`` codec selected in zarr), which installing or importing zopt no longer
does for everyone (``zopt.codecs.zarr_config``). A test that needs zarr's own pipeline sets it
inside (``zarr.config.set``); ``tests/interop/test_zarr_untouched.py`` checks plain zarr."""

from __future__ import annotations

import pytest

from zopt.codecs.zarr_config import zopt_pipeline


@pytest.fixture(autouse=True)
def _zopt_pipeline():
    with zopt_pipeline():
        yield

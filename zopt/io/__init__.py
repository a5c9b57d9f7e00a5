"""Where data comes from and goes to.

- ``locations``: local paths and fsspec URLs;
- ``paths``: paths resolved on the client, source/destination overlap refused, atomic replacement;
- ``source_kinds``: the ``Source`` protocol and its factory ``open_source`` (``SOURCE_KINDS``);
- ``sources``: one path as a source (``PathSource``: Zarr v2/v3, netCDF through xarray), its
  variables described and read; ``store_source``: a zarr Store; ``multi``: several files combined.
"""

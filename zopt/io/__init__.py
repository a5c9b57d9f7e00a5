"""Where data comes from and goes to.

- ``locations``: a location resolved once (``where``): a local path, an object store through obstore
  (``object_stores``: s3, gs, az) or an fsspec URL; ``remote_files``: a netCDF/HDF5 file on one;
- ``paths``: paths resolved on the client, source/destination overlap refused, atomic replacement;
- ``source_kinds``: the ``Source`` protocol and its factory ``open_source`` (``SOURCE_KINDS``);
- ``sources``: one path as a source (``PathSource``: Zarr v2/v3, netCDF through xarray), its
  variables described and read; ``store_source``: a zarr Store; ``multi``: several files combined.
"""

"""Where data comes from and goes to.

- ``locations``: local paths and fsspec URLs;
- ``paths``: paths resolved on the client, source/destination overlap refused, atomic replacement;
- ``sources``: a source's variables described and read (Zarr v2/v3, netCDF through xarray).
"""

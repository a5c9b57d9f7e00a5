"""What to write: codec chains, per-chunk masks and chunk shapes. Pure planning, no writes.

- ``menu``: the default chain per data type; ``presets``: named chains; ``readers``: who reads what;
- ``chains``: a target chain parsed, split and given its decision;
- ``chunking``: ``--chunks``/``--shards`` parsed, inner chunks and shards chosen per variable;
- ``analysis``: per-chunk measurements and trial encodings as a Dask graph (one task of it:
  ``sampling``; its measurements: ``chunk_stats``; its trial encodings: ``trials``);
- ``plan``: policies → a mask per chunk, saved as a versionable Zarr group;
- ``baseline``: what zarr's default codecs would store on the same chunks.
"""

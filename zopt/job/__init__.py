"""One recompress job, one module per step of its data path (``docs/architecture.md``):

- ``options``: ``RecompressJob``, every option of a job, validated once;
- ``api``: ``recompress`` and ``recompress_in_place``, parse → plan of work → validate → target →
  graph → run → publish → report;
- ``work``: the pure plan of work per array, built and checked before anything is written;
- ``targets``: a local directory or a store; creating, measuring, publishing, discarding;
- ``dask_graph``: the Dask graph of the work and its run; ``graph``: the Dask keys;
- ``tasks``: the worker functions; ``reports``: ``ArrayReport`` and ``RecompressReport``;
- ``compact``: packing fixed-slot shards; ``progress``: the progress bar.

The public functions are ``zopt.recompress`` and ``zopt.recompress_in_place``.
"""

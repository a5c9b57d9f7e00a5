"""One recompress job, one module per step of its data path (``docs/architecture.md``):

- ``options``: ``RecompressJob``, every option of a job, validated once;
- ``api``: ``recompress`` and ``run_job``: parse → plan of work → validate → target → graph → run
  → publish → report; ``prepare``: ``parse_job`` and ``plan_of_work``, everything before the
  first write; ``in_place``: ``recompress_in_place``;
- ``work``: the pure plan of work per array, built and checked before anything is written;
- ``destinations``: the ``Target`` protocol and its factory ``open_target`` (``TARGET_KINDS``),
  a local directory or a store; ``icechunk_target``: a branch of an Icechunk repository;
  ``targets``: the target's metadata, created and measured;
- ``dask_graph``: the Dask graph of the work and its run; ``graph``: the Dask keys;
- ``tasks``: the worker functions; ``reports``: ``ArrayReport`` and ``RecompressReport``;
- ``analyze``: ``zopt.analyze`` and ``zopt.plan`` on any source; ``compact``: packing
  fixed-slot shards; ``progress``: the progress bar.

The public functions are ``zopt.recompress``, ``zopt.recompress_in_place``, ``zopt.analyze``,
``zopt.plan`` and ``zopt.compact``.
"""

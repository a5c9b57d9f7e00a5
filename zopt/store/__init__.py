"""The bytes on disk or in an object store: the shard format and how it is written and read.

- ``shards``: the ``sharding_indexed`` file (index, slots, packed and fixed-slot writes, finalize);
- ``files``: an array's chunk (shard) files in a local store;
- ``rewrite``: replacing a shard readers may be reading; ``lock``: one rewriting job per store;
- ``journal``: resuming a killed job (markers inside the partial store, the in-place journal);
- ``raw_read``, ``checked_read``, ``chunk_feed``: reading source chunks fast, checked, or aligned.
"""

"""What zopt needs from zarr-python and Dask, on every supported version (the lowest layer).

- ``zarr_compat``: everything that differs between zarr-python 3.1 and 3.4;
- ``alloc``: glibc settings that keep chunk-sized buffers in the heap;
- ``scheduling``: running a task list on Dask's local schedulers or a cluster;
- ``cluster``: the ``dask.distributed`` side of that (cancel, drain, job-end hooks).
"""

"""Keep freed buffers in the heap instead of returning them to the kernel (glibc only).

Encoding a 1 MiB chunk allocates several buffers of about its size: zstd's output and its
compression context (numcodecs makes a new one per call), the shuffled copy, the trial samples.
glibc serves allocations over its mmap threshold (128 KiB, raised dynamically up to 32 MiB only
after such a block is freed) with fresh ``mmap`` pages and unmaps them on ``free``, so every
chunk faults its buffers in again page by page: on ``benchmarks/recompress.py`` ~1,000 minor
faults per MiB of data, and on a VM each fault is expensive (a third of the CPU time in the
kernel). ``retain_freed_memory`` sets the mmap threshold to 32 MiB and the trim threshold to
``TRIM_BYTES``, so freed blocks are reused by the next chunk without faults (measured: 4-5×
fewer faults, half the kernel time). At most ``TRIM_BYTES`` of free memory stays resident per
heap; buffers over 32 MiB (a whole shard region) are still mapped and unmapped.

It changes the process's allocator settings, so zopt calls it only where it writes shards
(``zopt.codecs.chain.ChunkEncoder``), once per process; elsewhere (musl, macOS, Windows) it
does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

__all__ = ["TRIM_BYTES", "retain_freed_memory"]

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_BYTES = 32 * 1024 * 1024  # glibc's largest accepted mmap threshold on 64-bit
TRIM_BYTES = 64 * 1024 * 1024

_done = False


def retain_freed_memory() -> bool:
    """Apply the settings once per process; True when glibc accepted them."""
    global _done
    if _done:
        return True
    _done = True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_BYTES))

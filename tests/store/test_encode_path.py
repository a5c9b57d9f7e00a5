"""Buffer handling of the shard writers (issue 19): allocator settings, shards written by pieces."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from test_shards import _layout  # noqa: E402

from zopt.store.shards import pack, pack_parts, write_packed


def test_freed_chunk_buffers_are_reused_without_page_faults():
    """After ``retain_freed_memory``, allocating and freeing 1 MiB buffers in a loop faults far
    fewer pages than glibc's default (which maps and unmaps each one)."""
    code = (
        "import resource, sys, numpy as np\n"
        "if sys.argv[1] == '1':\n"
        "    from zopt.compat.alloc import retain_freed_memory\n"
        "    assert retain_freed_memory() and retain_freed_memory()\n"
        "f = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
        "for _ in range(20):  # a shard's worth of chunk-sized buffers, then all freed\n"
        "    xs = [np.ones((1 + k % 4) << 20, np.uint8) for k in range(8)]; del xs\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f)\n"
    )
    if not sys.platform.startswith("linux"):
        pytest.skip("glibc's mallopt only")
    faults = [int(subprocess.run([sys.executable, "-c", code, flag], capture_output=True, text=True, check=True).stdout)
              for flag in ("0", "1")]
    assert faults[1] * 5 < faults[0], faults


@pytest.mark.parametrize("where", ["start", "end"])
def test_a_shard_written_by_pieces_is_the_packed_bytes(tmp_path, where):
    layout = _layout(index_location=where)
    rng = np.random.default_rng(2)
    chunks = [(i, rng.integers(0, 255, 10 + i, dtype=np.uint8)) for i in (4, 0, 2)]
    parts = pack_parts(layout, chunks)
    assert b"".join(parts) == pack(layout, chunks)
    assert write_packed(tmp_path / "a" / "0", parts) == len(pack(layout, chunks))
    assert (tmp_path / "a" / "0").read_bytes() == pack(layout, chunks)
    assert pack_parts(layout, []) is None

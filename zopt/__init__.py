"""zopt: smaller Zarr v3 stores, written chunk by chunk in parallel with Dask.

The data path, one module per concept: ``zopt.dtypes`` → ``zopt.codecs`` → ``zopt.decisions``
→ (analysis → plan → shard layout, later) → ``zopt.engine`` (Dask graphs) → ``zopt.cli``.
"""

from zopt import _zarr_config
from zopt._version import __version__
from zopt.codecs import BytesCodec, ConditionalCodec, ShuffleCodec
from zopt.decisions import CompressIfSmaller, DecisionFunction, FixedMask, MaskGrid
from zopt.errors import ChunkDecodeError
from zopt.pipeline import current_chunk_index

_zarr_config.install()

__all__ = [
    "BytesCodec",
    "ChunkDecodeError",
    "CompressIfSmaller",
    "ConditionalCodec",
    "DecisionFunction",
    "FixedMask",
    "MaskGrid",
    "ShuffleCodec",
    "__version__",
    "current_chunk_index",
]

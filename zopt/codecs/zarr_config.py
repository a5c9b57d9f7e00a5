"""Make zarr-python use zopt's pipeline and ``bytes`` codec, unless the user chose others.

zarr imports zopt by itself through the entry points the first time it resolves one of zopt's
codecs or data types; this module runs then (or on ``import zopt``). It changes a setting only
while it still holds zarr's default, so an explicit choice such as the zarrs pipeline is kept.
Both replacements are subclasses that behave exactly like zarr's own for everything but what
zopt adds (chunk coordinates for decisions, chunk keys in errors, zopt's data types).
"""

from __future__ import annotations

import zarr

from zopt.compat.zarr_compat import codec_registry
from zopt.dtypes import register_data_types

ZARR_DEFAULTS = {
    "codec_pipeline.path": "zarr.core.codec_pipeline.BatchedCodecPipeline",
    "codecs.bytes": "zarr.codecs.bytes.BytesCodec",
}
ZOPT_SETTINGS = {
    "codec_pipeline.path": "zopt.codecs.pipeline.ChunkIndexCodecPipeline",
    "codecs.bytes": "zopt.codecs.bytes.BytesCodec",
}


def install() -> dict[str, str]:
    """Apply ``ZOPT_SETTINGS`` where zarr's config still has its default; returns what changed."""
    from zarr.registry import register_codec

    import zopt.codecs.bytes  # noqa: F401  (registers the class under its qualified name)
    import zopt.codecs.pipeline  # noqa: F401
    from zopt.codecs.bytes import BytesCodec

    register_codec("bytes", BytesCodec)
    register_data_types()
    changed = {}
    for key, value in ZOPT_SETTINGS.items():
        if zarr.config.get(key, None) in (ZARR_DEFAULTS[key], None):
            changed[key] = value
    changed.update(select_shared_codec_names())
    if changed:
        zarr.config.set(changed)
    return changed


SHARED_CODEC_NAMES = ("cast_value", "scale_offset")


def select_shared_codec_names() -> dict[str, str]:
    """Settings that select zopt's implementation of the codec names zarr-python >= 3.2 also
    ships (``scale_offset``, ``cast_value``), where zarr's config names none.

    zarr would otherwise warn "Codec 'scale_offset' not configured in config. Selecting any
    implementation" and pick by registration order. zopt's is chosen because it serves every
    data type zarr's does plus zopt's sub-byte and ML types, writes the same bytes where both
    apply (tested), and needs no ``cast-value-rs``. zarr's own stays one setting away:
    ``zarr.config.set({"codecs.cast_value": "zarr.codecs.cast_value.CastValue"})``.
    """
    out = {}
    for name in SHARED_CODEC_NAMES:
        if zarr.config.get(f"codecs.{name}", None) is not None:
            continue  # the user chose
        registry = codec_registry(name)
        if registry is None:
            continue
        ours = [q for q in registry if q.startswith("zopt.")]
        if ours and len(registry) > 1:
            out[f"codecs.{name}"] = ours[0]
    return out

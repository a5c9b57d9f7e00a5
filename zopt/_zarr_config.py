"""Make zarr-python use zopt's pipeline and ``bytes`` codec, unless the user chose others.

zarr imports zopt by itself through the entry points the first time it resolves one of zopt's
codecs or data types; this module runs then (or on ``import zopt``). It changes a setting only
while it still holds zarr's default, so an explicit choice such as the zarrs pipeline is kept.
Both replacements are subclasses that behave exactly like zarr's own for everything but what
zopt adds (chunk coordinates for decisions, chunk keys in errors, zopt's data types).
"""

from __future__ import annotations

import zarr

ZARR_DEFAULTS = {
    "codec_pipeline.path": "zarr.core.codec_pipeline.BatchedCodecPipeline",
    "codecs.bytes": "zarr.codecs.bytes.BytesCodec",
}
ZOPT_SETTINGS = {
    "codec_pipeline.path": "zopt.pipeline.ChunkIndexCodecPipeline",
    "codecs.bytes": "zopt.codecs.bytes.BytesCodec",
}


def install() -> dict[str, str]:
    """Apply ``ZOPT_SETTINGS`` where zarr's config still has its default; returns what changed."""
    from zarr.registry import register_codec

    import zopt.codecs.bytes  # noqa: F401  (registers the class under its qualified name)
    import zopt.pipeline  # noqa: F401
    from zopt.codecs.bytes import BytesCodec

    register_codec("bytes", BytesCodec)
    _register_data_types()
    changed = {}
    for key, value in ZOPT_SETTINGS.items():
        if zarr.config.get(key, None) in (ZARR_DEFAULTS[key], None):
            changed[key] = value
    changed.update(defer_shared_codec_names())
    if changed:
        zarr.config.set(changed)
    return changed


SHARED_CODEC_NAMES = ("cast_value", "scale_offset")


def defer_shared_codec_names() -> dict[str, str]:
    """Settings that keep another implementation (zarr-python >= 3.2's own) of a codec name zopt
    also registers, where zarr's config names none: zarr would otherwise warn and pick either.
    zopt's is then chosen with ``zarr.config.set({"codecs.cast_value":
    "zopt.codecs.cast_value.CastValueCodec"})``."""
    from zarr import registry

    registries = getattr(registry, "__codec_registries", {})
    out = {}
    for name in SHARED_CODEC_NAMES:
        if zarr.config.get(f"codecs.{name}", None) is not None or name not in registries:
            continue
        registries[name].lazy_load()
        others = [q for q in registries[name] if not q.startswith("zopt.")]
        if others:
            out[f"codecs.{name}"] = others[0]
    return out


def _register_data_types() -> None:
    from zarr.core.dtype import data_type_registry

    from zopt.dtypes.complex import COMPLEX_DTYPES
    from zopt.dtypes.ml import ML_DTYPES

    for name, cls in {**ML_DTYPES, **COMPLEX_DTYPES}.items():
        data_type_registry.register(name, cls)

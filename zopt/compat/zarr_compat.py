"""Everything that differs between the zarr-python versions zopt supports (3.1 to 3.4).

zopt imports these names from here and nowhere else, so one file says what each zarr release
changed and how zopt copes:

=====================================  =========================================================
difference                             what zopt does
=====================================  =========================================================
``CodecPipeline.read``/``write``       3.2 returns one ``GetResult`` (``{"status": "present" |
return per-chunk results (3.2+)        "missing"}``) per chunk from ``read``; 3.1 returns None.
                                       ``chunk_result`` / ``joined_results`` build either.
``BytesCodec.endian``,                 enums up to 3.2, plain strings from 3.3 (the enums are
``ShardingCodec.index_location``       deprecated): ``endian_of`` / ``index_location_of`` return
                                       ``"little"``/``"big"``/None and ``"start"``/``"end"``.
codec registry                         ``zarr.registry.__codec_registries`` in 3.1,
                                       ``_codec_registries`` from 3.2: ``codec_registry``.
unknown codecs, bad configuration      3.1 raises ``KeyError``; 3.4 raises ``UnknownCodecError``
                                       and strict-JSON ``TypeError``/``ValueError``:
                                       ``resolve_codec`` raises ``ValueError`` naming the codec
                                       and the zarr version.
``DataTypeValidationError``            ``zarr.core.dtype.common`` in 3.1, ``zarr.errors`` from 3.3.
synchronous codecs (3.3+)              wrappers report ``_sync_capable``; ``supports_sync`` asks
                                       zarr's own predicate where it exists.
``fill_value_or_default``              ``zarr.core.codec_pipeline`` in 3.1,
                                       ``zarr.core.chunk_utils`` from 3.3.
``zarr.data_type`` entry points        collected but never loaded by 3.1-3.3: zopt's startup
                                       hook (``_zopt_zarr_startup.py``) registers zopt's data types
                                       after zarr there, and only there (``DATA_TYPE_ENTRY_POINTS_LOADED``).
zarr's own ``scale_offset`` and        shipped from 3.2; zopt's implementation is selected through
``cast_value`` (3.2+)                  ``zarr.config`` inside zopt's jobs (``zopt.codecs.zarr_config``).
``numcodecs.*`` array→bytes wrappers   ``_encode_sync``/``_decode_sync`` from 3.4; before, only
(pcodec, zfpy) synchronous (3.4+)      async methods that start a thread per call:
                                       ``zopt.codecs.chain`` calls their numcodecs object.
a shard's inner codecs validated       3.4 resolves them against the data type's default (0),
with a placeholder fill (3.4+)         not the array's fill: ``placeholder_fill_validation``
                                       tells zopt's value codecs not to refuse that 0.
=====================================  =========================================================

This module imports only zarr and the leaf ``zopt.errors``, so any zopt module may import it.
"""

from __future__ import annotations

import re
import sys
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard, TypeVar

import zarr
from zarr.errors import ContainsArrayAndGroupError, ContainsArrayError, ContainsGroupError

if TYPE_CHECKING:
    import numpy as np
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer, NDBuffer
    from zarr.core.metadata import ArrayV2Metadata, ArrayV3Metadata
    from zarr.storage import StoreLike
from zopt.errors import OptionError

__all__ = [
    "DATA_TYPE_ENTRY_POINTS_LOADED",
    "HAS_FUSED_PIPELINE",
    "NODE_EXISTS_ERRORS",
    "PIPELINE_RETURNS_RESULTS",
    "ZARR_VERSION",
    "DataTypeValidationError",
    "chunk_result",
    "codec_registry",
    "keep_zarrs_own_codecs",
    "endian_of",
    "endian_text",
    "existing_node_path",
    "fill_value_or_default",
    "index_location_of",
    "first_unservable_codec",
    "joined_results",
    "open_array",
    "placeholder_fill_validation",
    "unservable_array_error",
    "regular_chunk_shape",
    "resolve_codec",
    "supports_sync",
    "SyncCodec",
    "zarr_version_string",
]


def _parse_version(text: str) -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


ZARR_VERSION: tuple[int, int] = _parse_version(zarr.__version__)
"""(major, minor) of the installed zarr-python."""


def zarr_version_string() -> str:
    """``"zarr-python 3.4.2"``: for error messages."""
    return f"zarr-python {zarr.__version__}"


def placeholder_fill_validation() -> bool:
    """True when the caller runs inside zarr >= 3.4's ``ShardingCodec._validate_inner_codecs``.

    That check resolves a shard's inner codecs against ``dtype.default_scalar()`` (0), not the
    array's fill value, so a codec that refuses a fill it cannot round trip (``scale_offset``,
    ``cast_value``; spec: "SHOULD validate fill value survives round-trip") would refuse every
    sharded array whose packing does not represent 0 exactly, e.g. offset 273.15 with step 0.01.
    The real fill is checked when the shard's inner chain is built for a read or write.
    Only called on a refusal path: it walks at most 12 frames.
    """
    if ZARR_VERSION < (3, 4):
        return False
    frame: FrameType | None = sys._getframe(1)
    for _ in range(12):
        if frame is None:
            return False
        if frame.f_code.co_name == "_validate_inner_codecs" and frame.f_globals.get("__name__") == "zarr.codecs.sharding":
            return True
        frame = frame.f_back
    return False


# -- pipeline return values ---------------------------------------------------------------------
try:  # 3.2+: read returns one GetResult per chunk
    from zarr.abc.codec import GetResult as _GetResult  # type: ignore[attr-defined,unused-ignore]  # not in 3.1

    PIPELINE_RETURNS_RESULTS = True
except ImportError:  # 3.1
    _GetResult = None  # type: ignore[misc,assignment,unused-ignore]  # a class in 3.2+
    PIPELINE_RETURNS_RESULTS = False

try:
    from zarr.core.codec_pipeline import FusedCodecPipeline as _Fused  # type: ignore[attr-defined,unused-ignore]  # noqa: F401  # 3.4+

    HAS_FUSED_PIPELINE = True
except ImportError:
    HAS_FUSED_PIPELINE = False


def chunk_result(present: bool) -> Any:
    """What a pipeline's ``read_batch`` reports for one chunk: a ``GetResult`` on zarr >= 3.2
    (``present`` False when the store had no bytes for it), None on 3.1."""
    if not PIPELINE_RETURNS_RESULTS:
        return None
    return _GetResult(status="present" if present else "missing")


def joined_results(results: list[Any]) -> Any:
    """Concatenate per-batch results of ``read_batch``/``write_batch`` (None on zarr 3.1)."""
    if all(r is None for r in results):
        return None
    return tuple(x for r in results if r is not None for x in r)


# -- enums that became strings (3.3) ------------------------------------------------------------
def _enum_text(value: object) -> str | None:
    if value is None:
        return None
    return str(getattr(value, "value", value))


def endian_text(endian: object) -> str | None:
    """``"little"``, ``"big"`` or None from zarr's ``Endian`` enum (<= 3.2) or string (3.3+).

    Raises ValueError for any other value.
    """
    text = _enum_text(endian)
    if text not in (None, "little", "big"):
        raise OptionError("endian", f"{text!r} is not one of 'little', 'big'")
    return text


def endian_of(codec: object) -> str | None:
    """The ``endian`` of a ``bytes`` codec (zarr's or zopt's): ``"little"``, ``"big"`` or None
    (1-byte types). Raises ValueError for any other value."""
    return endian_text(getattr(codec, "endian", None))


def index_location_of(codec: object) -> str:
    """The ``index_location`` of a ``sharding_indexed`` codec: ``"start"`` or ``"end"``."""
    where = _enum_text(getattr(codec, "index_location", "end"))
    if where not in ("start", "end"):
        raise OptionError("index_location", f"{where!r} is not one of 'start', 'end'")
    return where


# -- registry -----------------------------------------------------------------------------------
def codec_registry(name: str) -> Any:
    """zarr's registry of implementations for codec ``name`` (lazily loaded entry points
    included), or None when no implementation is registered."""
    from zarr import registry

    registries = getattr(registry, "_codec_registries", None)
    if registries is None:  # 3.1: a module-level double-underscore name (not mangled)
        registries = getattr(registry, "__codec_registries", {})
    if name not in registries:
        return None
    reg = registries[name]
    reg.lazy_load()
    return reg


#: codec names zarr-python >= 3.2 ships and zopt also registers (zopt.codecs.scale_offset, cast_value)
SHARED_CODEC_NAMES = ("cast_value", "scale_offset")
#: name → zarr's own implementation, where ``keep_zarrs_own_codecs`` named it in zarr's config
ZARRS_OWN_SELECTED: dict[str, str] = {}


def keep_zarrs_own_codecs() -> dict[str, str]:
    """Name zarr's own ``scale_offset``/``cast_value`` in zarr's config where zarr ships them (3.2+)
    and the config names no implementation; returns what was set.

    Without zopt zarr uses its own; with zopt's entry points registered beside it, zarr would warn
    "Codec 'scale_offset' not configured in config. Selecting any implementation" and pick zopt's.
    Naming zarr's own keeps what a zarr user without zopt gets (zopt's jobs select zopt's inside
    ``zopt.codecs.zarr_config.zopt_pipeline``). Reads zarr's registry without loading entry points
    (this runs while zarr loads one of zopt's).
    """
    from zarr import registry

    registries = getattr(registry, "_codec_registries", None)
    if registries is None:  # 3.1: a module-level double-underscore name (not mangled)
        registries = getattr(registry, "__codec_registries", {})
    out = {}
    for name in SHARED_CODEC_NAMES:
        if zarr.config.get(f"codecs.{name}", None) is not None:
            continue  # the user chose (or this ran before)
        own = [q for q in registries.get(name, ()) if q.startswith("zarr.")]
        if own:
            out[f"codecs.{name}"] = ZARRS_OWN_SELECTED[name] = own[0]
    if out:
        zarr.config.set(out)
    return out


#: codec name → the Python package that implements it (what a reader must install)
CODEC_PACKAGES = {"numcodecs.pcodec": "pcodec"}


def missing_codec_package(name: str) -> str | None:
    """The package codec ``name`` needs (``CODEC_PACKAGES``) when it cannot be imported here, else None."""
    import importlib

    package = CODEC_PACKAGES.get(name)
    if package is None:
        return None
    try:
        importlib.import_module(package)
    except ImportError:
        return package
    return None


def _package_note(name: str) -> str:
    package = missing_codec_package(name)
    return "" if package is None else f" (codec {name!r} needs the Python package {package!r}: pip install {package})"


def resolve_codec(data: object, *, where: str = "codecs") -> Any:
    """A codec object from its JSON form ``{"name": …, "configuration": …}``.

    Uses zarr's public ``get_codec_class(name).from_dict(data)``, so the implementation named in
    ``zarr.config`` is chosen. Raises ValueError naming ``where``, the codec and the installed
    zarr-python version when the codec is unknown or its configuration is refused (zarr 3.1
    raises KeyError, 3.4 UnknownCodecError or strict-JSON TypeError: all become ValueError), and
    names the package to install when the codec's (``CODEC_PACKAGES``: pcodec) is missing.
    """
    from zarr.registry import get_codec_class

    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        raise OptionError("codecs", label=where, message=f"expected {{'name': …, 'configuration': {{…}}}}, got {data!r}")
    name = data["name"]
    try:
        cls = get_codec_class(name)
    except (KeyError, ValueError) as exc:
        raise OptionError("codecs", label=where, message=
            f"unknown codec {name!r}: no implementation is registered with "
            f"{zarr_version_string()}{_package_note(name)}"
        ) from exc
    try:
        return cls.from_dict(data)
    except (TypeError, KeyError, ValueError) as exc:
        raise OptionError("codecs", label=where, message=
            f"codec {name!r} refused its configuration under {zarr_version_string()}: {exc}{_package_note(name)}"
        ) from exc


def first_unservable_codec(codecs: object) -> tuple[str, str] | None:
    """``(codec name, reason)`` of the first codec in a JSON codec list (looking inside
    ``sharding_indexed`` and ``conditional`` first) that the installed zarr cannot build, or None."""
    for c in codecs if isinstance(codecs, list) else []:
        if not isinstance(c, dict):
            continue
        cfg = c.get("configuration")
        if not isinstance(cfg, dict):
            cfg = {}
        for key in ("codecs", "index_codecs"):
            found = first_unservable_codec(cfg.get(key))
            if found is not None:
                return found
        try:
            resolve_codec(c)
        except ValueError as exc:
            return str(c.get("name")), str(exc.__cause__ or exc)
    return None


def open_array(store: StoreLike, *, path: str | None = None, mode: str = "r") -> Any:
    """``zarr.open_array``, with an array the installed zarr cannot serve reported as
    ``zopt.errors.UnsupportedArrayError`` (see ``unservable_array_error``).

    store : a local path or a zarr store; path : the array inside it.
    """
    try:
        return zarr.open_array(store, path=path or "", mode=mode)
    except (TypeError, ValueError, KeyError) as exc:
        err = unservable_array_error(store, exc)
        if err is None:
            raise
        raise err from exc


def unservable_array_error(store: StoreLike, exc: BaseException) -> Exception | None:
    """The ``UnsupportedArrayError`` (a ValueError) to raise instead of ``exc``, which zarr
    raised while parsing array metadata in ``store``, or None when ``exc`` is not about a codec.

    For a local store the arrays' ``zarr.json`` files are searched for the first codec the
    installed zarr cannot build, and the message names the array, the codec and the zarr-python
    version (zarr itself raises e.g. a bare TypeError for ``"level": 2.0``).
    """
    import json
    import os

    from zopt.errors import UnsupportedArrayError

    if isinstance(exc, FileNotFoundError) or type(exc).__name__ in (
        "ArrayNotFoundError", "NodeNotFoundError", "GroupNotFoundError", "NodeTypeValidationError"
    ):
        return None
    if isinstance(store, str | os.PathLike) and os.path.isdir(store):
        root = os.fspath(store)
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            if "zarr.json" not in filenames:
                continue
            try:
                with open(os.path.join(dirpath, "zarr.json"), encoding="utf-8") as f:
                    meta = json.load(f)
            except (OSError, ValueError):
                continue
            if not isinstance(meta, dict) or meta.get("node_type") != "array":
                continue
            found = first_unservable_codec(meta.get("codecs"))
            if found is not None:
                name = os.path.relpath(dirpath, root).replace(os.sep, "/")
                return UnsupportedArrayError(
                    f"array {'/' if name == '.' else name!r} of {root}: codec {found[0]!r} cannot be "
                    f"served with {zarr_version_string()}: {found[1]}"
                )
    if isinstance(exc, TypeError):
        return UnsupportedArrayError(
            f"an array of {store}: its metadata cannot be read with {zarr_version_string()}: {exc}"
        )
    return None


# -- errors -------------------------------------------------------------------------------------
try:  # 3.3+
    from zarr.errors import DataTypeValidationError  # type: ignore[attr-defined,unused-ignore]  # 3.3+ only
except ImportError:  # 3.1
    from zarr.core.dtype.common import DataTypeValidationError  # type: ignore[no-redef,unused-ignore]  # 3.1's place

#: what zarr raises creating a node where one exists (without overwrite); the same classes in 3.1 and 3.4
NODE_EXISTS_ERRORS = (ContainsArrayError, ContainsGroupError, ContainsArrayAndGroupError)


def existing_node_path(exc: BaseException) -> str | None:
    """The path of the node a ``NODE_EXISTS_ERRORS`` error names (``''``: the store's root), or None.
    zarr 3.1 to 3.4 keep only the message: "An array exists in store … at path 'a/b'." """
    found = re.search(r" at path '([^']*)'\.?$", str(exc)) if isinstance(exc, NODE_EXISTS_ERRORS) else None
    return None if found is None else found.group(1)

# -- synchronous codecs -------------------------------------------------------------------------
_In = TypeVar("_In", bound="NDBuffer | Buffer")
_Out = TypeVar("_Out", bound="NDBuffer | Buffer")


class SyncCodec(Protocol[_In, _Out]):
    """A codec with synchronous methods (``supports_sync``): zarr 3.3+'s ``SupportsSyncCodec``,
    which zarr 3.1 lacks. ``SyncCodec[NDBuffer, Buffer]`` is an array→bytes codec."""

    def _encode_sync(self, chunk_data: _In, chunk_spec: ArraySpec, /) -> _Out | None: ...

    def _decode_sync(self, chunk_data: _Out, chunk_spec: ArraySpec, /) -> _In: ...


try:  # 3.3+: structural protocol plus a codec's own `_sync_capable` opt-out
    from zarr.abc.codec import _codec_supports_sync as _zarr_supports_sync  # type: ignore[attr-defined,unused-ignore]  # 3.3+ only
except ImportError:
    _zarr_supports_sync = None  # type: ignore[assignment,unused-ignore]  # a function in 3.3+


def supports_sync(codec: object) -> TypeGuard[SyncCodec[Any, Any]]:
    """Whether ``codec`` can encode and decode without an event loop.

    True when it has ``_encode_sync`` and ``_decode_sync`` and does not opt out through
    ``_sync_capable`` (zarr 3.3's ``ShardingCodec`` and zopt's ``ConditionalCodec`` are
    capable only when every codec they wrap is).
    """
    if _zarr_supports_sync is not None:
        return bool(_zarr_supports_sync(codec))
    return (
        callable(getattr(codec, "_encode_sync", None))
        and callable(getattr(codec, "_decode_sync", None))
        and bool(getattr(codec, "_sync_capable", True))
    )


# -- chunk grids ----------------------------------------------------------------------------------
_REGULAR_GRIDS = ("RegularChunkGrid", "RegularChunkGridMetadata")  # 3.1, 3.4


def regular_chunk_shape(metadata: ArrayV3Metadata | ArrayV2Metadata) -> tuple[int, ...] | None:
    """The chunk shape of array ``metadata`` (v2 or v3) with a regular chunk grid, else None
    (zarr 3.4's rectilinear grids). The grid class is ``RegularChunkGrid`` up to 3.3 and
    ``RegularChunkGridMetadata`` in 3.4."""
    if metadata.zarr_format == 2:
        return tuple(int(c) for c in metadata.chunks)
    grid = metadata.chunk_grid
    if type(grid).__name__ not in _REGULAR_GRIDS:
        return None
    shape: tuple[int, ...] = grid.chunk_shape  # type: ignore[attr-defined,union-attr,unused-ignore]  # the regular grid classes (checked by name above: 3.1 and 3.4 name it differently) have it, their bases do not
    return tuple(int(c) for c in shape)


def nd_buffer(spec: ArraySpec, array: np.ndarray) -> NDBuffer:
    """``spec.prototype.nd_buffer.from_ndarray_like(array)``, the chunk a codec returns. Only for
    the type checker: numpy 2.4's ndarray stubs no longer match zarr's ``NDArrayLike`` protocol."""
    return spec.prototype.nd_buffer.from_ndarray_like(array)  # type: ignore[arg-type]  # see the docstring


def chunk_shape_of(metadata: ArrayV3Metadata | ArrayV2Metadata) -> tuple[int, ...]:
    """``regular_chunk_shape`` of an array zopt reads chunk by chunk; ValueError for any other
    grid (zarr 3.4's rectilinear grids)."""
    shape = regular_chunk_shape(metadata)
    if shape is None:
        raise ValueError(f"chunk_grid: {type(getattr(metadata, 'chunk_grid', None)).__name__} is not a regular chunk grid")
    return shape


def item_size_of(metadata: ArrayV3Metadata | ArrayV2Metadata) -> int:
    """Bytes per element of a v3 array's data type (``ZDType.item_size``, which variable-size
    types lack: AttributeError, TypeError or NotImplementedError; AttributeError for v2 metadata)."""
    if metadata.zarr_format != 3:
        raise AttributeError("v2 array metadata has no 'data_type'")
    size = metadata.data_type.item_size  # type: ignore[attr-defined,unused-ignore]  # fixed-size ZDTypes have it (no common base in 3.1); AttributeError for the others, as documented
    return int(size)


# -- moved helpers ------------------------------------------------------------------------------
try:  # 3.3+
    from zarr.core.chunk_utils import fill_value_or_default  # type: ignore[import-not-found,unused-ignore]  # 3.3+ only
except ImportError:  # 3.1
    from zarr.core.codec_pipeline import fill_value_or_default  # type: ignore[attr-defined,no-redef,unused-ignore]  # moved in 3.3

# -- data-type entry points ---------------------------------------------------------------------
DATA_TYPE_ENTRY_POINTS_LOADED: bool = ZARR_VERSION >= (3, 4)
"""zarr >= 3.4 loads ``zarr.data_type`` entry points when it parses a data type; 3.1 to 3.3
only collect them, so zopt's startup hook imports zopt after zarr there."""

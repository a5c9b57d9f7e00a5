"""The ``conditional`` bytes→bytes meta-codec (``../shared/specs/optional.md``).

The seed draft named it ``optional``; zarr-extensions registered the same bytes as
``conditional`` (wrapped codecs must all be bytes→bytes). zopt writes ``conditional`` and reads
``optional`` as an alias when its configuration has a ``codecs`` list; any other ``optional``
configuration is zarrs' unrelated nullable-data codec and is refused.

Stored chunk (spec "Encoding Process"): ``header_bits / 8`` header bytes, then the payload.
Bit ``i`` of the header (least significant bit of byte 0 first) is 1 when wrapped codec ``i``
was applied. Reserved bits (``len(codecs)`` … ``header_bits - 1``) are written 0 and rejected on
read. Decoding applies the set codecs in reverse order (spec "Decoding Process").

Examples: codecs ``[shuffle, zstd]``, mask ``0b10`` → byte ``0x02`` then the zstd frame;
``header_bits=16`` with bits {0, 9} set → header ``01 02``.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Self

import numpy as np
from zarr.abc.codec import BytesBytesCodec
from zarr.core.common import parse_named_configuration

from zopt.codecs.context import current_chunk
from zopt.codecs.decisions import CodecRef, Decision, resolve_decision
from zopt.codecs.sync import sync_decoder, sync_encoder
from zopt.compat.zarr_compat import supports_sync
from zopt.errors import ChunkIndexUnavailableError, OptionError

if TYPE_CHECKING:
    from zarr.abc.codec import Codec
    from zarr.core.array_spec import ArraySpec
    from zarr.core.buffer import Buffer

    from zopt.codecs.decisions import DecisionLike

__all__ = ["ConditionalCodec", "OptionalAliasCodec", "parse_header", "format_header"]

_CONFIG_KEYS = {"codecs", "header_bits"}


#: largest header_bits accepted: masks are handled as 64-bit integers (plans store them so)
MAX_HEADER_BITS = 64


def default_header_bits(n_codecs: int) -> int:
    """``ceil(n / 8) * 8`` (spec "Codec Configuration")."""
    return math.ceil(n_codecs / 8) * 8


def format_header(mask: int, header_bits: int) -> bytes:
    """The header bytes for ``mask``: ``header_bits // 8`` bytes, little-endian bit order."""
    return mask.to_bytes(header_bits // 8, "little")


def parse_header(data: bytes | np.ndarray, header_bits: int, n_codecs: int) -> int:
    """Read the mask from the start of a stored chunk.

    Raises ValueError when the chunk is shorter than the header or a reserved bit is set.
    """
    nbytes = header_bits // 8
    raw = bytes(np.asarray(data, dtype=np.uint8)[:nbytes]) if not isinstance(data, bytes) else data[:nbytes]
    if len(raw) < nbytes:
        raise ValueError(
            f"conditional: chunk has {len(raw)} bytes, shorter than its {nbytes}-byte header"
        )
    mask = int.from_bytes(raw, "little")
    if mask >> n_codecs:
        raise ValueError(
            f"conditional: header {raw.hex()} sets reserved bits (mask {mask:#b}, but only "
            f"{n_codecs} wrapped codecs); reserved bits must be 0"
        )
    return mask


def _parse_codecs(codecs: object) -> tuple[BytesBytesCodec, ...]:
    from zopt.compat.zarr_compat import resolve_codec

    if isinstance(codecs, str | bytes | dict) or not isinstance(codecs, Iterable):
        raise OptionError("codecs", f"expected a list of bytes→bytes codecs, got {codecs!r}")
    parsed = []
    for i, c in enumerate(codecs):
        if isinstance(c, dict):
            c = resolve_codec(c, where=f"codecs[{i}]")
        elif isinstance(c, str):
            raise OptionError("codecs", label=f"codecs[{i}]", message=
                f"{c!r}: give a codec object or {{'name': …, 'configuration': …}}"
            )
        if not isinstance(c, BytesBytesCodec):
            raise OptionError("codecs", label=f"codecs[{i}]", message=
                f"{type(c).__name__} is not a bytes→bytes codec; the conditional "
                "codec wraps bytes→bytes codecs only (e.g. shuffle, zstd, blosc, gzip, crc32c)"
            )
        parsed.append(c)
    if not parsed:
        raise OptionError("codecs", "[] is not allowed; the conditional codec needs 1 to "
                         f"{MAX_HEADER_BITS} bytes→bytes codecs to choose from")
    if len(parsed) > MAX_HEADER_BITS:
        raise OptionError("codecs", f"{len(parsed)} codecs are more than the {MAX_HEADER_BITS} a header can flag")
    return tuple(parsed)


def _parse_header_bits(header_bits: object, n_codecs: int) -> int:
    if header_bits is None:
        return default_header_bits(n_codecs)
    if isinstance(header_bits, bool) or not isinstance(header_bits, int | np.integer):
        raise OptionError("header_bits", f"expected an integer, got {header_bits!r}")
    header_bits = int(header_bits)
    if header_bits % 8 or not max(n_codecs, 8) <= header_bits <= MAX_HEADER_BITS:
        raise OptionError("header_bits",
            f"{header_bits} is not allowed; it must be a multiple of 8 from "
            f"max(8, number of codecs = {n_codecs}) to {MAX_HEADER_BITS}, e.g. {default_header_bits(n_codecs)}"
        )
    return header_bits


@dataclass(frozen=True)
class ConditionalCodec(BytesBytesCodec):
    """Per-chunk conditional application of wrapped bytes→bytes codecs.

    Parameters
    ----------
    codecs : wrapped bytes→bytes codecs (objects or JSON dicts), bit ``i`` ↔ ``codecs[i]``.
    header_bits : header size in bits; a multiple of 8, >= ``len(codecs)``;
        default ``ceil(len(codecs) / 8) * 8``.
    decision : how to pick each chunk's mask when writing; see ``zopt.codecs.decisions``. Runtime
        only, never serialized; ``None`` writes mask 0 (spec Phase 1).
    trial_encode : for a decision function, whether it takes the trial-encoded chunk
        (spec Phase 2); by default inferred from the function's arity.

    Raises ValueError naming ``codecs``, ``header_bits`` or ``decision`` on bad input.
    """

    is_fixed_size = False

    codecs: tuple[BytesBytesCodec, ...]
    header_bits: int
    decision: Decision | None = field(default=None, compare=False, repr=False)

    def __init__(
        self,
        *,
        codecs: object = (),
        header_bits: int | None = None,
        decision: DecisionLike = None,
        trial_encode: bool | None = None,
    ) -> None:
        codecs_parsed = _parse_codecs(codecs)
        bits = _parse_header_bits(header_bits, len(codecs_parsed))
        object.__setattr__(self, "codecs", codecs_parsed)
        object.__setattr__(self, "header_bits", bits)
        object.__setattr__(
            self, "decision", resolve_decision(decision, len(codecs_parsed), bits, trial_encode)
        )

    # -- JSON ---------------------------------------------------------------------------------
    codec_name = "conditional"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        _, config = parse_named_configuration(data, cls.codec_name, require_configuration=True)
        return cls._from_configuration(config or {})

    @classmethod
    def _from_configuration(cls, config: dict[str, Any]) -> Self:
        unknown = set(config) - _CONFIG_KEYS
        if unknown:
            raise OptionError("conditional",
                f"unknown configuration keys {sorted(unknown)}; allowed: {sorted(_CONFIG_KEYS)}"
            )
        if "codecs" not in config:
            raise OptionError("codecs", "the conditional codec's configuration requires 'codecs'")
        return cls(codecs=config["codecs"], header_bits=config.get("header_bits"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": "conditional",
            "configuration": {
                "codecs": [c.to_dict() for c in self.codecs],
                "header_bits": self.header_bits,
            },
        }

    # -- runtime configuration ------------------------------------------------------------
    def with_decision(self, decision: DecisionLike, trial_encode: bool | None = None) -> Self:
        """A copy whose writes use ``decision`` (see ``zopt.codecs.decisions``)."""
        return replace(
            self,
            decision=resolve_decision(decision, len(self.codecs), self.header_bits, trial_encode),
        )

    @property
    def header_nbytes(self) -> int:
        return self.header_bits // 8

    def codec_refs(self) -> list[CodecRef]:
        refs = []
        for i, c in enumerate(self.codecs):
            d = c.to_dict()
            config = d.get("configuration") or {}
            refs.append(CodecRef(str(d["name"]), i, dict(config) if isinstance(config, Mapping) else {}, c))
        return refs

    # -- zarr codec API -----------------------------------------------------------------------
    def evolve_from_array_spec(self, array_spec: ArraySpec) -> Self:
        evolved = tuple(c.evolve_from_array_spec(array_spec) for c in self.codecs)
        if evolved != self.codecs:
            return replace(self, codecs=evolved)
        return self

    def compute_encoded_size(self, input_byte_length: int, chunk_spec: ArraySpec) -> int:
        raise NotImplementedError("the conditional codec's encoded size depends on the data")

    def max_encoded_size(self, input_byte_length: int) -> int:
        """Upper bound in bytes when the writer never stores a chunk larger than mask 0 would.

        That holds for ``compress_if_smaller`` and for the fixed-slot writer, which falls back
        to mask 0 when an encoding would overflow its slot: raw size + header.
        """
        return input_byte_length + self.header_nbytes

    def encode_bytes(
        self, data: np.ndarray, spec: ArraySpec, chunk_index: tuple[int, ...] | None = None
    ) -> tuple[int, np.ndarray]:
        """Choose the mask for ``data`` (1-D uint8) and encode it; returns ``(mask, payload)``.

        Synchronous (call it from a worker thread); the payload excludes the header.
        """
        return self.chunk_encoder(spec)(data, chunk_index)

    def chunk_encoder(self, spec: ArraySpec) -> Callable[[np.ndarray, tuple[int, ...] | None], tuple[int, np.ndarray]]:
        """``encode_bytes`` for one chunk spec as ``f(data, chunk_index) -> (mask, payload)``, with
        the wrapped codecs' encoders and references made once instead of per chunk."""
        if self.decision is None:
            return lambda data, chunk_index: (0, data)
        encoders = [sync_encoder(c, spec) for c in self.codecs]
        refs = self.codec_refs()
        choose = self.decision.choose

        def run(i: int, d: np.ndarray) -> np.ndarray:
            return encoders[i](d)

        return lambda data, chunk_index: choose(chunk_index, refs, data, run)

    def decode_bytes(self, stored: np.ndarray, spec: ArraySpec) -> tuple[int, np.ndarray]:
        """Split and decode a stored chunk (1-D uint8); returns ``(mask, decoded bytes)``.

        A zstd frame is decoded into at most the bytes the chunk can hold (``spec``'s shape and
        data type through the codecs before it; ``zopt.codecs.bounded``). Raises
        ChunkDecodeError (ZoptError, ValueError) naming the codec and the current chunk.
        """
        from zopt.codecs.bounded import decode_error

        try:
            mask = parse_header(stored, self.header_bits, len(self.codecs))
        except ValueError as exc:
            raise decode_error("conditional", exc) from exc
        data = stored[self.header_nbytes :]
        for i in reversed(range(len(self.codecs))):
            if mask >> i & 1:
                try:
                    data = self._decode_one(i, data, spec)
                except Exception as exc:  # noqa: BLE001 - numcodecs, zarr and numpy raise many types
                    raise decode_error(str(self.codecs[i].to_dict()["name"]), exc) from exc
        return mask, data

    def _decode_one(self, i: int, data: np.ndarray, spec: ArraySpec) -> np.ndarray:
        """Decode ``data`` with ``codecs[i]``; a zstd frame into a buffer bounded by what entered
        codec ``i`` at most (the raw chunk through the codecs before it, plus 1 KiB for codecs
        outside this one)."""
        from zopt.codecs.bounded import bytes_bound, raw_nbytes, zstd_decode_bounded

        codec = self.codecs[i]
        if type(codec).__name__ == "ZstdCodec":  # zarr's zstd; decoding needs no level
            limit: int | None = raw_nbytes(spec)
            for c in self.codecs[:i]:
                limit = bytes_bound(c, limit, spec) if limit is not None else None
            if limit is not None:
                return zstd_decode_bounded(data, limit + 1024)
        return sync_decoder(self.codecs[i], spec)(data)

    def encode_chunk(
        self, data: np.ndarray, spec: ArraySpec, chunk_index: tuple[int, ...] | None = None
    ) -> np.ndarray:
        """Header + payload for one chunk's bytes (1-D uint8 in, 1-D uint8 out)."""
        mask, payload = self.encode_bytes(data, spec, chunk_index)
        out = np.empty(self.header_nbytes + payload.size, dtype=np.uint8)
        out[: self.header_nbytes] = np.frombuffer(format_header(mask, self.header_bits), np.uint8)
        out[self.header_nbytes :] = payload
        return out

    def _chunk_index_for_write(self) -> tuple[int, ...] | None:
        """The chunk index zopt's pipeline published for the chunk being written.

        Raises ChunkIndexUnavailableError when the decision needs it and the codec pipeline in
        use (e.g. zarr's own ``BatchedCodecPipeline`` or ``FusedCodecPipeline``) does not publish
        chunk coordinates: deciding with a wrong or missing index would store wrong masks.
        """
        ctx = current_chunk()
        coords = None if ctx is None else ctx.coords
        if coords is None and self.decision is not None and self.decision.needs_chunk_index:
            import zarr

            raise ChunkIndexUnavailableError(
                f"conditional: the decision {type(self.decision).__name__} needs each chunk's "
                "index, but the codec pipeline in use "
                f"({zarr.config.get('codec_pipeline.path')}) does not pass it; select "
                "zopt.codecs.pipeline.ChunkIndexCodecPipeline (as zopt's jobs do) with `with zopt.pipeline():`, "
                "zopt.use_pipeline() or "
                "zarr.config.set({'codec_pipeline.path': "
                "'zopt.codecs.pipeline.ChunkIndexCodecPipeline'}), or use a decision that needs no "
                "index (e.g. 'compress_if_smaller')"
            )
        return coords

    # zarr 3.3+ runs sync-capable codecs without an event loop (FusedCodecPipeline, sharding's
    # ChunkTransform); zopt's pipeline fast path uses the same methods on every zarr version.
    @property
    def _sync_capable(self) -> bool:
        """True exactly when every wrapped codec encodes and decodes synchronously."""
        return all(supports_sync(c) for c in self.codecs)

    def _encode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer | None:
        data = np.asarray(chunk_bytes.as_numpy_array()).view(np.uint8).ravel()
        out = self.encode_chunk(data, chunk_spec, self._chunk_index_for_write())
        return chunk_spec.prototype.buffer.from_array_like(out)

    def _decode_sync(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        stored = np.asarray(chunk_bytes.as_numpy_array()).view(np.uint8).ravel()
        _, data = self.decode_bytes(stored, chunk_spec)
        return chunk_spec.prototype.buffer.from_array_like(data)

    async def _encode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer | None:
        # the index is read here, in the task that set it; the decision and encoding run off
        # zarr's event-loop thread, in parallel across chunks
        data = np.asarray(chunk_bytes.as_numpy_array()).view(np.uint8).ravel()
        out = await asyncio.to_thread(self.encode_chunk, data, chunk_spec, self._chunk_index_for_write())
        return chunk_spec.prototype.buffer.from_array_like(out)

    async def _decode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        return await asyncio.to_thread(self._decode_sync, chunk_bytes, chunk_spec)


@dataclass(frozen=True, init=False)
class OptionalAliasCodec(ConditionalCodec):
    """Reads the seed draft's name ``optional`` as ``conditional`` (same bytes).

    Only a configuration with a ``codecs`` list is the draft's codec; anything else is zarrs'
    unrelated nullable-data ``optional`` codec, which zopt does not implement: ValueError.
    Metadata written back uses the registered name ``conditional``.
    """

    codec_name = "optional"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        config = data.get("configuration") if isinstance(data, dict) else None
        if not isinstance(config, dict) or not isinstance(config.get("codecs"), list):
            raise OptionError("optional",
                "this 'optional' codec has no 'codecs' list, so it is not the draft "
                "name of 'conditional' but a different codec (zarrs' nullable-data 'optional'), "
                f"which zopt does not implement; got {data!r}"
            )
        return cls._from_configuration(config)


def conditional_codecs_in(codecs: Iterable[Codec]) -> list[ConditionalCodec]:
    """All ``ConditionalCodec`` objects in a codec list, looking inside ``sharding_indexed``."""
    found: list[ConditionalCodec] = []
    for c in codecs:
        if isinstance(c, ConditionalCodec):
            found.append(c)
        inner = getattr(c, "codecs", None)
        if inner is not None and not isinstance(c, ConditionalCodec):
            found.extend(conditional_codecs_in(inner))
    return found


def with_decision_in(codecs: Iterable[Codec], decision: DecisionLike, trial_encode: bool | None = None) -> tuple[Codec, ...]:
    """Copy a codec list, attaching ``decision`` to every conditional codec (also in shards)."""
    from zarr.codecs.sharding import ShardingCodec

    out: list[Codec] = []
    for c in codecs:
        if isinstance(c, ConditionalCodec):
            c = c.with_decision(decision, trial_encode)
        elif isinstance(c, ShardingCodec):
            c = replace(c, codecs=with_decision_in(c.codecs, decision, trial_encode))
        out.append(c)
    return tuple(out)


__all__ += ["conditional_codecs_in", "with_decision_in", "default_header_bits"]

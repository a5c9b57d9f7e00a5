"""Writer-side decisions for the ``conditional`` codec (``../shared/specs/optional.md`` Phases 2–3).

A *decision* picks, for one chunk, the bitmask of wrapped codecs to apply, and returns the encoded
payload so that trial encodings are never computed twice. Decisions live on the codec object at
runtime and are never serialized.

Ways to decide:

- ``None`` — no decision: the mask is all zeros (spec Phase 1, "must default to all 0s").
- a named heuristic (spec Phase 3): ``"compress_if_smaller"``, ``"always"`` (alias
  ``"always_apply"``), ``"never"`` (alias ``"never_apply"``).
- a decision function with the spec's signature, called once per wrapped codec, in order:
  ``fn(chunk_index, codec, unencoded_chunk) -> bool``, or with ``trial_encode=True``
  ``fn(chunk_index, codec, unencoded_chunk, trial_encoded_chunk) -> bool``.
- an integer: the same mask for every chunk (the spec's "runtime bitmask").
- an array of masks over the chunk grid (a precomputed plan, spec Example 3).

Choices zopt makes where the spec is open, followed by all of the above:

- ``unencoded_chunk`` is the input the codec would receive in the chain given the decisions
  already made for earlier codecs (for codec 0 it is the chunk itself). The spec's text says
  "the original, unencoded chunk"; trialling each codec on the bytes it will actually encode
  is what makes ``len(trial) < len(unencoded)`` mean "this codec makes the chunk smaller".
- ``codec`` is a ``CodecRef``: ``.name`` (as in the spec's examples), ``.index`` (the bit),
  ``.configuration`` and ``.codec`` (the zarr codec object); other attributes are forwarded to
  the codec object.
- both chunks are 1-D ``numpy.uint8`` arrays, so ``len()`` is their size in bytes.
- ``compress_if_smaller``: a codec is applied only if applying it makes the stored chunk
  smaller. For a codec that changes the length (a compressor) that is
  ``len(trial) < len(unencoded)``. A codec that keeps the length (a filter such as ``shuffle``)
  cannot be judged alone, so it is judged by the final size of the rest of the chain with and
  without it (ties skip it) — on a 1/16 sample for chunks over 64 KiB. With
  ``[shuffle, zstd]`` it picks ``0b11``, ``0b10`` or ``0b00`` per chunk.
"""

from __future__ import annotations

import functools
import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias

import numpy as np

from zopt.errors import OptionError

__all__ = [
    "CodecRef",
    "CompressIfSmaller",
    "filter_choice",
    "Decision",
    "DecisionFunction",
    "FixedMask",
    "HEURISTICS",
    "MaskGrid",
    "resolve_decision",
]

#: ``run(i, data)`` encodes ``data`` (1-D uint8) with wrapped codec ``i``; returns 1-D uint8.
TrialRunner = Callable[[int, np.ndarray], np.ndarray]

#: chunks larger than this (bytes) judge filters on a sample (see ``CompressIfSmaller``)
SAMPLE_ABOVE = 64 * 1024
#: windows an analysis sample is made of (``zopt.planning.analysis``): few long windows keep the
#: long-range matches a compressor finds in the whole chunk (``benchmarks/plan_quality.py``:
#: 2 windows of 1/32 each: +0.44 % over the oracle, 8 of 1/128: +1.76 %)
SAMPLE_WINDOWS = 2


@dataclass(frozen=True)
class CodecRef:
    """A wrapped codec as a decision function sees it.

    name : the codec's registered name (``"zstd"``, ``"shuffle"`` …).
    index : its position in the ``conditional`` codec's list, i.e. its bit in the mask.
    configuration : its JSON configuration (dict).
    codec : the zarr codec object; unknown attributes are looked up on it.
    """

    name: str
    index: int
    configuration: dict[str, Any]
    codec: Any

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.codec, attr)


class Decision(ABC):
    """Chooses a chunk's mask and produces its encoded payload."""

    #: whether the decision needs ``chunk_index`` (a plan does; heuristics do not)
    needs_chunk_index: bool = False

    @abstractmethod
    def choose(
        self,
        chunk_index: tuple[int, ...] | None,
        codecs: Sequence[CodecRef],
        data: np.ndarray,
        run: TrialRunner,
    ) -> tuple[int, np.ndarray]:
        """Return ``(mask, payload)`` for one chunk's bytes ``data`` (1-D uint8).

        Runs in a worker thread; ``run`` calls the wrapped codecs synchronously.
        """


def apply_mask(mask: int, n_codecs: int, data: np.ndarray, run: TrialRunner) -> np.ndarray:
    """Encode ``data`` with the wrapped codecs whose bit is set in ``mask``, in list order."""
    for i in range(n_codecs):
        if mask >> i & 1:
            data = run(i, data)
    return data


@dataclass(frozen=True)
class FixedMask(Decision):
    """The same mask for every chunk (the spec's Phase 1 "runtime bitmask")."""

    mask: int

    def choose(self, chunk_index, codecs, data, run):
        return self.mask, apply_mask(self.mask, len(codecs), data, run)


class CompressIfSmaller(Decision):
    """Apply a codec only if it makes the stored chunk smaller (see module docstring).

    A length-changing codec is judged on the full chunk, so a chunk is never stored larger than
    with its codec skipped. A length-preserving filter is judged by trial-encoding the rest of the
    chain on a sample — 8 evenly spaced windows totalling 1/16 of the chunk — with and without
    it, for chunks over ``SAMPLE_ABOVE`` bytes (full trials below): one full encode of the
    chosen branch plus two sample trials, instead of two full trials. A filter whose
    ``compute_encoded_size`` says it keeps the length (``shuffle``) is applied to the whole
    chunk only once the sample has chosen it, and when neither sample trial is smaller than the
    sample the chunk is stored as it is with no full trial at all (early abort, as ZFS does for
    incompressible records): random data costs two sample trials.
    """

    sample_fraction = 16
    #: on ``benchmarks/recompress.py``'s data 8 windows store 0.6 % less than 2
    sample_windows = 8

    def __repr__(self) -> str:
        return "CompressIfSmaller()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CompressIfSmaller)

    def __hash__(self) -> int:
        return hash(CompressIfSmaller)

    def choose(self, chunk_index, codecs, data, run):
        n = len(codecs)

        def best(i: int, current: np.ndarray) -> tuple[int, np.ndarray]:
            if i == n:
                return 0, current
            if current.size > SAMPLE_ABOVE and _keeps_length(codecs[i]):
                # a filter known to keep the length: judged on the sample before any full trial,
                # so a filter that loses is never applied to the whole chunk
                sample = _sample(current, self.sample_fraction, self.sample_windows)
                stored, applied = filter_choice(best_sample(i + 1, run(i, sample)), best_sample(i + 1, sample),
                                                sample.size)
                if stored:
                    # early abort (as ZFS's): nothing in the rest of the chain shrinks the sample
                    # at all, so the chunk is stored as it is without a full trial
                    return 0, current
                if applied:
                    mask, payload = best(i + 1, run(i, current))
                    return mask | (1 << i), payload
                return best(i + 1, current)
            trial = run(i, current)
            if trial.size != current.size:
                if trial.size < current.size:
                    mask, payload = best(i + 1, trial)
                    return mask | (1 << i), payload
                return best(i + 1, current)
            # a length-preserving filter: judge it by what the rest of the chain makes of it
            if current.size > SAMPLE_ABOVE:
                sample = _sample(current, self.sample_fraction, self.sample_windows)
                on = best_sample(i + 1, run(i, sample))
                off = best_sample(i + 1, sample)
                if on < off:
                    mask, payload = best(i + 1, trial)
                    return mask | (1 << i), payload
                return best(i + 1, current)
            mask_on, payload_on = best(i + 1, trial)
            mask_off, payload_off = best(i + 1, current)
            if payload_on.size < payload_off.size:
                return mask_on | (1 << i), payload_on
            return mask_off, payload_off

        def best_sample(i: int, current: np.ndarray) -> int:
            if i == n:
                return current.size
            trial = run(i, current)
            if trial.size != current.size:
                return best_sample(i + 1, trial if trial.size < current.size else current)
            return min(best_sample(i + 1, trial), best_sample(i + 1, current))

        return best(0, data)


def filter_choice(on: int | np.ndarray, off: int | np.ndarray, sample: int) -> tuple[Any, Any]:
    """``CompressIfSmaller``'s choice for a length-keeping filter (``shuffle``) judged on a sample,
    for one chunk (ints) or many (int arrays, element by element): the one rule every
    implementation follows (``CompressIfSmaller.choose``, the batch encoder
    ``zopt.codecs.batch``, and ``zopt_zstd_conditional`` in ``zopt/compat/_loops.c``, which
    ``tests/codecs/test_conditional_rule.py`` holds to it).

    on, off : the bytes the rest of the chain makes of the sample with the filter and without it
        (capped at ``sample``: the rest stores it as it is when it does not shrink it).
    sample : the sample's bytes.
    Returns ``(stored, applied)``: ``stored`` (early abort) when neither trial is smaller than the
    sample, the chunk then stored as it is with no full trial; else ``applied`` when the filter's
    trial is strictly smaller (a tie leaves the filter off).
    """
    on, off = np.minimum(on, sample), np.minimum(off, sample)
    stored = np.minimum(on, off) >= sample
    applied = (on < off) & ~stored
    if np.ndim(stored) == 0:
        return bool(stored), bool(applied)
    return stored, applied


def _keeps_length(ref: CodecRef) -> bool:
    """True when the codec's encoded size is known to equal its input's (a filter such as
    ``shuffle``): its ``compute_encoded_size`` says so without needing an array spec."""
    try:
        return int(ref.codec.compute_encoded_size(1 << 20, None)) == 1 << 20
    except Exception:  # compressors raise (size unknown); some codecs need the spec: unknown
        return False


def sample_windows(nbytes: int, fraction: int, windows: int = SAMPLE_WINDOWS) -> list[tuple[int, int]]:
    """``(start, length)`` in bytes of ``windows`` evenly spaced windows of a chunk of ``nbytes``
    bytes, totalling about ``nbytes / fraction``; starts and length are multiples of 64 bytes, so
    the windows hold whole elements of every item size that divides 64."""
    return list(_sample_windows(int(nbytes), int(fraction), int(windows)))


@functools.lru_cache(maxsize=64)
def _sample_windows(nbytes: int, fraction: int, windows: int) -> tuple[tuple[int, int], ...]:
    # cached: every chunk of an array has the same size, and np.linspace costs ~30 µs a call
    width = max(64, (nbytes // (fraction * windows)) // 64 * 64)
    starts = np.linspace(0, max(0, nbytes - width), windows).astype(np.int64) // 64 * 64
    return tuple((int(s), width) for s in starts)


def _sample(data: np.ndarray, fraction: int, windows: int = SAMPLE_WINDOWS) -> np.ndarray:
    """The ``sample_windows`` of ``data`` (1-D uint8) concatenated."""
    return np.concatenate([data[s : s + n] for s, n in sample_windows(data.size, fraction, windows)])


@dataclass(frozen=True)
class DecisionFunction(Decision):
    """A user function with the spec's Phase 2 signature, called once per wrapped codec."""

    function: Callable[..., bool]
    trial_encode: bool = False

    @property
    def needs_chunk_index(self) -> bool:  # type: ignore[override]
        return True

    def choose(self, chunk_index, codecs, data, run):
        mask = 0
        current = data
        for ref in codecs:
            if self.trial_encode:
                trial = run(ref.index, current)
                apply = self.function(chunk_index, ref, current, trial)
            else:
                trial = None
                apply = self.function(chunk_index, ref, current)
            if apply:
                mask |= 1 << ref.index
                current = trial if trial is not None else run(ref.index, current)
        return mask, current


@dataclass(frozen=True, eq=False)
class MaskGrid(Decision):
    """Masks precomputed over the chunk grid (spec Example 3): ``masks[chunk_index]``.

    masks : integer array with the chunk grid's shape (inner-chunk grid for sharded arrays).
    Raises ``LookupError`` when the chunk index is unknown or outside the grid.
    """

    masks: np.ndarray
    needs_chunk_index = True

    def choose(self, chunk_index, codecs, data, run):
        if chunk_index is None:
            raise LookupError(
                "a mask grid needs the chunk index, but the codec pipeline did not provide one "
                "(zarr's codec_pipeline.path must be zopt.codecs.pipeline.ChunkIndexCodecPipeline)"
            )
        if len(chunk_index) != self.masks.ndim or any(
            not 0 <= c < s for c, s in zip(chunk_index, self.masks.shape, strict=True)
        ):
            raise LookupError(
                f"chunk index {chunk_index} is outside the mask grid of shape {self.masks.shape}"
            )
        mask = int(self.masks[chunk_index])
        return mask, apply_mask(mask, len(codecs), data, run)


HEURISTICS: dict[str, Decision] = {
    "compress_if_smaller": CompressIfSmaller(),
    "always": FixedMask(-1),  # resolved against the codec count in resolve_decision
    "always_apply": FixedMask(-1),
    "never": FixedMask(0),
    "never_apply": FixedMask(0),
}


class AsDecision(Protocol):
    """Anything that turns itself into a ``Decision`` (e.g. ``zopt.planning.plan.Plan``)."""

    def as_decision(self) -> Decision: ...


#: what ``decision=`` accepts (``resolve_decision`` checks it): a Decision, a heuristic's name, an
#: integer mask, an array of masks, a plan, a function of the chunk, or None (mask 0)
DecisionLike: TypeAlias = "Decision | str | int | np.integer | np.ndarray | AsDecision | Callable[..., bool] | None"


def resolve_decision(
    decision: DecisionLike, n_codecs: int, header_bits: int, trial_encode: bool | None = None
) -> Decision | None:
    """Turn what a user passes as ``decision`` into a ``Decision`` (or None: mask 0).

    Raises ValueError naming ``decision`` and the allowed values, or a mask with bits outside
    the codec list.
    """
    if decision is None or isinstance(decision, Decision):
        if isinstance(decision, FixedMask):
            _check_mask(decision.mask, n_codecs, header_bits)
        return decision
    if isinstance(decision, str):
        if decision not in HEURISTICS:
            raise OptionError("decision",
                f"unknown heuristic {decision!r}; allowed: {sorted(HEURISTICS)}, "
                "a function, an integer mask or an array of masks"
            )
        found = HEURISTICS[decision]
        if isinstance(found, FixedMask) and found.mask == -1:
            return FixedMask((1 << n_codecs) - 1)
        return found
    if isinstance(decision, bool):
        raise OptionError("decision", "a bool is ambiguous; use 'always' or 'never'")
    if isinstance(decision, int | np.integer):
        _check_mask(int(decision), n_codecs, header_bits)
        return FixedMask(int(decision))
    if isinstance(decision, np.ndarray):
        if decision.dtype.kind not in "iu":
            raise OptionError("decision", f"a mask grid must have an integer dtype, got {decision.dtype}")
        if decision.size and (int(decision.min()) < 0 or int(decision.max()) >> n_codecs):
            raise OptionError("decision",
                f"mask grid has bits set beyond the {n_codecs} wrapped codecs "
                f"(reserved bits must be 0); largest mask {int(decision.max()):#b}"
            )
        return MaskGrid(decision)
    if hasattr(decision, "as_decision"):  # e.g. zopt.planning.plan.Plan
        return decision.as_decision()
    if callable(decision):
        if trial_encode is None:
            trial_encode = _positional_arity(decision) >= 4
        return DecisionFunction(decision, bool(trial_encode))
    raise OptionError("decision",
        f"{decision!r} is not a decision; allowed: None, {sorted(HEURISTICS)}, "
        "a function (chunk_index, codec, unencoded_chunk[, trial_encoded_chunk]) -> bool, "
        "an integer mask or an integer array of masks over the chunk grid"
    )


def _check_mask(mask: int, n_codecs: int, header_bits: int) -> None:
    if mask < 0 or mask >> n_codecs:
        raise OptionError("decision",
            f"mask {mask:#b} sets bits outside the {n_codecs} wrapped codecs; "
            f"allowed 0..{(1 << n_codecs) - 1} (reserved bits up to header_bits={header_bits} must be 0)"
        )


def _positional_arity(fn: Callable[..., Any]) -> int:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 3
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return 4
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)

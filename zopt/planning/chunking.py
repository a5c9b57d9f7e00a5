"""The target's chunking: ``--chunks``/``--shards`` parsed, and the inner chunks and shards each
variable gets (pure: shapes in, shapes out; no I/O, no zarr).

``parse_shape`` reads ``"y=32,x=32"`` or ``"1,32,32"``; ``shape_for`` applies such a spec to
one variable's dimensions; ``choose_chunks`` picks inner chunks that keep the last dimensions
long (``long_chunks``; square tiles, ``square_chunks``, for 1-byte types) and shards of a
target size, clipped to the array; ``variable_layout`` adds the rules for plans and 1-D
coordinates; ``unused_shape_notes`` refuses named dimensions no variable has.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from zopt.codecs.grid import fit_shape
from zopt.errors import OptionError

if TYPE_CHECKING:
    from zopt.io.sources import SourceVariable
    from zopt.planning.plan import Plan
    from zopt.types import ShapeLike

__all__ = ["ShapeSpec", "choose_chunks", "is_coordinate", "long_chunks", "parse_shape", "shape_for", "square_chunks",
           "shape_text", "unused_shape_notes", "variable_layout"]


ShapeSpec = tuple[int, ...] | dict[str, int] | None


def parse_shape(text: ShapeLike, label: str = "chunks") -> ShapeSpec:
    """Parse a chunk or shard shape.

    ``"1,32,32"`` → ``(1, 32, 32)`` (for variables with that many dimensions);
    ``"y=32,x=32"`` → ``{"y": 32, "x": 32}`` (by dimension name; other dimensions whole).
    Raises ValueError naming ``label`` and the bad entry.
    """
    if text is None:
        return None
    items: list[tuple[str | None, Any]]
    if isinstance(text, Mapping):
        items = list(text.items())
    elif isinstance(text, tuple | list):
        items = [(None, x) for x in text]
    else:
        items = [(k, v) if sep else (None, k) for k, sep, v in (p.partition("=") for p in str(text).split(","))]
    for key, v in items:  # "time:12", "time 12": a name and a size, not joined by "="
        named_size = re.fullmatch(r"\s*([^\W\d][\w.-]*)\s*[:\s]\s*(\d+)\s*", str(v)) if key is None else None
        if named_size:
            name, size = named_size.groups()
            where = "" if str(v).strip() == str(text).strip() else f"{text!r}: "
            raise OptionError(label, f"{where}{str(v).strip()!r} is not a size; use NAME=SIZE, e.g. {name}={size}")
    named = {k is not None for k, _ in items}
    if len(named) > 1:
        raise OptionError(label, f"{text!r} mixes named (dim=size) and positional sizes")
    try:
        sizes = [int(v) for _, v in items]
    except ValueError as exc:
        raise OptionError(label, f"{text!r}: sizes must be positive integers (NAME=SIZE or SIZE, comma-separated)") from exc
    if any(v < 1 for v in sizes):
        raise OptionError(label, f"{text!r}: sizes must be positive integers")
    if named == {True}:
        return {str(k).strip(): v for (k, _), v in zip(items, sizes, strict=True)}
    return tuple(sizes)


def shape_text(spec: ShapeSpec) -> str | None:
    """A parsed shape as ``parse_shape`` reads it (``"y=32,x=32"``, ``"1,32,32"``), None for None."""
    if spec is None:
        return None
    if isinstance(spec, dict):
        return ",".join(f"{k}={v}" for k, v in spec.items())
    return ",".join(map(str, spec))


def shape_for(spec: ShapeSpec, dims: tuple[str, ...], shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """Resolve a parsed shape for one variable; None when the spec does not apply to it."""
    if spec is None:
        return None
    if isinstance(spec, dict):
        if not set(spec) & set(dims):
            return None
        return tuple(spec.get(d, s) for d, s in zip(dims, shape, strict=True))
    return spec if len(spec) == len(shape) else None


def square_chunks(shape: tuple[int, ...], target_elems: int) -> tuple[int, ...]:
    """A chunk shape of about ``target_elems`` elements, roughly square over the last dimensions
    (as few as hold that many elements; leading dimensions get 1): the default for 1-byte and
    bool arrays, and for every type before issue 26 (``benchmarks/corpus.py --compare-chunks``).
    A zero-length dimension counts as length 1 (its chunk is 1: an empty array still has a chunk grid)."""
    shape = tuple(max(1, s) for s in shape)
    n = len(shape)
    active: list[int] = []
    for d in reversed(range(n)):
        active.append(d)
        if math.prod(shape[a] for a in active) >= target_elems:
            break
    out = [1] * n
    remaining = max(1, target_elems)
    for i, d in enumerate(sorted(active, key=lambda a: shape[a])):  # small dimensions first: whole if they fit
        side = max(1, round(remaining ** (1 / (len(active) - i))))
        out[d] = min(shape[d], side)
        remaining = max(1, remaining // out[d])
    return tuple(out)


def long_chunks(shape: tuple[int, ...], target_elems: int, max_elems: int | None = None) -> tuple[int, ...]:
    """A chunk shape of about ``target_elems`` elements that keeps the fastest-varying (last)
    dimensions whole: whole last dimensions while they fit, then as many whole slices of the next
    one as fit (evened out so that the chunks along it are about equal), leading dimensions 1.

    A dimension that does not fit whole in ``target_elems`` is still taken whole when that stays
    within ``max_elems`` (default 4 × ``target_elems``): a 3-D float32 climatology of 20 depths
    × 180 × 360 gets one whole 180 × 360 level per ~256 KiB chunk, and one of 512 × 512 levels
    one whole 1 MiB level, where square tiles (``square_chunks``) cut short rows, which
    compress worse (``benchmarks/corpus.py --compare-chunks``, issue 26). A last dimension
    longer than ``max_elems`` is cut into about equal runs of ~``target_elems``.
    """
    target = max(1, int(target_elems))
    limit = max(target, int(max_elems) if max_elems is not None else 4 * target)
    out = [1] * len(shape)
    held = 1
    for d in reversed(range(len(shape))):
        whole = held * shape[d]
        if whole <= target:
            out[d], held = shape[d], whole
            continue
        if whole <= limit:
            out[d] = shape[d]  # one whole slice up to max_elems rather than two uneven parts
            break
        per = max(1, target // held)
        out[d] = math.ceil(shape[d] / math.ceil(shape[d] / per))
        break
    return tuple(out)


def choose_chunks(
    shape: tuple[int, ...],
    itemsize: int,
    chunks: tuple[int, ...] | None,
    shards: tuple[int, ...] | None,
    inner_bytes: int = 256 * 1024,
    shard_bytes: int = 64 * 1024 * 1024,
) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """Inner chunk and shard shapes for an array (shard None: unsharded).

    Given shapes are clipped to the array; a shard shape is rounded down to a multiple of the
    inner chunk shape. Defaults: ~256 KiB inner chunks (up to 1 MiB to hold a whole slice; no
    larger than given shards),
    long over the last dimensions for types of 2 bytes and more (``long_chunks``), square
    tiles for 1-byte and bool types (``square_chunks``); ~64 MiB shards.
    Raises ValueError when the number of dimensions does not match.
    """
    ndim = len(shape)
    for label, given in (("chunks", chunks), ("shards", shards)):
        if given is not None and len(given) != ndim:
            raise OptionError(label, f"{given} has {len(given)} entries, the array has {ndim} dimensions")
    if chunks is None:
        # measured on benchmarks/corpus.py (docs/benchmarks.md, issue 26): class maps and masks
        # store 4-11 % smaller in square tiles, shuffled multi-byte fields mostly in long rows
        rule = long_chunks if itemsize > 1 else square_chunks
        chunks = rule(shape, inner_bytes // itemsize)
        if shards is not None and len(shards) == ndim:  # a default never larger than the shards given
            chunks = tuple(min(c, max(1, sh)) for c, sh in zip(chunks, shards, strict=True))
    chunks = tuple(max(1, min(c, s)) for c, s in zip(chunks, shape, strict=True))
    if shards is not None:
        small = [i for i, (sh, c, s) in enumerate(zip(shards, chunks, shape, strict=True)) if sh < c and sh < s]
        if small:
            raise OptionError("shards", f"{tuple(shards)} is smaller than the inner chunks {chunks} in dimension(s) {small}; "
                             "a shard holds whole inner chunks: give shards at least as large as the chunks")
    if shards is None:
        n_inner = max(1, shard_bytes // (itemsize * math.prod(chunks)))
        per = fit_shape(tuple(math.ceil(s / c) for s, c in zip(shape, chunks, strict=True)), n_inner)
        shards = tuple(p * c for p, c in zip(per, chunks, strict=True))
    shards = tuple(max(c, (min(sh, math.ceil(s / c) * c) // c) * c) for sh, c, s in zip(shards, chunks, shape, strict=True))
    if shards == chunks or all(c >= s for c, s in zip(chunks, shape, strict=True)):
        return chunks, None
    return chunks, shards


# -- decisions on opened arrays ----------------------------------------------------------------------


def is_coordinate(name: str, var: SourceVariable) -> bool:
    return var.ndim == 1 and var.dims == (name,)


def unused_shape_notes(source: dict[str, SourceVariable], names: list[str], specs: dict[str, ShapeSpec],
                       elsewhere: set[str] | None = None) -> list[str]:
    """Check ``--chunks``/``--shards`` against the rewritten variables: ValueError naming the option,
    the dimension names no rewritten variable has (a misspelt name would silently leave the
    default chunks) and the dimensions there are; ValueError for a positional shape that fits no
    rewritten variable's number of dimensions. ``elsewhere``: the dimensions of the other groups
    of the hierarchy (their own jobs apply the shape); a name found only there is no error.
    Returns the notes (none today: every misfit is an error)."""
    dims = sorted({d for n in names for d in source[n].dims})
    for label, spec in specs.items():
        if spec is None or not names:
            continue
        if isinstance(spec, dict):
            unknown = [d for d in spec if d not in dims and d not in (elsewhere or ())]
            if unknown:
                there = sorted(set(dims) | set(elsewhere or ()))
                raise OptionError(label, f"no rewritten variable has dimension(s) {unknown}; the dimensions are "
                                 f"{there}")
        elif not any(source[n].ndim == len(spec) for n in names):
            ndims = sorted({source[n].ndim for n in names})
            raise OptionError(label, f"{','.join(map(str, spec))} has {len(spec)} entries, but the rewritten variables "
                             f"have {ndims} dimensions; give sizes by name, e.g. {dims[-1]}=100")
    return []


def variable_layout(name: str, var: SourceVariable, chunks: ShapeSpec, shards: ShapeSpec, plan: Plan | None = None,
                    explicit: Sequence[str] | None = None) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """(inner chunk shape, shard shape or None) of variable ``name`` in the target: a ``plan``'s
    chunk shape for the arrays it covers; a 1-D coordinate variable whole unless named in
    ``explicit``; else ``chunks``/``shards`` (see ``choose_chunks``)."""
    dims, shape = tuple(map(str, var.dims)), tuple(var.shape)
    inner_arg = shape_for(chunks, dims, shape)
    shard_arg = shape_for(shards, dims, shape)
    if plan is not None and name in plan.arrays:
        inner_arg = tuple(plan.arrays[name].chunk_shape)
    elif is_coordinate(name, var) and name not in (explicit or ()):
        inner_arg = shard_arg = shape
    return choose_chunks(shape, var.dtype.itemsize, inner_arg, shard_arg)

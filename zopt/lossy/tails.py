"""The codecs after an ``abs:E`` chain's integer ``cast_value`` (its tail), chosen by trial.

The proven part of the chain (``zopt.lossy.bounds``: ``scale_offset`` + ``cast_value`` to
unsigned codes) is the same for every tail; a tail only stores those codes, losslessly, so the
bound and the per-chunk check do not depend on it. The tails:

==============  ==========================================================  ===================
tail            codecs after the codes                                       readers
==============  ==========================================================  ===================
``pcodec``      ``numcodecs.pcodec`` (level 8, its own delta order: auto)   zarr-python >= 3.2
``blosc``       ``bytes`` + ``blosc`` (zstd 5, byte shuffle)                 zarr-python >= 3.2
``lorenzo``     ``zopt.lorenzo`` (``zopt.codecs.lorenzo``) + pcodec         zopt
``bytes``       ``bytes`` + the ``--codecs`` tail (default: conditional)    zopt (default tail)
``packbits``    ``packbits`` (exactly ``bits`` bits) + the ``--codecs`` tail zopt
==============  ==========================================================  ===================

pcodec refuses 8-bit integers, so its tails store codes of at least ``uint16``. ``lorenzo``
differences every dimension; ``lorenzo:AXES`` (e.g. ``lorenzo:1`` or ``lorenzo:0,2``) only those
named. The trial tries ``lorenzo`` and every proper subset of the dimensions longer than 1 in
the inner chunk (up to 3 such dimensions; beyond, single dimensions and all-but-one).

``abs:E`` (tail ``auto``) encodes up to ``SAMPLES`` inner chunks, evenly spread over the grid,
with every tail that all ``readers`` read (default: ``zarr-python``, i.e. plain zarr-python >= 3.2
without zopt; ``--readers zopt`` adds ``lorenzo``, ``bytes`` and ``packbits``) and keeps the one
storing the fewest bytes in total (ties: the order of ``ORDER``). ``abs:E:TAIL`` names the tail.
``rel``, ``keepbits`` and ``info`` do the same with the rounded floats and ``REL_ORDER``.

The same trial encodes the sampled chunks as they are with the lossless default's candidates
(``lossless``): when the chain the menu would choose from them stores fewer bytes than the best
tail, ``lossless_instead`` names it and the job writes the variable losslessly, saying so (no
lossy mode stores more than lossless: issue 35).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from zopt.codecs.zarr_config import with_zopt_pipeline
from zopt.errors import OptionError
from zopt.lossy.bounds import AbsChain
from zopt.lossy.spec import ORDER, REL_ORDER, TAILS, check_tail, kind, lorenzo_axes  # noqa: F401  (re-exported)

if TYPE_CHECKING:
    from zopt.io.source_kinds import SourceVariable
    from zopt.lossy.bounds import AbsChain
    from zopt.lossy.spec import LossySpec
    from zopt.types import BudgetLike

#: what ``rel`` and keepbits store of a chunk: a picklable function of its values and region
Rounding = Callable[[np.ndarray, tuple[slice, ...]], np.ndarray]

__all__ = ["LOSSLESS", "ORDER", "SAMPLES", "TAILS", "TailTrial", "candidates", "choose_tail", "lossless_instead", "sample_regions",
           "sample_sizes", "tail_codecs", "with_storage"]

#: inner chunks encoded per variable by the trial
SAMPLES = 8
PCODEC = {"name": "numcodecs.pcodec", "configuration": {"level": 8}}
BYTES = {"name": "bytes", "configuration": {"endian": "little"}}
#: prefix of the lossless default's candidates in a trial's sizes
LOSSLESS = "lossless:"


def lorenzo_variants(inner: Sequence[int]) -> list[str]:
    """``lorenzo`` and the axis subsets the trial tries for inner chunks of shape ``inner``."""
    import itertools

    dims = [d for d, n in enumerate(inner) if n > 1]
    if len(dims) <= 1:
        return ["lorenzo"]
    if len(dims) <= 3:
        subsets = [c for k in range(1, len(dims)) for c in itertools.combinations(dims, k)]
    else:
        subsets = [(d,) for d in dims] + [tuple(x for x in dims if x != d) for d in dims]
    return ["lorenzo", *(f"lorenzo:{','.join(map(str, c))}" for c in subsets)]


def storage_for(tail: str, storage: str) -> str:
    """The ``cast_value`` target of the codes under ``tail`` (pcodec needs >= 16 bits)."""
    return "uint16" if kind(tail) in ("pcodec", "lorenzo") and storage == "uint8" else storage


def _blosc(storage: str) -> dict[str, Any]:
    return {"name": "blosc", "configuration": {"cname": "zstd", "clevel": 5, "shuffle": "shuffle",
                                               "typesize": np.dtype(storage).itemsize, "blocksize": 0}}


def tail_codecs(tail: str, storage: str, bits: int, base: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The codec JSON after the codes' ``cast_value`` (``storage``: its target, ``bits``: the bits
    the codes need, ``base``: the lossless ``--codecs`` chain). Raises ValueError for an unknown tail."""
    from zarr.abc.codec import ArrayBytesCodec

    from zopt.compat.zarr_compat import resolve_codec

    if tail == "pcodec":
        return [dict(PCODEC)]
    if kind(tail) == "lorenzo":
        from zopt.codecs.lorenzo import LorenzoCodec

        return [LorenzoCodec(axes=lorenzo_axes(tail)).to_dict(), dict(PCODEC)]
    if tail == "blosc":
        return [dict(BYTES), _blosc(storage)]
    if tail == "bytes" and np.dtype(storage).kind == "f":  # rel: the lossless chain as it is
        return [dict(c) for c in base]
    if tail not in ("bytes", "packbits"):
        raise OptionError("lossy", f"abs tail {tail!r} is not one of {list(TAILS)}")
    serializer = dict(BYTES)
    if tail == "packbits" and bits < int(storage[4:]):
        serializer = {"name": "packbits", "configuration": {"last_bit": bits - 1}}
    return [serializer if isinstance(resolve_codec(c), ArrayBytesCodec) else c for c in base]


def _pcodec_available() -> bool:
    try:
        import pcodec  # noqa: F401
    except ImportError:
        return False
    return True


def candidates(readers: Collection[str], base: Sequence[dict[str, Any]],
               inner: Sequence[int] | None = None, order: Sequence[str] = ORDER) -> list[str]:
    """The tails ``auto`` tries: those whose codecs (after the lossless chain ``base``) every
    reader of ``readers`` (parsed names; none: ``zarr-python``) reads; pcodec tails only when pcodec is
    installed; ``lorenzo`` expanded into ``lorenzo_variants(inner)`` when ``inner`` (the inner
    chunk shape) is given. Never empty (``pcodec`` or ``blosc`` at least)."""
    from zopt.planning.readers import unreadable

    if not readers:
        readers = ["zarr-python"]
    out = []
    for tail in order:
        if tail in ("pcodec", "lorenzo") and not _pcodec_available():
            continue
        if not unreadable(tail_codecs(tail, "uint16", 12, base), readers):
            out += lorenzo_variants(inner) if tail == "lorenzo" and inner is not None else [tail]
    return out or (["pcodec"] if _pcodec_available() else ["blosc"])


def sample_regions(shape: Sequence[int], inner: Sequence[int], n: int = SAMPLES) -> list[tuple[slice, ...]]:
    """Up to ``n`` inner chunks (regions, clipped to ``shape``), evenly spread over the chunk grid in C order."""
    grid = tuple(-(-int(s) // int(c)) for s, c in zip(shape, inner, strict=True))
    total = int(np.prod(grid, dtype=np.int64))
    if total == 0:
        return []
    picks = np.unique(np.linspace(0, total - 1, min(n, total)).round().astype(np.int64))
    out = []
    for flat in picks:
        index = np.unravel_index(int(flat), grid)
        out.append(tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(index, inner, shape, strict=True)))
    return out


def _encoded_size(codes: np.ndarray, codecs: list[dict[str, Any]]) -> int:
    from zopt.codecs.chain import ChunkEncoder, chunk_spec
    from zopt.codecs.decisions import CompressIfSmaller
    from zopt.compat.zarr_compat import resolve_codec
    from zopt.dtypes.numeric import zarr_dtype

    spec = chunk_spec(codes.shape, zarr_dtype(codes.dtype.name), 0)
    from zopt.planning.chains import little_endian_bytes

    # the chain as the job writes it: a ``bytes`` without endian is little-endian (zarr 3.4 refuses it)
    enc = ChunkEncoder([resolve_codec(little_endian_bytes(c), where="lossy tail") for c in codecs], spec).with_decision(CompressIfSmaller())
    return int(enc.encode(np.ascontiguousarray(codes), (0,) * codes.ndim).data.size)


def sample_sizes(chain: AbsChain, values: np.ndarray, tails: Sequence[str], base: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Bytes each of ``tails`` stores for one inner chunk ``values`` (source dtype) encoded by
    ``chain`` (a ``zopt.lossy.bounds.AbsChain``), through the real codecs."""
    import dataclasses

    out = {}
    for tail in tails:
        storage = storage_for(tail, chain.storage)
        c = chain if storage == chain.storage else dataclasses.replace(chain, storage=storage, _codecs={})
        codes = c.encode(np.asarray(values), "lossy tail trial")
        out[tail] = _encoded_size(codes, tail_codecs(tail, storage, chain.bits, base))
    return out


def with_storage(chain: AbsChain, tail: str) -> Any:
    """``chain`` (an ``AbsChain``) with the codes' storage type ``tail`` needs."""
    import dataclasses

    storage = storage_for(tail, chain.storage)
    return chain if storage == chain.storage else dataclasses.replace(chain, storage=storage, _codecs={})


def rounded_sample_sizes(values: np.ndarray, tails: Sequence[str], base: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Bytes each of ``tails`` (``REL_ORDER``) stores for one inner chunk of values already
    rounded as ``rel`` or keepbits store them."""
    values = np.ascontiguousarray(values)
    return {t: _encoded_size(values, tail_codecs(t, values.dtype.name, 0, base)) for t in tails}


@with_zopt_pipeline
def _trial_task(src: str, name: str, region: tuple[slice, ...], stored: AbsChain | Rounding, tails: list[str],
                base: list[dict[str, Any]], job_id: str | None = None,
                lossless: dict[str, list[dict[str, Any]]] | None = None) -> dict[str, int]:
    from zopt.io.sources import read_source

    values = np.asarray(read_source(src, name, region, job_id))
    if isinstance(stored, AbsChain):
        out = sample_sizes(stored, values, tails, base)
    else:
        out = rounded_sample_sizes(stored(values, region), tails, base)
    for k, codecs in (lossless or {}).items():  # the lossless default's candidates, on the values as they are
        out[LOSSLESS + k] = _encoded_size(np.ascontiguousarray(values), codecs)
    return out


@dataclass(frozen=True)
class TailTrial:
    """What the tails of a lossy variable are tried against (``choose_tail``).

    readers : the readers every tail must suit (parsed names, ``zopt.planning.readers.parse_readers``;
        none: plain zarr-python).
    base : the lossless chain the tails follow (codec JSON), None for zopt's default.
    scheduler : the Dask scheduler the trial tasks run on.
    """

    readers: frozenset[str] = frozenset()
    base: tuple[dict[str, Any], ...] | None = None
    scheduler: str | None = None


def choose_tail(src: str, name: str, var: SourceVariable, stored: AbsChain | Rounding, spec: LossySpec, inner: tuple[int, ...],
                trial: TailTrial, lossless: dict[str, list[dict[str, Any]]] | None = None
                ) -> tuple[str, dict | None, dict | None]:
    """(tail, sampled bytes per tail or None, sampled bytes of each ``lossless`` chain or None) for
    variable ``name`` of ``src`` (``var``: its source variable; ``spec``: its ``LossySpec``;
    ``stored``: its ``AbsChain``, or for ``rel`` and keepbits a picklable function of a chunk's
    values and region giving what is stored): the named tail, or the trial over
    ``sample_regions`` of the ``inner`` chunk grid, one Dask task per sampled chunk
    (``trial``: the readers, base chain and scheduler). ``lossless``: ``{candidate: chain}`` of
    the lossless default (``zopt.planning.candidates``), encoded on the same chunks as they are,
    so ``lossless_instead`` can tell whether the lossy result stores more (issue 35: a DEM under
    ``info:0.99`` stored 1.37× its lossless size)."""
    if spec.tail != "auto":
        return spec.tail, None, None
    import uuid

    import dask

    from zopt.compat.job_cache import release_job
    from zopt.compat.scheduling import compute
    from zopt.planning.chains import parse_chain

    base = list(trial.base) if trial.base is not None else parse_chain(None)
    tails = candidates(trial.readers, base, inner, ORDER if isinstance(stored, AbsChain) else REL_ORDER)
    regions_ = sample_regions(tuple(var.shape), inner)
    lossless = dict(lossless or {})
    if (len(tails) == 1 and not lossless) or not regions_:
        return tails[0], None, None
    job_id = f"lossy-tail-{uuid.uuid4().hex[:12]}"
    tasks = [dask.delayed(_trial_task, pure=False)(src, name, r, stored, tails, base, job_id, lossless)
             for r in regions_]
    try:
        sizes = compute(tasks, trial.scheduler, None, job_id)
    finally:
        release_job(job_id)
    total = {t: sum(s[t] for s in sizes) for t in tails}
    best = min(tails, key=lambda t: (total[t], ORDER.index(kind(t)), t))
    plain = {k: sum(s[LOSSLESS + k] for s in sizes) for k in lossless} if lossless else None
    return best, total, plain


def lossless_instead(tail: str, total: dict[str, int] | None, plain: dict[str, int] | None,
                     lossless: dict[str, list[dict[str, Any]]] | None, budget: BudgetLike = None) -> str | None:
    """The lossless candidate to write instead of the lossy ``tail``, or None: the one the menu's
    cost model (``zopt.planning.optimizer.choose``, ``budget``) picks from the sampled bytes
    ``plain``, when it stores fewer bytes than ``tail`` did on the same chunks (``total``)."""
    if not plain or not lossless or not total or tail not in total:
        return None
    from zopt.planning.optimizer import choose

    picked = choose({k: (plain[k], 0.0) for k in lossless if k in plain}, lossless, budget).name
    return picked if plain[picked] < total[tail] else None

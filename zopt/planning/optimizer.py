"""The per-array choice of a chain from the codec menu (``zopt.planning.candidates``), issue 26.

Trials: ``trial_indices`` picks up to ``TRIAL_CHUNKS`` chunks evenly spread over an array's
chunk grid; ``trial_encode`` encodes each with every candidate's whole chain (``conditional``
deciding per chunk with ``compress_if_smaller``, as it will when written) and records the stored
bytes and the encode seconds. ``menu_trial_task`` does it as one Dask task per array
(``zopt.planning.analysis`` adds it to its graph); ``choose_chains`` (``recompress`` without a
plan) runs the same steps as a read task, one trial task per candidate and a choice task.

The cost model (``choose``): each candidate's stored size is estimated as ``raw × (trial bytes /
trial raw bytes)``; its encode time is its fixed ``Candidate.encode_cost`` (CPU time relative to
``classic``, measured on the corpus by ``benchmarks/menu_costs.py``), not the trial's own timing,
which varied several-fold with the machine's load and made the same data get different chains
from run to run. The reference is the first candidate of the menu that applies and that the
readers read (``numcodecs-shuffle-zstd-3`` by default, ``plain-zstd-10`` for 1-byte types,
``classic``, zopt's chain before issue 26, with readers ``zopt``).
A candidate ``c`` costs

    size(c) / size(ref) + (t(c) / t(ref) − 1)⁺ × 0.01 / budget

so with ``budget = 1`` every extra reference-encode-time of CPU must buy at least 1 % of stored
size (pcodec level 8 and Blosc, ~2× the CPU of shuffle+zstd 3, must be > 1 % smaller), with ``budget =
4`` 0.25 %; ``budget = inf`` (``--preset archive``) is size first. The smallest cost wins; ties
go to the earlier candidate. When ``blosc-shuffle-5`` (``FLOOR``) is on the menu, no candidate
larger than it on the trials is chosen: the budget trades speed only among chains at least as
small as Blosc. A budget ≤ 0, NaN or not a number is a ValueError naming ``budget``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from zopt.codecs.zarr_config import with_zopt_pipeline
from zopt.errors import OptionError
from zopt.types import BudgetLike

if TYPE_CHECKING:
    from zarr.core.dtype.wrapper import ZDType

    from zopt.io.source_kinds import Source

__all__ = ["DEFAULT_BUDGET", "TRIAL_CHUNKS", "MenuChoice", "MenuOptions", "TrialRun", "analysis_choice", "choose", "choose_task", "menu_candidates", "menu_trial_task", "raw_bytes_of", "trial_chunks", "trial_task", "parse_budget", "wrapped_codecs_json",
           "chains_in_store", "choose_chains", "trial_encode", "trial_indices", "zarr_data_type"]

#: the default speed budget (see module docstring)
DEFAULT_BUDGET = 1.0
#: chunks trial-encoded per array
TRIAL_CHUNKS = 4
#: at most this many raw bytes are trial-encoded per array (fewer chunks when chunks are large)
TRIAL_BYTES = 4 * 2**20
#: timed encodes per trial chunk and candidate; the fastest counts
TIMINGS = 2
#: a candidate larger than this one on the trials is never chosen, whatever the budget (issue 26:
#: the default is never larger than Blosc, the codec a zarr user picks in one line)
FLOOR = "blosc-shuffle-5"


def parse_budget(budget: BudgetLike) -> float:
    """The budget as a float > 0 (``inf``/``"inf"``/``"size"``: size first). None is
    ``DEFAULT_BUDGET``. Raises ValueError naming ``budget`` and the allowed values."""
    if budget is None:
        return DEFAULT_BUDGET
    given = budget
    value: object = budget  # the number, once a text is parsed
    if isinstance(budget, str):
        text = budget.strip().lower()
        if text in ("inf", "size"):
            return math.inf
        try:
            value = float(text)
        except ValueError:
            value = None
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value) or value <= 0:
        raise OptionError("budget", f"{given!r} is not allowed; allowed: a number > 0 (1 = the default; larger "
                         "favours size, smaller favours encode speed) or 'inf'/'size' (size first)")
    return float(value)


@dataclass(frozen=True)
class TrialRun:
    """Where the menu's trial tasks run: the Dask ``scheduler`` (``zopt.compat.scheduling``) and the
    job's ``job_id`` (names the tasks, and the sources they open)."""

    scheduler: str | None = None
    job_id: str | None = None


@dataclass(frozen=True)
class MenuOptions:
    """How each variable's chain is chosen from the codec menu, parsed once (``MenuOptions.parse``:
    ``RecompressJob``, ``zopt.analyze``, ``zopt.xarray.encoding``) and handed down whole.

    menu : candidate names in menu order (``zopt.planning.candidates.parse_menu``).
    budget : the speed budget, a float > 0 or ``inf`` (``parse_budget``).
    readers : the readers every candidate must suit (``zopt.planning.candidates.menu_readers``);
        empty: any reader.
    masks_only : only candidates keeping the ``conditional`` mask (an explicit decision is honoured).
    bounded_only : only chains with a known bound on their encoded size (``fixed-slot`` shards).
    """

    menu: tuple[str, ...]
    budget: float = DEFAULT_BUDGET
    readers: frozenset[str] = frozenset()
    masks_only: bool = False
    bounded_only: bool = False

    @classmethod
    def parse(cls, menu: str | Sequence[str] | None = None, budget: float | str | None = None,
              readers: Iterable[str] | str | None = None, decision_given: bool = False,
              bounded_only: bool = False) -> MenuOptions:
        """From what a user gives: a menu name, candidate names (a list or one comma-separated
        string) or None (``default``); a budget (a number, ``"inf"``/``"size"``, or None: 1);
        reader names (a list or one comma-separated string). ``decision_given``: an explicit
        decision (masks only; readers ``zopt`` when none are given). Raises ``OptionError``
        naming ``menu``, ``budget`` or ``readers``."""
        from zopt.planning.candidates import menu_readers, parse_menu

        return cls(parse_menu(menu), parse_budget(budget), frozenset(menu_readers(readers, menu, decision_given)),
                   masks_only=decision_given, bounded_only=bounded_only)


def trial_indices(shape: Sequence[int], chunk_shape: Sequence[int], n: int = TRIAL_CHUNKS,
                  max_bytes: int = TRIAL_BYTES, itemsize: int = 1) -> list[tuple[int, ...]]:
    """Up to ``n`` chunk-grid coordinates evenly spaced in C order over the chunk grid, at most
    ``max_bytes`` of raw data (at least one chunk). Edge chunks count: they are stored padded,
    and on a small grid leaving them out leaves out whole regions of the array (a 2 × 2 grid of
    grid bounds whose first row repeats: issue 26's benchmark)."""
    use = [math.ceil(s / c) for s, c in zip(shape, chunk_shape, strict=True)]
    total = math.prod(use)
    if total == 0:
        return []
    per = max(1, math.prod(chunk_shape) * itemsize)
    k = max(1, min(n, total, max_bytes // per))
    flat = np.unique(np.linspace(0, total - 1, k + 2)[1:-1].round().astype(np.int64)) if k < total else np.arange(total)
    return [tuple(int(i) for i in ix) for ix in zip(*np.unravel_index(flat, use), strict=True)]


def trial_encode(chunks: Sequence[np.ndarray], chains: Mapping[str, list[dict[str, Any]]], dtype: ZDType[Any, Any],
                 fill_value: object, *, timed: bool = True) -> dict[str, tuple[int, float]]:
    """``{candidate: (stored bytes, encode CPU seconds)}`` summed over ``chunks`` (numpy arrays of one
    chunk shape), each encoded with the candidate's whole chain; ``dtype`` is the array's zarr data
    type (``ZDType``: ``zarr_data_type``), ``fill_value`` its fill value. The conditional codec decides
    with ``compress_if_smaller`` and the trial's chunk index. The first chunk is encoded once
    more, untimed, before the timed encodes (first-call costs otherwise dominate one-chunk trials),
    and each chunk's time is the fastest of ``TIMINGS`` encodes (on a loaded machine a single
    timing varied several-fold and flipped choices in ``benchmarks/menu.py``). With
    ``timed=False`` (every candidate has a fixed ``encode_cost``, which ``choose`` uses instead of
    the timings) each chunk is encoded once, with no warm-up, and that one timing is reported."""
    from zopt.codecs.chain import ChunkEncoder, chunk_spec
    from zopt.compat.zarr_compat import resolve_codec

    out: dict[str, tuple[int, float]] = {}
    if not chunks:
        return {name: (0, 0.0) for name in chains}
    spec = chunk_spec(chunks[0].shape, dtype, fill_value)
    # CPU seconds of this thread: other processes on a shared machine do not inflate them (wall
    # time under load flipped choices in benchmarks/menu.py); numcodecs and pcodec encode here
    clock = time.thread_time
    for name, chain in chains.items():
        encoder = ChunkEncoder([resolve_codec(c) for c in chain], spec).with_decision("compress_if_smaller")
        if timed:
            encoder.encode(chunks[0], (0,) * chunks[0].ndim)  # untimed: first-call costs (imports, buffers) are not speed
        size, seconds = 0, 0.0
        for k, chunk in enumerate(chunks):
            best = math.inf
            for _ in range(TIMINGS if timed else 1):  # the fastest of a few: other processes' load is not the codec's speed
                t0 = clock()
                data = encoder.encode(chunk, (k,) * chunk.ndim).data
                best = min(best, clock() - t0)
            seconds += best
            size += int(data.size)
        out[name] = (size, seconds)
    return out


@dataclass
class MenuChoice:
    """The choice for one array: the chosen candidate and chain, the trials behind it.

    trials : ``{candidate: (stored bytes, encode seconds)}`` on the trial chunks.
    raw_bytes : raw bytes of the trial chunks; budget : the budget used.
    """

    name: str
    chain: list[dict[str, Any]]
    trials: dict[str, tuple[int, float]] = field(default_factory=dict)
    raw_bytes: int = 0
    budget: float = DEFAULT_BUDGET

    def to_json(self) -> dict[str, Any]:
        return {"candidate": self.name, "chain": self.chain, "raw_bytes": self.raw_bytes,
                "budget": "inf" if math.isinf(self.budget) else self.budget,
                "trials": {k: [int(b), float(s)] for k, (b, s) in self.trials.items()}}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> MenuChoice:
        return cls(name=str(d["candidate"]), chain=list(d["chain"]), raw_bytes=int(d.get("raw_bytes", 0)),
                   budget=parse_budget(d.get("budget")),
                   trials={k: (int(v[0]), float(v[1])) for k, v in dict(d.get("trials", {})).items()})


def choose(trials: Mapping[str, tuple[int, float]], chains: Mapping[str, list[dict[str, Any]]], budget: BudgetLike = None,
           raw_bytes: int = 0) -> MenuChoice:
    """The candidate of lowest cost (module docstring) among ``chains`` (menu order; the first is
    the reference) that are no larger than ``FLOOR`` when it is on the menu. ``trials`` from
    ``trial_encode``. Raises ValueError naming ``budget``."""
    b = parse_budget(budget)
    names = list(chains)
    if not names:
        raise OptionError("menu", "no candidate to choose from")
    ref = names[0]
    ref_size = max(trials[ref][0], 1) if ref in trials else 1
    ref_time = max(trials[ref][1], 1e-9) if ref in trials else 1e-9
    limit = trials[FLOOR][0] if FLOOR in trials and FLOOR in chains else math.inf
    best, best_cost = ref, math.inf
    from zopt.planning.candidates import CANDIDATES

    for name in names:
        if name not in trials or trials[name][0] > limit:
            continue
        size, seconds = trials[name]
        if name in CANDIDATES and ref in CANDIDATES:  # the menu's fixed costs: the same data, the same chain
            extra = max(CANDIDATES[name].encode_cost / CANDIDATES[ref].encode_cost - 1.0, 0.0)
        else:  # candidates without a measured cost: the trial's own timing
            extra = max(seconds / ref_time - 1.0, 0.0)
        cost = size / ref_size + (0.0 if math.isinf(b) else extra * 0.01 / b)
        if cost < best_cost:
            best, best_cost = name, cost
    return MenuChoice(name=best, chain=chains[best], trials=dict(trials), raw_bytes=raw_bytes, budget=b)


@with_zopt_pipeline
def trial_chunks(src: str | Source, name: str, shape: Sequence[int], dtype: npt.DTypeLike, chunk_shape: Sequence[int],
                 job_id: str | None = None, n: int = TRIAL_CHUNKS, fill: object = None) -> list[np.ndarray]:
    """Dask task: the trial chunks (``trial_indices``) of variable ``name`` (``shape``, numpy
    ``dtype``) of ``src``, read with ``zopt.io.sources.read_source``; edge chunks padded like the
    writer pads them, with ``fill`` (default 0). A trial chunk equal to the fill value is kept (it
    costs little and weighs nothing in the sizes)."""
    from zopt.io.sources import read_source

    native = np.dtype(dtype)
    chunk_shape = tuple(int(c) for c in chunk_shape)
    chunks = []
    for index in trial_indices(shape, chunk_shape, n, itemsize=native.itemsize):
        region = tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(index, chunk_shape, shape, strict=True))
        values = np.ascontiguousarray(read_source(src, name, region, job_id), dtype=native)
        if values.shape != chunk_shape:  # an edge chunk: padded like the writer does
            from zopt.codecs.grid import padded

            pad = np.zeros((), native) if fill is None else np.asarray(fill, native)
            values = np.ascontiguousarray(padded(values, chunk_shape, pad))
        chunks.append(values)
    return chunks


def _timed(chains: Mapping[str, object]) -> bool:
    from zopt.planning.candidates import CANDIDATES

    # choose() times only candidates without a fixed encode_cost: the others are encoded once
    return not all(k in CANDIDATES for k in chains)


def trial_task(chunks: Sequence[np.ndarray], chains: Mapping[str, list[dict[str, Any]]], timed: bool,
               fill: object = None) -> dict[str, tuple[int, float]]:
    """Dask task: ``trial_encode`` of ``chunks`` (from ``trial_chunks``) with ``chains``; ``fill``:
    the array's fill value (default 0)."""
    if not chunks:
        return {k: (0, 0.0) for k in chains}
    native = chunks[0].dtype
    return trial_encode(chunks, chains, zarr_data_type(native),
                        np.zeros((), native) if fill is None else np.asarray(fill, native), timed=timed)


def raw_bytes_of(chunks: Sequence[np.ndarray]) -> int:
    """Dask task: the raw bytes of the trial chunks (a number, so the choice task needs no chunk)."""
    return sum(int(c.nbytes) for c in chunks)


def choose_task(raw: int, parts: Sequence[Mapping[str, tuple[int, float]]],
                chains: Mapping[str, list[dict[str, Any]]], budget: BudgetLike = None) -> dict[str, Any]:
    """Dask task: ``choose`` from the candidates' ``trial_task`` results; ``raw``: the trial chunks'
    raw bytes (``raw_bytes_of``). Returns ``MenuChoice.to_json()``."""
    trials = {k: v for part in parts for k, v in part.items()}
    return choose(trials, chains, budget, raw).to_json()


@with_zopt_pipeline
def menu_trial_task(src: str | Source, name: str, shape: Sequence[int], dtype: npt.DTypeLike, chunk_shape: Sequence[int],
                    chains: Mapping[str, list[dict[str, Any]]], budget: BudgetLike = None,
                    job_id: str | None = None) -> dict[str, Any]:
    """Dask task: read the ``TRIAL_CHUNKS`` trial chunks (``trial_chunks``) of variable ``name``
    (``shape``, numpy ``dtype``) of ``src``, trial-encode every chain, choose. Returns
    ``MenuChoice.to_json()``. (``choose_chains`` runs the same steps as separate tasks, one per candidate.)"""
    chunks = trial_chunks(src, name, shape, dtype, chunk_shape, job_id, TRIAL_CHUNKS)
    return choose_task(raw_bytes_of(chunks), [trial_task(chunks, chains, _timed(chains))], chains, budget)


def zarr_data_type(native: np.dtype) -> ZDType[Any, Any]:
    """zarr's data type object (``ZDType``) for a numpy dtype (zopt's ML types included; numpy's
    complex64/128 as zarr's own ``complex64``/``complex128``, which zopt's ``complex_float32/64``
    also match natively)."""
    from zarr.core.dtype import get_data_type_from_native_dtype

    if native.kind == "c" and native.itemsize in (8, 16) and type(native).__module__.startswith("numpy"):
        from zarr.core.dtype import Complex64, Complex128

        return (Complex64 if native.itemsize == 8 else Complex128).from_native_dtype(native)
    return get_data_type_from_native_dtype(native)


def menu_candidates(dtype: npt.DTypeLike, options: MenuOptions, name: str = "") -> dict[str, list[dict[str, Any]]]:
    """``{candidate: chain}`` of ``zopt.planning.candidates.menu_for(dtype, options.menu, options.readers)``
    that keep a per-chunk mask (``options.masks_only``: an explicit decision) and have a size bound
    (``options.bounded_only``: fixed-slot shards). Raises ValueError naming ``menu`` (and variable
    ``name``) when none is left, or ``readers`` as ``menu_for`` does."""
    from zopt.planning.candidates import CANDIDATES, menu_for

    every = menu_for(dtype, options.menu, options.readers)
    chains = {k: v for k, v in every.items() if (CANDIDATES[k].keeps_mask or not options.masks_only)
              and (CANDIDATES[k].bounded or not options.bounded_only)}
    if not chains:
        hint = ("; a decision decides the masks of zopt's conditional codec, which only zopt reads: give readers "
                "'zopt' (--readers zopt) or no decision") if options.masks_only else ""
        raise OptionError("menu", f"no candidate of {list(every)} for {name!r} keeps a "
                         "per-chunk mask (an explicit decision needs one) or has a size bound (fixed-slot shards); "
                         f"allowed: {[k for k, c in CANDIDATES.items() if c.keeps_mask and c.bounded]}{hint}")
    return chains


def choose_chains(src: str | Source, variables: Mapping[str, Any], layouts: Mapping[str, tuple[tuple[int, ...], Any]],
                  options: MenuOptions, *, scheduler: str | None = None, job_id: str | None = None,
                  prefixes: Mapping[str, tuple[list[dict[str, Any]], Any]] | None = None) -> dict[str, MenuChoice]:
    """Choose each variable's chain from the menu: for each variable with more than one applicable
    candidate, a ``trial_chunks`` task, one ``trial_task`` per candidate and a ``choose_task``, all
    run as one Dask graph (``zopt.compat.scheduling.compute``).

    variables : ``{name: zopt.io.sources.SourceVariable}`` (shape, numpy dtype); layouts : ``{name:
    (inner chunk shape, shard shape or None)}``. options : the menu, budget and readers, and
    whether only candidates keeping the ``conditional`` mask (an explicit ``decision``) or with a
    known bound on their encoded size (``fixed-slot`` shards) apply (``MenuOptions``). prefixes :
    ``{name: (array → array codecs JSON, the data type they give)}``: the menu of that data type,
    each chain after those codecs, tried on the variable's values (files packed differently,
    re-expressed as integers: ``zopt.io.packing``; the trials pad and fill with NaN, the
    re-expression's fill). Raises ValueError naming ``menu`` or ``readers``.
    """
    import dask

    from zopt.compat.scheduling import compute

    b = options.budget
    out: dict[str, MenuChoice] = {}
    tasks, pending = [], []
    for name, var in variables.items():
        prefix, dtype = (prefixes or {}).get(name, ([], var.dtype))
        chains = {k: [*prefix, *v] for k, v in
                  menu_candidates(dtype, options, name).items()}
        fill = np.nan if prefix else None
        if len(chains) == 1 or var.size == 0:
            first = next(iter(chains))
            out[name] = MenuChoice(name=first, chain=chains[first], budget=b)
            continue
        pending.append(name)
        # one task per candidate after one read of the trial chunks: the candidates' trials run
        # in parallel even when the job has one variable
        chunks = dask.delayed(trial_chunks, pure=False)(
            src, name, tuple(var.shape), var.dtype.str if not var.dtype.names else var.dtype, layouts[name][0], job_id,
            TRIAL_CHUNKS, fill, dask_key_name=f"zopt-menu-chunks-{name}-{job_id}")
        timed = _timed(chains)
        parts = [dask.delayed(trial_task, pure=False)(chunks, {k: v}, timed, fill,
                                                       dask_key_name=f"zopt-menu-trial-{name}-{k}-{job_id}")
                 for k, v in chains.items()]
        raw = dask.delayed(raw_bytes_of, pure=False)(chunks, dask_key_name=f"zopt-menu-raw-{name}-{job_id}")
        tasks.append(dask.delayed(choose_task, pure=False)(raw, parts, chains, b,
                                                            dask_key_name=f"zopt-menu-choice-{name}-{job_id}"))
    for name, result in zip(pending, compute(tasks, scheduler, None, job_id), strict=True):
        out[name] = MenuChoice.from_json(result)
    return out


def chains_in_store(root: str, names: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """``{name: inner codec chain JSON}`` of arrays already created under ``root`` (a resumed job
    keeps the chains its first run chose: trials are timed, so a new choice could differ)."""
    import json
    import os

    out = {}
    for name in names:
        with open(os.path.join(root, name, "zarr.json")) as f:
            codecs = json.load(f)["codecs"]
        if len(codecs) == 1 and codecs[0]["name"] == "sharding_indexed":
            codecs = codecs[0]["configuration"]["codecs"]
        out[name] = [c for c in codecs if c["name"] != "crc32c"]
    return out


def analysis_choice(store: str, name: str, shape: Sequence[int], dtype: npt.DTypeLike, chunk_shape: Sequence[int],
                    options: MenuOptions) -> Any:
    """The menu trial of one analysed array as a Dask ``delayed`` (``menu_trial_task``), or None
    when only one candidate applies (its ``MenuChoice.to_json()`` is then returned as is).
    Raises ValueError naming ``menu`` or ``readers`` before anything runs."""
    import dask

    from zopt.planning.candidates import menu_for

    b = options.budget
    chains = menu_for(np.dtype(dtype), options.menu, options.readers)
    if len(chains) == 1:
        first = next(iter(chains))
        return MenuChoice(name=first, chain=chains[first], budget=b).to_json()
    return dask.delayed(menu_trial_task, pure=False)(store, name, tuple(shape), np.dtype(dtype).str, tuple(chunk_shape),
                                                     chains, b, None, dask_key_name=f"zopt-menu-trial-{name}")


def wrapped_codecs_json(choice: Mapping[str, Any] | None, fallback: str) -> str:
    """The wrapped codec list (JSON text) whose masks an analysis measures: the chosen chain's
    ``conditional`` codecs, else ``fallback`` (a chain without ``conditional`` has no masks; the
    analysis still measures the fallback's, for the statistics)."""
    import json

    for c in (choice or {}).get("chain", []):
        if c["name"] == "conditional":
            return json.dumps(c["configuration"]["codecs"])
    return fallback

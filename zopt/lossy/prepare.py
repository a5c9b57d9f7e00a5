"""The lossy step of ``recompress``: analyse each lossy variable, choose its chain, check its chunks.

``prepare_lossy(...)`` runs before anything is written. For every variable given a
``LossySpec`` it reads the source as a Dask graph (one task per target shard, or per chunk when
unsharded) and returns a ``LossyVariable``:

- ``abs``: a range reduction (finite, non-sentinel min/max; counts of NaN and ±Infinity), then
  ``zopt.lossy.bounds.design_abs``;
- ``keepbits``: nothing to read;
- ``info`` (per variable): bit-pair counts of every inner chunk summed into one keepbits;
  ``info …:chunk``: one keepbits per inner chunk, kept as a ``zopt.planning.plan.Plan`` (its
  ``keepbits`` grid beside zero masks, with the content digests of the chunks);
- ``plan``: a saved keepbits plan, checked against the target grid and, chunk by chunk while
  writing, against the content it was made for.

The engine then needs only three things per variable (the hook): ``chain(base)`` — the target
codec chain; ``attributes()`` — the ``zopt_lossy`` record added to the variable's attributes,
which ``zopt.readback.verify`` reads; and ``prepare(index, values, where)`` — called on every inner
chunk before it is encoded, which checks the bound (``abs``) or bitrounds the chunk (keepbits),
keeping NaN, infinities and sentinels bit for bit.

Bitround needs no decode step, so keepbits chains store the rounded values with a lossless
tail and no ``numcodecs.bitround`` entry in the metadata (``zopt.lossy.rounding``): each chunk
can keep its own number of bits. Every mode's tail is chosen by trial (``zopt.lossy.tails``)
among those the ``--readers`` read, and beside the lossless default's candidates: where the
lossless default stores fewer bytes, ``LossyVariable.lossless`` names it and the job writes the
variable losslessly.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from zopt.codecs.zarr_config import with_zopt_pipeline
from zopt.errors import OptionError
from zopt.lossy.bounds import AbsChain, LossyBoundError, RangeStats, design_abs
from zopt.lossy.rounding import bitround, rel_round, rounded_as_stored, sentinels_of, special_mask
from zopt.lossy.spec import LossySpec
from zopt.planning.chunking import ShapeSpec
from zopt.planning.optimizer import DEFAULT_BUDGET

if TYPE_CHECKING:
    import xarray as xr

    from zopt.io.sources import SourceVariable
    from zopt.planning.plan import ArrayPlan, Plan
    from zopt.types import ShapeLike

__all__ = ["LossyOptions", "LossyVariable", "bitround", "keepbits_plan", "prepare_for_recompress", "prepare_lossy", "rel_round",
           "sentinels_of", "special_mask"]

ATTRIBUTE = "zopt_lossy"
#: valid neighbour pairs (along the best-sampled dimension) a chunk needs for its own keepbits
MIN_CHUNK_PAIRS = 256
#: at most this many chunks' keepbits are written into the ``zopt_lossy`` attribute (verify's exact check)
MAX_GRID_IN_ATTRIBUTES = 65536


@dataclass(frozen=True)
class LossyVariable:
    """What the engine needs to write one lossy variable (see module docstring). Picklable.

    grid : per-inner-chunk keepbits (uint8) for ``info …:chunk`` and ``plan``, else None.
    plan : the ``zopt.planning.plan.ArrayPlan`` holding that grid and the chunks' digests.
    """

    spec: LossySpec
    dtype: str
    fill_value: Any
    sentinels: tuple[Any, ...]
    abs_chain: AbsChain | None = None
    keepbits: int | None = None
    grid: np.ndarray | None = None
    plan: Any = None
    pack: bool = True
    tail: str = "packbits"  # the codecs after the codes (abs) or of the rounded floats (``zopt.lossy.tails``)
    tail_trial: dict[str, int] | None = None  # ``auto``: sampled bytes per tail tried
    lossless_trial: dict[str, int] | None = None  # sampled bytes of the lossless default's candidates
    #: the lossless candidate written instead, when it stores fewer bytes than the lossy tail (issue 35)
    lossless: str | None = None

    @property
    def name(self) -> str:
        return self.spec.variable

    def chain(self, base: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The target codec chain: for ``abs`` the lossy array → array codecs, then the tail
        (``zopt.lossy.tails.tail_codecs``: pcodec, or ``base`` with its array → bytes codec
        replaced by ``packbits`` or ``bytes``, …); else ``base``."""
        from zopt.lossy.tails import tail_codecs

        if self.abs_chain is None:  # rel, keepbits: the rounded values, stored by the chosen tail
            return tail_codecs(self.tail, self.dtype, 0, base)

        c = self.abs_chain
        return [*c.filters(), *tail_codecs(self.tail, c.storage, c.bits, base)]

    def attributes(self) -> dict[str, Any]:
        """The ``zopt_lossy`` attribute: method, parameters and the bound verify checks."""
        spec = self.spec
        if self.abs_chain is not None:
            return {ATTRIBUTE: {**self.abs_chain.attributes(), "spec": spec.text(), "tail": self.tail, **self._trials()}}
        record: dict[str, Any] = {"method": "keepbits", "spec": spec.text(),
                                  "sentinels": [float(s) for s in self.sentinels if not np.isnan(s)],
                                  "tail": self.tail, **self._trials()}
        if spec.method == "rel":  # zopt.lossy.relative: subnormals kept exactly
            record.update({"method": "rel", "rel": spec.value, "keepbits": self._keepbits()})
            return {ATTRIBUTE: record}
        if self.grid is None:
            record["keepbits"] = self._keepbits()
            record["relative"] = 2.0 ** -(self._keepbits() + 1)
        else:
            kmin = int(self.grid.min()) if self.grid.size else 0
            record.update({"keepbits_min": kmin, "keepbits_max": int(self.grid.max()) if self.grid.size else 0,
                           "relative": 2.0 ** -(kmin + 1), "chunk_shape": list(self.plan.chunk_shape)})
            if self.grid.size <= MAX_GRID_IN_ATTRIBUTES:
                record["keepbits_grid"] = self.grid.tolist()
        if spec.method == "info":
            record["information"] = spec.value
        return {ATTRIBUTE: record}

    def _trials(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.tail_trial:
            out["tail_trial"] = dict(self.tail_trial)
        if self.lossless_trial:
            out["lossless_trial"] = dict(self.lossless_trial)
        return out

    def _keepbits(self) -> int:
        """``keepbits`` of a rel or keepbits variable (ValueError for abs, which keeps none)."""
        if self.keepbits is None:
            raise ValueError(f"lossy: a {self.spec.method} variable keeps no count of mantissa bits")
        return int(self.keepbits)

    def keepbits_of(self, index: tuple[int, ...]) -> int:
        """The mantissa bits kept in inner chunk ``index`` (rel and keepbits variables; ValueError for abs)."""
        if self.grid is not None:
            return int(self.grid[tuple(index)])
        return self._keepbits()

    def prepare(self, index: tuple[int, ...], values: np.ndarray, where: str) -> np.ndarray:
        """Check (``abs``) or bitround (keepbits) one inner chunk's values (its part inside the
        array); ``where`` names the chunk in errors. Raises ``LossyBoundError`` or
        ``PlanMismatchError`` (a re-applied plan made for other data)."""
        values = np.asarray(values)
        if self.abs_chain is not None:
            self.abs_chain.check(values, where)
            return values
        if self.spec.method == "plan":
            self.plan.check_chunk(tuple(index), values, self.fill_value)
        k = self.keepbits_of(index)
        if self.spec.method == "rel":
            return rel_round(values, k, self.sentinels)
        return bitround(values, k, special_mask(values, self.sentinels), self.sentinels)


# -- the analysis graph ----------------------------------------------------------------------------


@with_zopt_pipeline
def _range_task(src: str, name: str, region: tuple[slice, ...], sentinels: tuple[Any, ...],
                job_id: str | None = None) -> RangeStats:
    from zopt.io.sources import read_source

    x = np.asarray(read_source(src, name, region, job_id))
    special = special_mask(x, sentinels)
    normal = x[~special]
    st = RangeStats(count=int(x.size))
    if x.dtype.kind == "f":
        st.nan = int(np.isnan(x).sum())
        st.posinf = int(np.isposinf(x).sum())
        st.neginf = int(np.isneginf(x).sum())
        for s in sentinels:  # a sentinel that is itself infinite is restored exactly, not counted
            if np.isinf(s):
                st.posinf -= int((x == s).sum()) if s > 0 else 0
                st.neginf -= int((x == s).sum()) if s < 0 else 0
    if normal.size:
        st.lo, st.hi = normal.min().item(), normal.max().item()
    return st


@with_zopt_pipeline
def _info_task(src: str, name: str, region: tuple[slice, ...], inner: tuple[int, ...], sentinels: tuple[Any, ...],
               level: float | None, confidence: float | None, job_id: str | None = None) -> Any:
    """Per variable (``level`` None): summed pair counts. Per chunk: ``[(index, counts, digest)]``."""
    from zopt.codecs.grid import regions
    from zopt.io.sources import read_source
    from zopt.lossy.bitinfo import pair_counts
    from zopt.planning.chunk_stats import chunk_digest

    x = np.asarray(read_source(src, name, region, job_id))
    origin = [r.start for r in region]
    total = None
    out = []
    for sub in regions(x.shape, inner):
        chunk = x[sub]
        counts = pair_counts(chunk, ~special_mask(chunk, sentinels))
        if level is None:
            total = counts if total is None else total + counts
        else:
            index = tuple((o + s.start) // k for o, s, k in zip(origin, sub, inner, strict=True))
            out.append((index, counts, chunk_digest(chunk)))
    return total if level is None else out


def _layout(name: str, var: SourceVariable, chunks: ShapeSpec, shards: ShapeSpec,
            explicit: Sequence[str] | None) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(inner chunk shape, task region shape) as ``recompress`` will choose them."""
    from zopt.planning.chunking import variable_layout

    inner, shard = variable_layout(name, var, chunks, shards, None, explicit)
    return inner, shard or inner


def keepbits_plan(src: str, levels: dict[str, float], *, chunks: ShapeLike = None, shards: ShapeLike = None,
                  confidence: float | None = 0.99, scheduler: str | None = None) -> Any:
    """A ``zopt.planning.plan.Plan`` holding per-inner-chunk keepbits for ``levels`` (``{variable: L}``,
    0 < L <= 1) over the inner chunk grid ``recompress`` would write with ``chunks``/``shards``.

    Plot it with ``zopt plan show PLAN --png F``; re-apply it with ``--lossy VAR=plan:PLAN``.
    Raises ValueError naming the variable for a level outside (0, 1] or a non-float variable.
    """
    from zopt.io.sources import source_variables
    from zopt.planning.chunking import parse_shape

    specs = {v: LossySpec(v, "info", float(lv), per_chunk=True) for v, lv in levels.items()}
    for v, spec in specs.items():
        if not 0 < spec.value <= 1:
            raise OptionError("lossy", label=f"lossy {v}", message=f"info: the information level must be in (0, 1], got {spec.value!r}")
    from zopt.compat.job_cache import release_job

    try:
        source = source_variables(src, None, "lossy-plan")
    finally:
        release_job("lossy-plan")
    chunk_arg, shard_arg = parse_shape(chunks, "chunks"), parse_shape(shards, "shards")
    options = LossyOptions(chunk_arg, shard_arg, explicit=list(levels), scheduler=scheduler, pack=False,
                           confidence=confidence)  # only the plan: no tail trial
    prepared = prepare_lossy(src, source, specs, options)
    return _plan_of({v: p.plan for v, p in prepared.items()}, levels, confidence)


def _plan_of(arrays: dict[str, ArrayPlan], levels: dict[str, float], confidence: float | None) -> Plan:
    import datetime as dt

    from zopt._version import __version__
    from zopt.planning.plan import Plan

    return Plan(arrays=arrays, policy="keepbits-info", params={"information": levels, "confidence": confidence},
                zopt_version=__version__, created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))


def _check_float(name: str, dtype: np.dtype, spec: LossySpec) -> None:
    if dtype.kind != "f" or dtype.itemsize not in (2, 4, 8):
        raise OptionError("lossy", label=f"lossy {name}", message=f"{spec.method} (bitround) needs a float16/float32/float64 variable, "
                         f"not {dtype}; use abs:BOUND for integers")


@dataclass(frozen=True)
class LossyOptions:
    """How ``prepare_lossy`` lays out, analyses and stores the lossy variables.

    chunks, shards : ``zopt.planning.chunking.parse_shape`` results, as given to ``recompress``.
    explicit : the variables named by the caller (``recompress(variables=…)``; 1-D coordinates
        not named are written whole), None for none named.
    scheduler : the Dask scheduler of the analysis and tail trials.
    readers, base : tail ``auto`` tries the tails these readers read (parsed names;
        ``zopt.lossy.tails``) after the lossless chain ``base`` (codec JSON; None: zopt's).
    budget : the speed budget the lossless default's choice is made within
        (``zopt.planning.optimizer``).
    pack : False: no tail trial (the ``bytes`` tail; ``keepbits_plan`` wants only the plan).
    confidence : of the bitinformation's significance test (``zopt.lossy.bitinfo``), None for none.
    """

    chunks: ShapeSpec = None
    shards: ShapeSpec = None
    explicit: Sequence[str] | None = None
    scheduler: str | None = None
    readers: frozenset[str] = frozenset()
    base: tuple[dict[str, Any], ...] | None = None
    budget: float = DEFAULT_BUDGET
    pack: bool = True
    confidence: float | None = 0.99


def prepare_lossy(src: str, source: dict[str, Any], specs: dict[str, LossySpec], options: LossyOptions, *,
                  fill_values: dict[str, Any] | None = None, attrs: dict[str, dict[str, Any]] | None = None,
                  lossless: dict[str, dict[str, Any]] | None = None) -> dict[str, LossyVariable]:
    """Analyse ``src`` and return ``{variable: LossyVariable}`` (see module docstring).

    source : ``zopt.io.sources.source_variables(src)``. options : layout, trials and budget
    (``LossyOptions``). fill_values, attrs : the target array's fill value and the source
    attributes per variable (default: read from ``src``). lossless : ``{variable: {candidate:
    chain}}``, the lossless default's candidates, tried on the same chunks; where the one the
    menu picks (``options.budget``) stores fewer bytes than the best tail, the variable's
    ``LossyVariable.lossless`` names it (``zopt.lossy.tails.lossless_instead``). Raises ValueError naming the variable
    and the parameter (unknown variable, a bound invalid for its type, keepbits beyond its
    mantissa, a range needing more than 64 bits); nothing is written.
    """
    import uuid

    import dask

    from zopt.codecs.grid import regions
    from zopt.compat.scheduling import compute

    missing = [v for v in specs if v not in source]
    if missing:
        raise OptionError("lossy", f"variables {missing} are not in the source; it has {sorted(source)}")
    fill_values = dict(fill_values or {})
    attrs = dict(attrs or {})
    if len(fill_values) < len(specs) or len(attrs) < len(specs):
        f, a = _source_fill_and_attrs(src, list(specs))
        fill_values = {**f, **fill_values}
        attrs = {**a, **attrs}
    # validate everything the specs say before reading any data
    layouts, sent = {}, {}
    for name, spec in specs.items():
        var = source[name]
        dt = np.dtype(var.dtype)
        if spec.method == "abs":
            if dt.kind not in "iuf":
                raise OptionError("lossy", label=f"lossy {name}", message=f"abs needs a real number variable, not {dt}")
            if dt.kind in "iu" and spec.value != math.floor(spec.value):
                raise OptionError("lossy", label=f"lossy {name}", message=f"abs: {name!r} is an integer variable ({dt.name}); the bound must "
                                 f"be a whole number, got {spec.value!r}")
        else:
            _check_float(name, dt, spec)
            if spec.method == "rel":
                from zopt.lossy.relative import rel_keepbits

                rel_keepbits(name, spec.value, dt)  # refused here, before anything is read
            if spec.method == "keepbits" and spec.value > np.finfo(dt).nmant:
                raise OptionError("lossy", label=f"lossy {name}", message=f"keepbits: {spec.value} exceeds the {np.finfo(dt).nmant} mantissa "
                                 f"bits of {dt.name}")
        layouts[name] = _layout(name, var, options.chunks, options.shards, options.explicit)
        sent[name] = sentinels_of(dt, fill_values.get(name), attrs.get(name, {}))
    tasks, owners = [], []
    job_id = f"lossy-{uuid.uuid4().hex[:12]}"  # the sources these tasks open, closed at the end
    for name, spec in specs.items():
        var = source[name]
        inner, region = layouts[name]
        if spec.method == "abs":
            for r in regions(tuple(var.shape), region):
                tasks.append(dask.delayed(_range_task, pure=False)(src, name, r, sent[name], job_id))
                owners.append(name)
        elif spec.method == "info":
            level = spec.value if spec.per_chunk else None
            for r in regions(tuple(var.shape), region):
                tasks.append(dask.delayed(_info_task, pure=False)(src, name, r, inner, sent[name], level,
                                                                  options.confidence, job_id))
                owners.append(name)
    from zopt.compat.job_cache import release_job

    try:
        results = compute(tasks, options.scheduler, None, job_id)
    finally:
        release_job(job_id)  # this process's (local schedulers); workers release their own
    by_name: dict[str, list] = {n: [] for n in specs}
    for name, res in zip(owners, results, strict=True):
        by_name[name].append(res)
    out = {}
    for name, spec in specs.items():
        var = source[name]
        dt = np.dtype(var.dtype)
        inner, _ = layouts[name]
        common = {"spec": spec, "dtype": dt.name, "fill_value": fill_values.get(name), "sentinels": sent[name],
                  "pack": options.pack and spec.pack}
        if spec.method == "abs":
            stats = RangeStats()
            for st in by_name[name]:
                stats = stats.merge(st)
            lv = LossyVariable(**common, abs_chain=design_abs(name, dt, stats, spec.value, sent[name]))
        elif spec.method in ("keepbits", "rel"):
            k = int(spec.value)
            if spec.method == "rel":
                from zopt.lossy.relative import rel_keepbits

                k = rel_keepbits(name, spec.value, dt)
            lv = LossyVariable(**common, keepbits=k)
        elif spec.method == "info" and not spec.per_chunk:
            from zopt.lossy.bitinfo import keepbits

            counts = sum(by_name[name]) if by_name[name] else np.zeros((1, dt.itemsize * 8, 4), np.int64)
            lv = LossyVariable(**common, keepbits=keepbits(counts, spec.value, dt, options.confidence))
        elif spec.method == "info":
            ap = _array_plan(name, var, inner, [row for part in by_name[name] for row in part], spec.value,
                             options.confidence)
            lv = LossyVariable(**common, grid=ap.keepbits, plan=ap)
        else:
            ap = _load_plan(name, spec.value, var, inner)
            lv = LossyVariable(**common, grid=ap.keepbits, plan=ap)
        out[name] = _with_tail(src, name, var, lv, inner, options, (lossless or {}).get(name))
    return out


def _with_tail(src: str, name: str, var: SourceVariable, lv: LossyVariable, inner: tuple[int, ...], options: LossyOptions,
               lossless: dict[str, Any] | None) -> LossyVariable:
    """``lv`` with the tail storing it (``zopt.lossy.tails.choose_tail``: named, or by trial on
    sampled chunks) and, where the lossless default stores fewer bytes, the candidate to write
    instead (issue 35: keepbits and info used to keep the lossless ``--codecs`` tail, which
    stored a DEM 1.37× larger than the lossless default's pcodec)."""
    import dataclasses

    from zopt.lossy.tails import TailTrial, choose_tail, lossless_instead, with_storage

    spec = lv.spec
    trial = TailTrial(options.readers, options.base, options.scheduler)
    tail: str
    sizes: dict | None
    plain: dict | None
    if lv.abs_chain is not None:
        tail, sizes, plain = choose_tail(src, name, var, lv.abs_chain, spec, inner, trial, lossless) \
            if lv.pack or spec.tail != "auto" else ("bytes", None, None)
        lv = dataclasses.replace(lv, abs_chain=with_storage(lv.abs_chain, tail))
    else:
        rounding = functools.partial(rounded_as_stored, method=spec.method, keepbits=lv.keepbits or 0,
                                     sentinels=lv.sentinels, grid=lv.grid, inner=tuple(inner))
        pack = lv.pack or spec.method == "rel"  # pack=False (keepbits_plan, the old flag): no trial
        tail, sizes, plain = choose_tail(src, name, var, rounding, spec, inner, trial, lossless) \
            if pack or spec.tail != "auto" else ("bytes", None, None)
    instead = lossless_instead(tail, sizes, plain, lossless, options.budget)
    return dataclasses.replace(lv, tail=tail, tail_trial=sizes if sizes and len(sizes) > 1 else None,
                               lossless_trial=plain, lossless=instead)


def prepare_for_recompress(src: str, source: dict[str, Any], names: list[str], lossy: Mapping[str, LossySpec],
                           options: LossyOptions, lossless: dict[str, dict[str, Any]] | None = None
                           ) -> dict[str, LossyVariable]:
    """``recompress``'s hook: prepare each variable of ``lossy`` (``{variable: LossySpec}``,
    ``zopt.lossy.spec.parse_lossy``; ``options``, ``lossless``: as for ``prepare_lossy``). Raises
    ValueError for a lossy variable that is not rewritten."""
    outside = [v for v in lossy if v in source and v not in names]
    if outside:
        raise OptionError("lossy", f"{outside} are not among the variables rewritten ({sorted(names)}); add them to "
                         "--variable or drop their --lossy")
    return prepare_lossy(src, source, dict(lossy), options, lossless=lossless)


def _array_plan(name: str, var: SourceVariable, inner: tuple[int, ...], rows: list, level: float,
                confidence: float | None) -> Any:
    """The keepbits plan of one variable from its chunks' ``(index, pair counts, digest)``.

    A chunk with fewer than ``MIN_CHUNK_PAIRS`` valid pairs along every dimension, or without
    significant information, cannot be judged alone: it keeps the variable's keepbits (from
    all chunks' counts) — a mostly-land chunk of an ocean field must not drop to 0 bits.
    """
    from zopt.lossy.bitinfo import keepbits
    from zopt.planning.plan import ArrayPlan

    dtype = np.dtype(var.dtype)
    grid_shape = tuple(math.ceil(s / c) for s, c in zip(var.shape, inner, strict=True))
    grid = np.zeros(grid_shape, np.uint8)
    digests = np.zeros(grid_shape, np.uint32)
    total = sum(c for _, c, _ in rows) if rows else np.zeros((len(grid_shape), dtype.itemsize * 8, 4), np.int64)
    k_var = keepbits(total, level, dtype, confidence)
    for index, counts, digest in rows:
        enough = int(counts[..., 0, :].sum(axis=-1).max()) >= MIN_CHUNK_PAIRS
        k = keepbits(counts, level, dtype, confidence) if enough else 0
        grid[index], digests[index] = (k if enough and k > 0 else k_var), digest
    return ArrayPlan(name=name, masks=np.zeros(grid_shape, np.uint8), codecs=[], header_bits=0,
                     shape=tuple(var.shape), chunk_shape=tuple(inner), dtype=str(np.dtype(var.dtype)),
                     digests=digests, stats={"information": level}, keepbits=grid, dims=tuple(var.dims) or None)


def _load_plan(name: str, path: str, var: SourceVariable, inner: tuple[int, ...]) -> Any:
    from zopt.planning.plan import Plan, PlanMismatchError

    plan = Plan.load(path)
    ap = plan[name]
    if ap.keepbits is None:
        raise PlanMismatchError(f"lossy {name}: plan {path!r} has no keepbits for {name!r} (make one with "
                                "zopt lossy-plan or zopt.lossy.keepbits_plan)")
    ap.check(tuple(var.shape), tuple(inner), [], 0, str(np.dtype(var.dtype)))
    return ap


def _source_fill_and_attrs(src: str, names: list[str]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Fill values and attributes of ``names`` as the target will have them."""
    from zopt.compat.job_cache import release_job
    from zopt.io.sources import open_source, zarr_v3_group

    group = zarr_v3_group(src)
    if group is not None:
        arrays = dict(group.arrays())
        return ({n: arrays[n].metadata.fill_value for n in names}, {n: dict(arrays[n].attrs) for n in names})
    job_id = "lossy-attributes"
    try:
        return _xarray_fill_and_attrs(open_source(src).template(job_id), names)
    finally:
        release_job(job_id)


def _xarray_fill_and_attrs(ds: xr.Dataset, names: list[str]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    fills = {}
    for n in names:
        fill = ds[n].encoding.get("fill_value")
        if fill is None:  # set explicitly by recompress (xarray keeps _FillValue as an attribute, a sentinel here)
            fill = np.nan if np.dtype(ds[n].dtype).kind == "f" else 0
        fills[n] = fill
    return fills, {n: dict(ds[n].attrs) for n in names}


__all__ += ["ATTRIBUTE", "LossyBoundError"]

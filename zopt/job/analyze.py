"""``zopt.analyze`` and ``zopt.plan``: analyse any source, and turn the analysis into a saved plan.

A Zarr store is analysed where it is (``zopt.planning.analysis``); a netCDF/HDF5 file through a
raw (uncompressed) Zarr copy with ``recompress``'s default chunks, in a temporary directory
removed afterwards, so a plan made from it applies to ``recompress(SRC, DST, plan=...)``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

import xarray as xr

from zopt.codecs.zarr_config import with_zopt_pipeline
from zopt.errors import OptionError
from zopt.io.paths import check_no_overlap, check_replaceable
from zopt.io.sources import arrays_in
from zopt.job.progress import OneBar
from zopt.planning.analysis import DEFAULT_SAMPLE, analysable, load_analysis
from zopt.planning.analysis import analyze as analyze_zarr
from zopt.planning.chunking import parse_shape, shape_for
from zopt.planning.optimizer import MenuOptions
from zopt.planning.plan import Plan, check_policy, make_plan

if TYPE_CHECKING:
    from zopt.types import BudgetLike, NamesLike, ShapeLike

__all__ = ["AnalysisOptions", "MenuKeywords", "analyze", "plan"]


class MenuKeywords(TypedDict, total=False):
    """``analyze``'s ``menu_options``: the codec ``menu`` to choose each array's whole chain from
    (``zopt.planning.candidates``), its speed ``budget`` and the ``readers`` the chains must suit."""

    menu: str | Sequence[str] | None
    budget: BudgetLike
    readers: NamesLike


class AnalysisOptions(MenuKeywords, total=False):
    """``plan``'s ``analysis_options``: ``analyze``'s keywords."""

    codecs: Sequence[dict[str, Any]] | str | None
    chunks: ShapeLike
    sample: float | None
    read: str
    decode_times: bool
    scheduler: str | None
    progress: Callable[[int], Any] | None
    note: Callable[[str], Any] | None

_RAW = [{"name": "bytes", "configuration": {"endian": "little"}}]


def _raw_view(src: str, path: str) -> str:
    from zopt.job.api import recompress

    recompress(src, path, codecs=_RAW, progress=False)
    return path


@with_zopt_pipeline
def analyze(
    store: str | os.PathLike[str],
    arrays: Sequence[str] | None = None,
    *,
    codecs: Sequence[dict[str, Any]] | str | None = None,
    chunks: str | Mapping[str, int] | Sequence[int] | None = None,
    sample: float | None = DEFAULT_SAMPLE,
    read: str = "auto",
    decode_times: bool = False,
    scheduler: str | None = None,
    progress: Callable[[int], Any] | None = None,
    note: Callable[[str], Any] | None = None,
    **menu_options: Unpack[MenuKeywords],
) -> dict[str, xr.Dataset]:
    """Measure every chunk of every array of ``store``: one Dask task per shard.

    store : a Zarr v2/v3 store (directory or fsspec URL) or a netCDF/HDF5 file (analysed through
        a temporary raw Zarr copy with ``recompress``'s default chunks).
    arrays : array paths (default: every array with a numeric data type).
    codecs : the wrapped codecs whose masks are trial-encoded (JSON list or string); default: the
        array's ``conditional`` codecs, else ``zopt.planning.analysis.DEFAULT_CANDIDATES``.
    chunks : the analysed chunk grid (``"time=12,lat=64"``, a mapping by dimension name, or a
        shape); default the array's own (inner) chunks.
    sample : fraction of each chunk trial-encoded (0 < sample <= 1), None for whole chunks.
    read, decode_times, scheduler, progress : as ``zopt.planning.analysis.analyze_array``.
    note : called with one line for each array skipped and for the temporary copy.
    menu_options : ``menu``, ``budget``, ``readers``: also choose each array's whole chain from the
        codec menu (``zopt.planning.candidates``), which a plan then records.

    Returns ``{array path: xarray.Dataset over the chunk grid}`` (variables: ``raw_bytes``,
    ``encoded_bytes`` per mask in bytes, ``entropy`` in bits per byte, ``zero_fraction``,
    ``nan_fraction``, ``is_fill``, ``digest``, …; see ``docs/plans.md``). Raises ValueError for
    an unknown array or an invalid option (naming it), ZoptError subclasses for unreadable chunks.
    """
    if progress is not None and not isinstance(progress, OneBar):  # one bar for the whole analysis, not one per array
        bar = OneBar(progress)
        try:
            return analyze(store, arrays, codecs=codecs, chunks=chunks, sample=sample, read=read,
                           decode_times=decode_times, scheduler=scheduler, progress=bar, note=note, **menu_options)
        finally:
            bar.close()
    store = os.fspath(store)
    menu = _menu(menu_options)
    _check_options(codecs, chunks, sample, read)  # before a netCDF file's raw copy reads all its data
    if os.path.isfile(store):
        with tempfile.TemporaryDirectory(prefix="zopt-view-") as tmp:
            view = _raw_view(store, os.path.join(tmp, "view.zarr"))
            if note:
                note(f"note: {store} is not a Zarr store: analysed through a raw Zarr copy with recompress's "
                     "default chunks, in a temporary directory removed afterwards")
            return analyze(view, arrays, codecs=codecs, chunks=chunks, sample=sample, read=read,
                           decode_times=decode_times, scheduler=scheduler, progress=progress, note=note,
                           **menu_options)
    spec = parse_shape(chunks, "chunks")
    out: dict[str, xr.Dataset] = {}
    found = arrays_in(store, arrays or None)
    if isinstance(spec, dict):  # a misspelt name: refused, not ignored
        dims = {str(d) for a in found for d in getattr(a.metadata, "dimension_names", None) or () if d}
        unknown = [d for d in spec if d not in dims]
        if unknown:
            raise OptionError("chunks", f"no analysed array has dimension(s) {unknown}; the dimensions are {sorted(dims)}")
    for a in found:
        why = analysable(a)
        if why is not None:
            if a.ndim and note:  # scalars are not worth a line
                note(f"note: skipped array {a.path!r}, {why}; recompress copies it as it is")
            continue
        names = tuple(getattr(a.metadata, "dimension_names", None) or ())
        shape = shape_for(spec, names, tuple(a.shape)) if names or not isinstance(spec, dict) else None
        out.update(analyze_zarr(store, [a.path], codecs=codecs, chunks=shape, sample=sample, scheduler=scheduler,
                                read=read, decode_times=decode_times, progress=progress, menu=menu))
    return out


def _check_options(codecs: Sequence[dict[str, Any]] | str | None, chunks: str | Mapping[str, int] | Sequence[int] | None,
                   sample: float | None, read: str) -> None:
    """Refuse an invalid ``codecs``, ``chunks``, ``sample`` or ``read`` before any data is read:
    ValueError naming the option (the same checks the analysis makes where it uses them)."""
    import json

    from zopt.compat.zarr_compat import resolve_codec
    from zopt.planning.analysis import check_sampling

    parse_shape(chunks, "chunks")
    check_sampling(sample, read)
    if codecs is None:
        return
    try:
        listed = json.loads(codecs) if isinstance(codecs, str) else codecs
    except json.JSONDecodeError as exc:
        raise OptionError("codecs", f"not valid JSON: {exc}") from exc
    if not isinstance(listed, list | tuple):
        raise OptionError("codecs", f"expected a JSON list of codecs such as [{{\"name\": \"shuffle\"}}, "
                                    f"{{\"name\": \"zstd\", \"configuration\": {{\"level\": 3}}}}], got {codecs!r}")
    for codec in listed:
        resolve_codec(codec)


def _menu(options: MenuKeywords) -> MenuOptions | None:
    """``analyze``'s ``menu``, ``budget`` and ``readers`` parsed (None without ``menu``): the menu as
    given, not narrowed to the default readers (a plan records the chains it chose). TypeError
    for another keyword, as Python says it."""
    from zopt.planning.candidates import parse_menu
    from zopt.planning.optimizer import MenuOptions, parse_budget
    from zopt.planning.readers import parse_readers

    unknown = sorted(set(options) - {"menu", "budget", "readers"})
    if unknown:
        raise TypeError(f"analyze() got an unexpected keyword argument {unknown[0]!r}")
    budget, readers = parse_budget(options.get("budget")), frozenset(parse_readers(options.get("readers")))
    if options.get("menu") is None:
        return None
    return MenuOptions(parse_menu(options["menu"]), budget, readers)


@with_zopt_pipeline
def plan(
    store: str | os.PathLike[str],
    arrays: Sequence[str] | None = None,
    *,
    policy: str | Callable[[dict[str, Any]], int] = "compress_if_smaller",
    params: Mapping[str, float] | None = None,
    output: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    analysis: str | os.PathLike[str] | Mapping[str, xr.Dataset] | None = None,
    **analysis_options: Unpack[AnalysisOptions],
) -> Plan:
    """A ``Plan``: one ``conditional`` mask per chunk of each array, chosen by ``policy``.

    store : the store or file the plan is for (analysed unless ``analysis`` is given).
    policy : ``compress_if_smaller``, ``min_gain``, ``smallest``, ``fastest_within`` or a function
        of one chunk's measurements returning its mask (``docs/plans.md``); params : the policy's
        parameters (e.g. ``{"gain": 0.125}``, ``{"within": 0.05}``).
    output : where to save the plan (a Zarr v3 group; versionable, re-applied by
        ``recompress(..., plan=output)``); refused if it overlaps ``store``, or exists and is not a
        Zarr store or ``overwrite`` is False.
    analysis : a saved analysis (path) or ``analyze``'s result instead of analysing now.
    analysis_options : passed to ``analyze`` (``codecs``, ``chunks``, ``sample``, ``read``,
        ``scheduler``, ``progress``, ``note``; ``decode_times`` is set for ``fastest_within``).

    Raises ValueError naming an invalid option, PlanMismatchError when ``analysis`` does not fit.
    """
    check_policy(policy, params)  # before the analysis reads any data
    if output is not None:
        check_no_overlap(store, output)
        check_replaceable(output, overwrite, "output")
    if analysis is None:
        analysis_options.setdefault("decode_times", policy == "fastest_within")
        analyses: Mapping[str, xr.Dataset] = analyze(store, arrays, **analysis_options)
    elif isinstance(analysis, Mapping):
        analyses = analysis
    else:
        analyses = load_analysis(analysis)
        if arrays:
            analyses = {k: v for k, v in analyses.items() if k in arrays}
    made = make_plan(dict(analyses), policy, **dict(params or {}))
    if output is not None:
        made.save(output)
    return made

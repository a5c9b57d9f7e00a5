"""``RecompressJob``: every option of one recompress job, validated once, in one place.

The CLI (``zopt recompress``), ``zopt.job`` and ``zopt.xarray.recompress`` all build this
object and hand it to ``zopt.job.api.run_job``; the journal fingerprints it by its fields (a
field added is fingerprinted unless marked ``fingerprint=False``: options that change *how* the
job runs, not *what* it writes); child groups get it with only their paths changed
(``for_child``), so no option is lost on the way down.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

from zopt.errors import OptionError
from zopt.lossy.spec import LossySpec
from zopt.planning.chunking import ShapeSpec, shape_text
from zopt.planning.optimizer import DEFAULT_BUDGET, MenuOptions
from zopt.types import LossyLike

if TYPE_CHECKING:
    from zarr.abc.store import Store

    from zopt.codecs.decisions import DecisionLike
    from zopt.job.progress import JobProgress
    from zopt.planning.plan import Plan


__all__ = ["DEFAULT_DECISION", "SEVERAL", "Flag", "RecompressJob", "RefusedOptionError", "flagged_options", "parse_max_memory",
           "refuse_options", "refused_in_place"]

DEFAULT_DECISION = "compress_if_smaller"
LAYOUTS = ("compact", "fixed-slot")

_HOW = {"fingerprint": False}  # options that change how the job runs, not what it writes
_DERIVED = {"fingerprint": False, "derived": True}  # made by RecompressJob.parse from the options
#: options a rewrite in place (``recompress_in_place``, ``--in-place``) honours; every other field is refused
#: there (``refused_in_place``): it keeps every array's metadata and writes no new store
_IN_PLACE = {"in_place": True}
#: options of ``zopt.recompress`` only, with no ``zopt recompress`` flag (Python callables; the CLI has its own forms)
_API_ONLY = {"api_only": True}
#: where an option is refused, by the kind of job (``refuse_options``): ``SEVERAL``, several sources combined
#: along ``concat_dim`` (``zopt.io.multi``)
SEVERAL = "several"


class RefusedOptionError(OptionError):
    """An option given where its field's metadata refuses it (``refuse_options``): the CLI's usage
    error on its flag."""


def _refused(**why: str) -> dict[str, dict[str, str]]:
    """Field metadata: the kinds of job (``SEVERAL``) that refuse the option, each with its reason."""
    return {"refused": why}


@dataclass(frozen=True)
class Flag:
    """An option's flag on ``zopt recompress`` (field metadata ``flag``), from which
    ``zopt.cli.recompress`` builds its click option: so a new option is its field here, its keyword
    in ``zopt.recompress`` and the module where it acts (issue 37). ``decls`` as click takes them
    (``("--variable", "variables")``, ``("--checksum/--no-checksum",)``); ``default`` filled from the
    field's by ``flagged_options`` where ``show_default``; the value as given on the
    command line (text, parsed by ``RecompressJob.parse`` like the API's), unless ``choices`` (one
    of them), ``at_least`` (an integer ≥ it), ``directory`` (an existing directory), ``is_flag``;
    ``multiple``: repeatable, a list (None when not given)."""

    decls: tuple[str, ...]
    help: str
    default: object = None
    show_default: bool = False
    choices: tuple[str, ...] = ()
    at_least: int | None = None
    directory: bool = False
    is_flag: bool = False
    multiple: bool = False


class _FlagForm(TypedDict, total=False):
    show_default: bool
    choices: tuple[str, ...]
    at_least: int
    directory: bool
    is_flag: bool
    multiple: bool


def _flag(*decls: str, help: str, **form: Unpack[_FlagForm]) -> dict[str, Flag]:
    """Field metadata: the option's ``Flag``."""
    return {"flag": Flag(decls, help, **form)}


def flagged_options() -> list[tuple[str, Flag]]:
    """``[(field name, Flag)]`` of every ``RecompressJob`` option with a flag, in field order; a flag
    that shows its default gets the field's (the others default to None: not given)."""
    return [(f.name, dataclasses.replace(f.metadata["flag"], default=f.default) if f.metadata["flag"].show_default
             else f.metadata["flag"]) for f in dataclasses.fields(RecompressJob) if "flag" in f.metadata]


def parse_max_memory(value: int | str | None) -> int | None:
    """``max_memory`` in bytes (an int, or a string such as ``"2GiB"``), or None. ValueError naming it."""
    if value is None:
        return None
    from dask.utils import parse_bytes

    try:
        n = parse_bytes(value) if isinstance(value, str) else int(value)
    except (ValueError, TypeError) as exc:
        raise OptionError("max_memory", f"{value!r} is not a size such as 2GiB or 500MB") from exc
    if n <= 0:
        raise OptionError("max_memory", f"{value!r} must be positive")
    return n


def _lossy_items(lossy: LossyLike) -> list[tuple[str, str]]:
    """``[(variable, spec text)]`` of ``lossy`` (``["T=abs:0.1", …]``, ``{"T": "abs:0.1"}`` or one string)."""
    if lossy is None:
        return []
    if isinstance(lossy, Mapping):
        return [(str(k), v.text() if isinstance(v, LossySpec) else str(v)) for k, v in lossy.items()]
    items = [lossy] if isinstance(lossy, str) else list(lossy)
    out = []
    for item in items:
        if not isinstance(item, str) or "=" not in item:
            raise OptionError("lossy", f"{item!r} is not VAR=SPEC (e.g. tos=abs:0.01)")
        var, spec = item.split("=", 1)
        out.append((var.strip(), spec.strip()))
    return out



@dataclass(frozen=True)
class RecompressJob:
    """One recompress job: where from, where to, and every option (documented in ``zopt.recompress``),
    parsed: ``RecompressJob.parse`` takes what a user gives (text, lists, a preset's name) and
    checks it once (``OptionError`` naming the option and the allowed values); the fields hold the
    parsed values (zarr's ``ArrayConfigLike`` → ``ArrayConfig``). The preset is resolved into
    ``codecs``, ``decision``, ``menu`` and ``budget``. Frozen: ``dataclasses.replace`` makes a
    changed copy (of parsed values: nothing is parsed again).
    """

    src: str | tuple[str, ...] = field(metadata=_IN_PLACE)  # several: along concat_dim
    dst: str | Store  # a local path, an fsspec URL, an Icechunk URL, or a zarr Store
    codecs: tuple[dict[str, Any], ...] | None = field(default=None, metadata=_flag(  # the chain every variable gets; None: each its own
        "--codecs", "codecs", help="Target codec chain as JSON (inside sharding when sharded). Default: each variable's chain "
        "chosen from the codec menu (--menu, --budget)."))
    preset: str | None = field(default=None, metadata=_flag(  # its name (its chain, decision, menu and budget are in those fields)
        "--preset", help="A named codec menu or chain and decision instead of --codecs (see zopt presets): default, fast "
        "(the fast one; zopt's conditional), archive (smallest, slow), lossless-8bit. An explicit --decision overrides "
        "the preset's."))
    chunks: ShapeSpec = field(default=None, metadata=_flag(
        "--chunks", help="Inner chunk shape by dimension, e.g. y=32,x=32 (other dimensions whole), or positional, e.g. "
        "1,32,32. Default: ~256 KiB that keep the last dimensions whole (a 64×1024×1024 float32 gets 1×64×1024), square "
        "tiles for 1-byte and bool types; 1-D coordinates whole."))
    shards: ShapeSpec = field(default=None, metadata=_flag(
        "--shards", help="Shard shape, same forms as --chunks (e.g. y=160,x=180); rounded down to a multiple of the inner "
        "chunks. Default: ~64 MiB."))
    decision: DecisionLike = field(default=DEFAULT_DECISION, metadata={**_IN_PLACE, **_flag(
        "--decision", show_default=True, choices=("compress_if_smaller", "always", "never"),
        help="How the conditional codec picks each chunk's mask (not with --plan, whose masks decide).")})
    variables: tuple[str, ...] | None = field(default=None, metadata={**_IN_PLACE, **_flag(
        "--variable", "variables", multiple=True, help="Only rewrite these variables (repeatable); GROUP/NAME for an array "
        "of a child group.")})
    layout: str = field(default="compact", metadata=_flag(
        "--layout", show_default=True, choices=LAYOUTS, help="Shard layout: packed shards (one task per "
        "shard) or fixed slots written by several tasks per shard."))
    slot_parts: int | None = field(default=None, metadata=_flag(
        "--slot-parts", at_least=1, help="Fixed-slot layout: writer tasks per shard (default: ~16 MiB of raw data each)."))
    plan: Plan | str | os.PathLike[str] | None = field(default=None, metadata={**_IN_PLACE, **_refused(
        several="a plan is made for one source's arrays; with several sources (concat_dim) use a decision (or a preset)"),
        **_flag("--plan", "plan", directory=True, help="A saved plan (zopt plan -o PLAN): its masks decide, no trial "
                "encoding.")})
    plan_force: bool = field(default=False, metadata=_flag(  # a plan that would make an array worse: applied anyway
        "--plan-force", is_flag=True, help="With --plan: apply it also to arrays of a Zarr v3 SRC it would make larger "
        "(by its own estimate) or readable by fewer readers, which otherwise keep SRC's chain (a note names them)."))
    lossy: Mapping[str, LossySpec] = field(default_factory=dict, metadata={**_refused(
        several="not supported with several sources (concat_dim) yet; recompress them losslessly, then run the lossy "
                "job on the combined store"), **_flag(
        "--lossy", "lossy", multiple=True, help="VAR=abs:BOUND[:TAIL] | rel:R | keepbits:K | info:L[:chunk] | plan:PATH: "
        "lossy, within a stated and verified bound (docs/lossy.md; repeatable).")})
    readers: frozenset[str] = field(default=frozenset(), metadata=_flag(  # as given (none: ``zopt.job.prepare.job_readers``)
        "--readers", help="Comma-separated zopt, zarr-python (>= 3.1, no zopt), zarr-python-3.2 (adds scale_offset, "
        "cast_value), tensorstore, zarrs: without --codecs, only chains they all read are chosen from the menu (default: "
        "zarr-python; zopt adds its conditional codec; an explicit --decision: zopt); with --codecs, refuse a chain one "
        "cannot read (docs/lossy.md); abs:E's tail trial tries only what they read."))
    checksum: bool | None = field(default=None, metadata=_flag(
        "--checksum/--no-checksum", help="End the inner chain of sharded arrays with crc32c, so readers detect a torn read "
        "during a later compact or --in-place rewrite (default: on for --layout fixed-slot, off for compact)."))
    skip_broken: bool = field(default=False, metadata=_flag(
        "--skip-broken", is_flag=True, help="Leave out source arrays whose zarr.json is broken (listed; exit status 3) "
        "instead of failing naming the file."))
    menu: tuple[str, ...] = field(default=(), metadata=_flag(  # without codecs or plan: the candidates each variable's chain is chosen from
        "--menu", help="Without --codecs: the candidates each variable's chain is chosen from, a menu (default, archive) "
        "or comma-separated candidate names (docs/presets.md, zopt.planning.candidates)."))
    budget: float = field(default=DEFAULT_BUDGET, metadata=_flag(  # the speed budget of that choice (zopt.planning.optimizer)
        "--budget", help="Without --codecs: the speed budget of the menu choice, a number > 0 (default 1: each extra "
        "default-encode-time must save 1 % of size; larger favours size) or 'inf' (size first)."))
    concat_dim: str | None = field(default=None, metadata=_flag(  # several sources combined along it (zopt.io.multi)
        "--concat-dim", help="SRC is several files (a quoted glob such as 'archive/*.nc'), combined along this dimension "
        "as xarray's open_mfdataset does, checked before anything is written (docs/archives.md)."))
    combine: str = field(default="by_coords", metadata=_flag(  # with concat_dim: files by coordinate, or "nested": as given
        "--combine", show_default=True, choices=("by_coords", "nested"), help="With --concat-dim: "
        "order the files by their coordinate along it (by_coords) or as given, a glob sorted by name (nested), as "
        "xarray's open_mfdataset combine."))
    append: bool = field(default=False, metadata={**_HOW, **_flag(  # extend DST along concat_dim (zopt.job.append)
        "--append", is_flag=True, help="With --concat-dim: append SRC's files to DST, a store zopt wrote, along the "
        "concat dimension, keeping its chains, chunks and shards (docs/append.md).")})
    scheduler: str | None = field(default=None, metadata={**_HOW, **_IN_PLACE, **_flag(
        "--scheduler", help="Dask scheduler: 'threads' (default), 'processes', 'synchronous', or a dask.distributed "
        "address such as tcp://127.0.0.1:8786.")})
    overwrite: bool = field(default=False, metadata={**_HOW, **_flag(
        "--overwrite", is_flag=True, help="Replace DST if it exists and is a Zarr store (the old one is renamed aside and "
        "deleted once the new one is in place).")})
    progress: JobProgress | None = field(  # zopt.job.progress.parse_progress
        default=None, metadata={**_HOW, **_IN_PLACE, **_API_ONLY}, compare=False)
    max_memory: int | None = field(default=None, metadata={**_HOW, **_flag(
        "--max-memory", help="Refuse the job if a task's projected peak memory exceeds this (e.g. 2GiB).")})
    dry_run: bool = field(default=False, metadata={**_HOW, **_flag(
        "--dry-run", is_flag=True, help="Print the plan of work (arrays, shards, tasks, bytes, projected memory per task, "
        "shards an interrupted run already finished) and exit without writing.")})
    before_publish: Callable[[object, list[str]], None] | None = field(default=None, metadata={**_HOW, **_API_ONLY},
                                                                       compare=False)
    # derived by ``parse``, not options: the menu's options (None: a chain or a plan is given), and
    # the options as given (``described``, for ``--dry-run``)
    menu_options: MenuOptions | None = field(default=None, metadata=_DERIVED)
    asked: tuple[tuple[str, str], ...] = field(default=(), metadata=_DERIVED, compare=False, repr=False)

    @classmethod
    def parse(cls, src: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], dst: str | os.PathLike[str] | Store,
              **options: object) -> RecompressJob:
        """The job of ``zopt.recompress(src, dst, **options)``, every option parsed and checked once:
        ``codecs`` (JSON text or list), ``preset`` (a name), ``chunks``/``shards`` (``ShapeLike``),
        ``decision`` (``DecisionLike`` or None: the preset's, else ``compress_if_smaller``),
        ``variables`` (names, or one name), ``lossy`` (``["VAR=SPEC", …]``, ``{VAR: SPEC}`` or one
        string), ``readers``/``menu`` (names or one comma-separated string), ``budget`` (a number
        or ``"inf"``), ``max_memory`` (bytes or ``"2GiB"``); the others as the fields. Raises
        ``OptionError`` naming the option and the allowed values; TypeError for an unknown option."""
        return _parse(cls, src, dst, dict(options))

    # the forms derived from the fields ---------------------------------------------------------
    @property
    def chain(self) -> list[dict[str, Any]]:
        """The target codec chain (a fresh copy of ``codecs``; ``DEFAULT_CHAIN`` when none)."""
        from zopt.planning.chains import parse_chain

        return parse_chain(None if self.codecs is None else json.loads(json.dumps(list(self.codecs))))

    @property
    def want_checksum(self) -> bool:
        """crc32c at the end of sharded arrays' inner chains: as asked, else for fixed slots."""
        return self.layout == "fixed-slot" if self.checksum is None else bool(self.checksum)

    @property
    def explicit_decision(self) -> bool:
        """A decision other than ``compress_if_smaller`` (given, or the preset's)."""
        return not (isinstance(self.decision, str) and self.decision == DEFAULT_DECISION)

    # journal, dry run, child groups ---------------------------------------------------------
    def fingerprinted(self) -> dict[str, Any]:
        """The options that change what is written, by field (``src``/``dst`` are the journal's own),
        as stable JSON-able values."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.metadata.get("fingerprint", True) and f.name not in ("src", "dst")}
        out.update(codecs=None if self.codecs is None else list(self.codecs), checksum=self.want_checksum,
                   chunks=shape_text(self.chunks), shards=shape_text(self.shards),
                   variables=None if self.variables is None else list(self.variables),
                   lossy=[f"{v}={s.text()}" for v, s in self.lossy.items()] or None,
                   readers=sorted(self.readers) or None, menu=list(self.menu) or None)
        out.pop("preset")  # its chain and decision are fingerprinted above
        return out

    def described(self) -> list[tuple[str, str]]:
        """``[(option, value text)]`` of every option given other than its default, as given, for ``--dry-run``."""
        return list(self.asked)

    def for_child(self, child: str, dst: str | Store) -> RecompressJob:
        """This job for the child group ``child`` of the source, written to ``dst``: only the paths
        change; ``variables`` and ``lossy`` keep their ``child/…`` entries, re-rooted. (A plan
        covers one group: ``plan`` with child groups is refused before anything is written;
        ``before_publish`` runs once, in the parent job, over every array, children included.)"""
        prefix = child + "/"
        variables = None if self.variables is None else tuple(v[len(prefix):] for v in self.variables
                                                              if v.startswith(prefix))
        lossy = {v[len(prefix):]: dataclasses.replace(s, variable=v[len(prefix):])
                 for v, s in self.lossy.items() if v.startswith(prefix)}
        assert isinstance(self.src, str)  # several sources (concat_dim) have no child groups
        return dataclasses.replace(
            self, src=os.path.join(self.src, child), dst=dst, variables=variables,
            lossy=lossy, overwrite=False, before_publish=None)

    def lossy_groups(self) -> set[str]:
        """The child groups named by ``lossy`` entries (``child/VAR=…``)."""
        return {v.split("/", 1)[0] for v in self.lossy if "/" in v}

    def own_lossy(self) -> dict[str, LossySpec]:
        """``lossy`` without the child groups' ``child/VAR=…`` entries (their jobs take them)."""
        return {v: s for v, s in self.lossy.items() if "/" not in v}


_LOOSE_DEFAULTS: dict[str, Any] = {"decision": None, "menu": None, "budget": None, "readers": None, "lossy": None}


def _asked(options: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """``(option, value text)`` of the options given other than their default, in field order."""
    out = []
    for f in dataclasses.fields(RecompressJob):
        if f.name not in options:
            continue
        value = options[f.name]
        default = _LOOSE_DEFAULTS.get(f.name, f.default)
        if value is None or value == default or callable(value) and f.name != "decision":
            continue
        out.append((f.name, value if isinstance(value, str) else repr(value)))
    return tuple(out)


def _parse(cls: type[RecompressJob], src: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
           dst: str | os.PathLike[str] | Store, given: dict[str, Any]) -> RecompressJob:
    """``RecompressJob.parse``: each option parsed, then what they must agree on checked."""
    from zopt.compat.scheduling import check_scheduler
    from zopt.lossy.spec import parse_lossy
    from zopt.planning.chains import parse_chain
    from zopt.planning.chunking import parse_shape
    from zopt.planning.optimizer import parse_budget
    from zopt.planning.readers import parse_readers

    options = {f.name for f in dataclasses.fields(cls) if not f.metadata.get("derived")}
    unknown = sorted(set(given) - options)
    if unknown:
        raise TypeError(f"recompress() got an unexpected keyword argument {unknown[0]!r}")
    opts = {k: v for k, v in given.items() if v is not None or k in ("checksum",)}
    src = _sources(src, given.get("concat_dim"), given.get("combine", "by_coords"), given)
    if isinstance(dst, os.PathLike):
        dst = os.fspath(dst)
    layout = opts.get("layout", "compact")
    if layout not in LAYOUTS:
        raise OptionError("layout", f"{layout!r} is not one of {list(LAYOUTS)}")
    plan = opts.get("plan")
    decision = opts.get("decision")
    if plan is not None and decision not in (None, DEFAULT_DECISION):
        raise OptionError("decision", "a plan decides every chunk's mask; give a plan or a decision, not both")
    check_scheduler(opts.get("scheduler"))  # OptionError naming scheduler and the allowed values
    checksum = given.get("checksum")
    if checksum not in (None, True, False):
        raise OptionError("checksum", f"{checksum!r} is not one of [None, True, False]")
    slot_parts = opts.get("slot_parts")
    if slot_parts is not None and (isinstance(slot_parts, bool) or not isinstance(slot_parts, int) or slot_parts < 1):
        raise OptionError("slot_parts", f"{slot_parts!r} is not an integer >= 1 (or None)")
    codecs = opts.get("codecs")
    menu, budget = opts.get("menu"), opts.get("budget")
    preset = opts.get("preset")
    if preset is not None:
        from zopt.planning.presets import get_preset

        if codecs is not None:
            raise OptionError("preset", "names a codec chain", conflicts=("codecs",))
        chosen = get_preset(preset)  # OptionError naming the known presets
        codecs = None if chosen.menu is not None else chosen.chain()
        decision = chosen.decision if decision is None else decision
        if chosen.menu is not None:
            menu = chosen.menu if menu is None else menu
            budget = chosen.budget if budget is None else budget
    if (opts.get("menu") is not None or opts.get("budget") is not None) and (codecs is not None or plan is not None):
        raise OptionError("menu, budget", "they choose a chain per variable when none is given; give them or "
                          "codecs/plan (or a preset naming a chain), not both")
    decision = DEFAULT_DECISION if decision is None else decision
    chain = None if codecs is None else tuple(parse_chain(codecs))
    readers = frozenset(parse_readers(opts.get("readers")))
    menu_options = None
    if chain is None and plan is None:
        explicit = not (isinstance(decision, str) and decision == DEFAULT_DECISION)
        menu_options = MenuOptions.parse(menu, budget, readers, decision_given=explicit)
    variables = opts.get("variables")
    if variables is not None:  # () rewrites nothing (a child group none of whose arrays was named)
        variables = (variables,) if isinstance(variables, str) else tuple(variables)
    lossy = parse_lossy([f"{k}={v}" for k, v in _lossy_items(opts.get("lossy"))])
    return cls(
        src=src, dst=dst, codecs=chain, preset=preset,
        chunks=parse_shape(opts.get("chunks"), "chunks"), shards=parse_shape(opts.get("shards"), "shards"),
        decision=decision, variables=variables, layout=layout, slot_parts=slot_parts, plan=plan, lossy=lossy,
        readers=readers, checksum=checksum, skip_broken=bool(opts.get("skip_broken", False)),
        menu=menu_options.menu if menu_options is not None else (),
        budget=menu_options.budget if menu_options is not None else parse_budget(budget),
        concat_dim=opts.get("concat_dim"), combine=opts.get("combine", "by_coords"), scheduler=opts.get("scheduler"),
        overwrite=bool(opts.get("overwrite", False)), progress=_progress(opts.get("progress")),
        plan_force=_plan_force(opts.get("plan_force", False), plan),
        max_memory=parse_max_memory(opts.get("max_memory")), dry_run=bool(opts.get("dry_run", False)),
        before_publish=opts.get("before_publish"), menu_options=menu_options, asked=_asked(given),
        append=bool(opts.get("append", False)))


def _plan_force(value: object, plan: object) -> bool:
    if value not in (True, False):
        raise OptionError("plan_force", f"{value!r} is not True or False")
    if value and plan is None:
        raise OptionError("plan_force", "it applies a plan to every array: give a plan too")
    return bool(value)


def _progress(value: object) -> JobProgress | None:
    from zopt.job.progress import parse_progress

    return parse_progress(value)


def _sources(src: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], concat_dim: object, combine: object,
             given: Mapping[str, Any]) -> str | tuple[str, ...]:
    """SRC as text; several sources (a list, or a glob) need ``concat_dim``; ``plan`` is not for them."""
    from zopt.io.multi import check_combine_use

    several = not isinstance(src, str | os.PathLike)
    out: str | tuple[str, ...] = os.fspath(src) if isinstance(src, str | os.PathLike) else tuple(
        os.fspath(s) for s in src)
    if concat_dim is None:
        if several:
            raise OptionError("concat_dim", "several sources are combined along one dimension: give its name "
                              "(e.g. concat_dim='time', --concat-dim time)")
        check_combine_use(combine, None)
        return out
    if not isinstance(concat_dim, str) or not concat_dim:
        raise OptionError("concat_dim", f"{concat_dim!r} is not a dimension name")
    check_combine_use(combine, concat_dim)  # OptionError naming combine and the allowed values
    refuse_options(given, SEVERAL)
    return out


def _given(name: str, value: object, default: object) -> bool:
    """Whether ``value`` of option ``name`` was given: not None, not its default, not empty."""
    if value is None or value == _LOOSE_DEFAULTS.get(name, default) or value == default:
        return False
    return not (isinstance(value, str | list | tuple | dict | set | frozenset) and not value)


def refuse_options(given: Mapping[str, object], where: str) -> None:
    """``OptionError`` naming the first option of ``given`` (``{RecompressJob field name: value}``,
    as given) whose field's metadata refuses it in a job of kind ``where`` (``SEVERAL``), with the
    field's reason; options left at their default are not refused."""
    for f in dataclasses.fields(RecompressJob):
        why = f.metadata.get("refused", {}).get(where)
        if why is not None and f.name in given and _given(f.name, given[f.name], f.default):
            raise RefusedOptionError(f.name, why)


def refused_in_place(given: Mapping[str, Any]) -> list[str]:
    """The options of ``given`` (``{RecompressJob field name: value}``, as given) that a rewrite in
    place does not honour: every field not marked ``in_place`` in ``RecompressJob`` (the one list;
    ``zopt recompress --in-place`` and ``zopt.recompress_in_place`` refuse them), with a value other
    than its default. Names that are no field are left to the caller."""
    fields = {f.name: f for f in dataclasses.fields(RecompressJob)}
    return [name for name, value in given.items()
            if name in fields and not fields[name].metadata.get("in_place", False) and value is not None
            and value != _LOOSE_DEFAULTS.get(name, fields[name].default)]

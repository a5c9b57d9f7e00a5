"""``RecompressJob``: every option of one recompress job, validated once, in one place.

The CLI (``zopt recompress``), ``zopt.job`` and ``zopt.xarray.recompress`` all build this
object and hand it to ``zopt.job.api.run_job``; the journal fingerprints it by its fields (a
field added is fingerprinted unless marked ``fingerprint=False``: options that change *how* the
job runs, not *what* it writes); child groups get it with only their paths changed
(``for_child``), so no option is lost on the way down.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from zopt.errors import OptionError

__all__ = ["DEFAULT_DECISION", "RecompressJob", "parse_max_memory", "refused_in_place"]

DEFAULT_DECISION = "compress_if_smaller"
LAYOUTS = ("compact", "fixed-slot")

_HOW = {"fingerprint": False}  # options that change how the job runs, not what it writes
#: options a rewrite in place (``recompress_in_place``, ``--in-place``) honours; every other field is refused
#: there (``refused_in_place``): it keeps every array's metadata and writes no new store
_IN_PLACE = {"in_place": True}


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


def _lossy_items(lossy: Any) -> list[tuple[str, str]]:
    """``[(variable, spec text)]`` of ``lossy`` (``["T=abs:0.1", …]``, ``{"T": "abs:0.1"}`` or one string)."""
    if lossy is None:
        return []
    if isinstance(lossy, Mapping):
        return [(str(k), str(v)) for k, v in lossy.items()]
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
    """One recompress job: where from, where to, and every option (documented in ``zopt.job``).

    Validated in ``__post_init__`` (ValueError naming the option and the allowed values); the
    parsed forms (``chain``, ``chunk_spec``, ``shard_spec``, ``memory_limit``, ``decision_used``)
    are properties. Frozen: ``dataclasses.replace`` makes a changed copy.
    """

    src: str | os.PathLike | Sequence[str | os.PathLike] = field(metadata=_IN_PLACE)  # several: along concat_dim
    dst: Any  # a local path, an fsspec URL or a zarr Store
    codecs: Sequence[dict[str, Any]] | str | None = None
    preset: str | None = None
    chunks: tuple[int, ...] | str | Mapping[str, int] | None = None
    shards: tuple[int, ...] | str | Mapping[str, int] | None = None
    decision: Any = field(default=None, metadata=_IN_PLACE)  # None: the preset's, else "compress_if_smaller"
    variables: Sequence[str] | None = field(default=None, metadata=_IN_PLACE)
    layout: str = "compact"
    slot_parts: int | None = None
    plan: Any = field(default=None, metadata=_IN_PLACE)
    lossy: Any = None
    readers: Sequence[str] | str | None = None
    checksum: bool | None = None
    skip_broken: bool = False
    menu: Any = None  # without codecs: the candidates each variable's chain is chosen from
    budget: Any = None  # and the speed budget of that choice (zopt.planning.optimizer)
    concat_dim: str | None = None  # several sources combined along this dimension (zopt.io.multi)
    combine: str = "by_coords"  # with concat_dim: files ordered by coordinate, or "nested": as given
    scheduler: str | None = field(default=None, metadata={**_HOW, **_IN_PLACE})
    overwrite: bool = field(default=False, metadata=_HOW)
    progress: Callable[[Any], Any] | None = field(default=None, metadata={**_HOW, **_IN_PLACE}, compare=False)
    max_memory: int | str | None = field(default=None, metadata=_HOW)
    dry_run: bool = field(default=False, metadata=_HOW)
    before_publish: Callable[[Any, list[str]], None] | None = field(default=None, metadata=_HOW, compare=False)

    def __post_init__(self) -> None:
        self._check_sources()
        if self.layout not in LAYOUTS:
            raise OptionError("layout", f"{self.layout!r} is not one of {list(LAYOUTS)}")
        if self.plan is not None and self.decision not in (None, DEFAULT_DECISION):
            raise OptionError("decision", "a plan decides every chunk's mask; give a plan or a decision, not both")
        from zopt.compat.scheduling import check_scheduler

        check_scheduler(self.scheduler)  # ValueError naming scheduler and the allowed values
        if self.checksum not in (None, True, False):
            raise OptionError("checksum", f"{self.checksum!r} is not one of [None, True, False]")
        if self.slot_parts is not None and (isinstance(self.slot_parts, bool) or not isinstance(self.slot_parts, int)
                                            or self.slot_parts < 1):
            raise OptionError("slot_parts", f"{self.slot_parts!r} is not an integer >= 1 (or None)")
        if self.preset is not None:
            from zopt.planning.presets import get_preset

            if self.codecs is not None:
                raise OptionError("preset", "names a codec chain", conflicts=("codecs",))
            get_preset(self.preset)  # ValueError naming the known presets
        if (self.menu is not None or self.budget is not None) and (self.codecs_used is not None or self.plan is not None):
            raise OptionError("menu, budget", "they choose a chain per variable when none is given; give them or "
                             "codecs/plan (or a preset naming a chain), not both")
        if self.budget is not None:
            from zopt.planning.optimizer import parse_budget

            parse_budget(self.budget)  # ValueError naming budget and the allowed values
        if isinstance(self.variables, str):
            object.__setattr__(self, "variables", [self.variables])
        if self.variables is not None:  # [] rewrites nothing (a child group none of whose arrays was named)
            object.__setattr__(self, "variables", list(self.variables))
        if isinstance(self.lossy, str | Mapping) or (self.lossy is not None and not isinstance(self.lossy, list)):
            object.__setattr__(self, "lossy", [f"{k}={v}" for k, v in _lossy_items(self.lossy)] or None)
        elif self.lossy is not None:
            _lossy_items(self.lossy)
            object.__setattr__(self, "lossy", list(self.lossy) or None)
        self.chain, self.chunk_spec, self.shard_spec, self.memory_limit  # noqa: B018 - parse now, fail early

    def _check_sources(self) -> None:
        """Several sources (a list, or a glob) need ``concat_dim``; ``lossy`` is not for them yet."""
        from zopt.io.multi import check_combine_use

        several = not isinstance(self.src, str | os.PathLike)
        if several:
            object.__setattr__(self, "src", tuple(os.fspath(s) for s in self.src))
        if self.concat_dim is None:
            if several:
                raise OptionError("concat_dim", "several sources are combined along one dimension: give its name "
                                 "(e.g. concat_dim='time', --concat-dim time)")
            check_combine_use(self.combine, None)
            return
        check_combine_use(self.combine, self.concat_dim)  # ValueError naming combine and the allowed values
        if not isinstance(self.concat_dim, str) or not self.concat_dim:
            raise OptionError("concat_dim", f"{self.concat_dim!r} is not a dimension name")
        if self.lossy:
            raise OptionError("lossy", "not supported with several sources (concat_dim) yet; recompress them "
                             "losslessly, then run the lossy job on the combined store")
        if self.plan is not None:
            raise OptionError("plan", "a plan is made for one source's arrays; with several sources (concat_dim) "
                             "use a decision (or a preset)")

    # the parsed forms ------------------------------------------------------------------------
    @property
    def chain(self) -> list[dict[str, Any]]:
        """The target codec chain (JSON objects) parsed from ``codecs_used`` (``DEFAULT_CHAIN`` when none)."""
        from zopt.planning.chains import parse_chain

        return parse_chain(self.codecs_used)

    @property
    def codecs_used(self) -> list[dict[str, Any]] | str | None:
        """What the job writes as ``codecs``: as given, else the preset's chain, else None (each
        variable's chain then comes from the codec menu, as for presets that name a menu)."""
        if self.preset is not None:
            from zopt.planning.presets import get_preset

            chosen = get_preset(self.preset)
            return None if chosen.menu is not None else chosen.chain()
        return self.codecs

    @property
    def menu_used(self) -> Any:
        """The codec menu: as given, else the preset's (``default``, ``archive``), else None (the default menu)."""
        if self.menu is None and self.preset is not None:
            from zopt.planning.presets import get_preset

            return get_preset(self.preset).menu
        return self.menu

    @property
    def budget_used(self) -> Any:
        """The speed budget of the menu choice: as given, else the preset's, else None (the default, 1)."""
        if self.budget is None and self.preset is not None:
            from zopt.planning.presets import get_preset

            return get_preset(self.preset).budget
        return self.budget

    @property
    def decision_used(self) -> Any:
        """The decision: as given, else the preset's, else ``compress_if_smaller``."""
        if self.decision is not None:
            return self.decision
        if self.preset is not None:
            from zopt.planning.presets import get_preset

            return get_preset(self.preset).decision
        return DEFAULT_DECISION

    @property
    def chunk_spec(self) -> Any:
        from zopt.planning.chunking import parse_shape

        return parse_shape(self.chunks, "chunks")

    @property
    def shard_spec(self) -> Any:
        from zopt.planning.chunking import parse_shape

        return parse_shape(self.shards, "shards")

    @property
    def memory_limit(self) -> int | None:
        return parse_max_memory(self.max_memory)

    @property
    def want_checksum(self) -> bool:
        """crc32c at the end of sharded arrays' inner chains: as asked, else for fixed slots."""
        return self.layout == "fixed-slot" if self.checksum is None else bool(self.checksum)

    # journal, dry run, child groups ---------------------------------------------------------
    def fingerprinted(self) -> dict[str, Any]:
        """The options that change what is written, by field (``src``/``dst`` are the journal's own)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.metadata.get("fingerprint", True) and f.name not in ("src", "dst")}
        out.update(codecs=self.codecs_used, decision=self.decision_used, checksum=self.want_checksum,
                   menu=self.menu_used, budget=self.budget_used)
        out.pop("preset")  # its chain and decision are fingerprinted above
        return out

    def described(self) -> list[tuple[str, str]]:
        """``[(option, value text)]`` of every option not at its default, for ``--dry-run``."""
        out = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in ("src", "dst") or value == f.default or callable(value) and f.name != "decision":
                continue
            out.append((f.name, value if isinstance(value, str) else repr(value)))
        return out

    def for_child(self, child: str, dst: Any) -> RecompressJob:
        """This job for the child group ``child`` of the source, written to ``dst``: only the paths
        change; ``variables`` and ``lossy`` keep their ``child/…`` entries, re-rooted. (A plan
        covers one group: ``plan`` with child groups is refused before anything is written;
        ``before_publish`` runs once, in the parent job, over every array, children included.)"""
        prefix = child + "/"
        variables = None if self.variables is None else [v[len(prefix):] for v in self.variables if v.startswith(prefix)]
        lossy = [f"{v[len(prefix):]}={s}" for v, s in _lossy_items(self.lossy) if v.startswith(prefix)]
        return dataclasses.replace(
            self, src=os.path.join(os.fspath(self.src), child), dst=dst, variables=variables,
            lossy=lossy or None, overwrite=False, before_publish=None)

    def lossy_groups(self) -> set[str]:
        """The child groups named by ``lossy`` entries (``child/VAR=…``)."""
        return {v.split("/", 1)[0] for v, _ in _lossy_items(self.lossy) if "/" in v}

    def own_lossy(self) -> list[str] | None:
        """``lossy`` without the child groups' ``child/VAR=…`` entries (their jobs take them)."""
        own = [f"{v}={s}" for v, s in _lossy_items(self.lossy) if "/" not in v]
        return own or None


def refused_in_place(given: Mapping[str, Any]) -> list[str]:
    """The options of ``given`` (``{RecompressJob field name: value}``, as given) that a rewrite in
    place does not honour: every field not marked ``in_place`` in ``RecompressJob`` (the one list;
    ``zopt recompress --in-place`` and ``zopt.recompress_in_place`` refuse them), with a value other
    than its default. Names that are no field are left to the caller."""
    fields = {f.name: f for f in dataclasses.fields(RecompressJob)}
    return [name for name, value in given.items()
            if name in fields and not fields[name].metadata.get("in_place", False) and value != fields[name].default]

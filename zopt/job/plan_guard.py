"""A plan that would make an array worse keeps the source's chain, unless the job says ``plan_force``.

``recompress(SRC, DST, plan=P)`` of a Zarr v3 SRC writes each array with the plan's chain (its
``conditional`` codec and masks, or the chain it recorded). Made on a store zopt already wrote, a
plan can make things worse: its estimate of the stored bytes (``ArrayPlan.stats["estimated_bytes"]``,
from its trial encodings) exceeds what SRC stores for that array, or its chain needs readers that
SRC's chain does not (``conditional``: zopt only, where SRC is read by plain zarr-python). For each
such array ``guard_plan`` says so in a note before anything is written and, without ``plan_force``,
keeps SRC's own chain for it (the plan then records that chain without masks, so its grid, shape,
data type and content are still checked, ``zopt.job.work.plan_for``).
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from typing import Any

from zopt.io.sources import is_zarr
from zopt.job.targets import stored_bytes_of
from zopt.notes import Note
from zopt.planning.plan import Plan

__all__ = ["guard_plan", "source_chain"]

#: the readers a store written without zopt's own codecs is read by
_PLAIN = ["zarr-python"]


def source_chain(where: str, name: str) -> list[dict[str, Any]] | None:
    """The codec chain array ``name`` of the Zarr v3 store ``where`` encodes its (inner) chunks with —
    the shard's inner chain without a closing ``crc32c`` (the job adds its own), else the array's
    codecs; None for a Zarr v2 array or one that cannot be opened."""
    import zarr

    try:
        with warnings.catch_warnings():  # numcodecs' codecs warn that they are not in the v3 spec
            warnings.simplefilter("ignore")
            array = zarr.open_array(where, path=name, mode="r")
    except Exception:
        return None
    if array.metadata.zarr_format != 3:
        return None
    meta: dict[str, Any] = json.loads(json.dumps(array.metadata.to_dict(), default=str))
    codecs: list[dict[str, Any]] = meta["codecs"]
    if len(codecs) == 1 and codecs[0]["name"] == "sharding_indexed":
        codecs = list(codecs[0].get("configuration", {}).get("codecs", []))
    while codecs and codecs[-1]["name"] == "crc32c":
        codecs.pop()
    return codecs or None


def guard_plan(plan: Plan, where: str | None, names: list[str], chain: list[dict[str, Any]], force: bool,
               notes: list[Note]) -> Plan:
    """``plan`` with each array it would make worse than the source Zarr v3 store ``where`` (larger
    by its own estimate, or read by fewer readers) set to keep the source's chain (a copy; the
    plan given is unchanged), each said in ``notes``; with ``force`` the plan as it is, each
    still said. ``chain``: the job's chain, which the plan's masks go into where it records none."""
    if where is None or not is_zarr(where):
        return plan
    from zopt.planning.readers import unreadable

    kept, worse = {}, []
    for name in names:
        ap = plan.arrays.get(name)
        own = None if ap is None else source_chain(where, name)
        if ap is None or own is None:
            continue
        ap.validate()  # a broken plan is refused as such, whether or not it is applied (reserved bits, ...)
        planned = ap.chain if ap.chain is not None else chain
        why = []
        estimate, stored = ap.stats.get("estimated_bytes"), stored_bytes_of(where, name)
        if estimate is not None and stored and estimate > stored:
            why.append(f"larger: estimate {int(estimate)} > {stored} bytes stored")
        narrowed = [n for _, n in unreadable(planned, _PLAIN)]
        if narrowed and not unreadable(own, _PLAIN):
            why.append(f"zopt-only: {', '.join(dict.fromkeys(narrowed))}")
        if why:
            worse.append(f"{name} ({'; '.join(why)})")
            if not force:
                kept[name] = dataclasses.replace(ap, chain=own, choice={"candidate": "source"})
    if worse and force:
        notes.append(Note("plan: applied as forced (plan_force) to arrays it makes worse than the source: "
                          + ", ".join(worse), "menu"))
    elif worse:
        notes.append(Note("plan: not applied to arrays it would make worse than the source, which keep the source's "
                          "chain: " + ", ".join(worse) + "; --plan-force (plan_force=True) applies it anyway", "menu"))
    if not kept:
        return plan
    return dataclasses.replace(plan, arrays={**plan.arrays, **kept})

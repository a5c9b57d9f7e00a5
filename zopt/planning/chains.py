"""The target codec chain: parsing it, splitting it the way ``zarr.create_array`` takes it, a
variable's default chain, the chains chosen from the codec menu (``menu_chains``, issue 26), and
decisions attached to an opened array's ``conditional`` codecs."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import zarr

from zopt.codecs.conditional import conditional_codecs_in, with_decision_in
from zopt.errors import OptionError
from zopt.io.sources import SourceVariable
from zopt.planning.menu import default_chain

if TYPE_CHECKING:
    import numpy.typing as npt
    from zarr.core.dtype.common import DTypeJSON

    from zopt.codecs.decisions import DecisionLike
    from zopt.io.packing import Repack
    from zopt.planning.optimizer import MenuChoice, MenuOptions, TrialRun
    from zopt.planning.plan import Plan

__all__ = ["DEFAULT_CHAIN", "chains_to_check", "little_endian_bytes", "menu_chains", "parse_chain", "sized_chain", "split_chain", "split_for",
           "with_checksum", "with_decision"]

#: the default target chain for types of 2 bytes and more (``zopt.planning.menu.default_chain`` gives
#: each data type's): raw bytes, then shuffle+zstd where they make the chunk smaller
DEFAULT_CHAIN: list[dict[str, Any]] = [
    {"name": "bytes", "configuration": {"endian": "little"}},
    {
        "name": "conditional",
        "configuration": {"codecs": [{"name": "shuffle"}, {"name": "zstd", "configuration": {"level": 3}}]},
    },
]
def parse_chain(chain: Sequence[dict[str, Any]] | str | None) -> list[dict[str, Any]]:
    """The target codec chain as a list of codec JSON objects (a JSON string is parsed).

    Raises ValueError naming ``codecs`` if it is not a list of codec objects.
    """
    if chain is None:
        default: list[dict[str, Any]] = json.loads(json.dumps(DEFAULT_CHAIN))  # a deep copy
        return default
    if isinstance(chain, str):
        try:
            chain = json.loads(chain)
        except json.JSONDecodeError as exc:
            raise OptionError("codecs", f"not valid JSON: {exc}") from exc
    if not isinstance(chain, list) or not all(isinstance(c, dict) and "name" in c for c in chain):
        raise OptionError("codecs",
            "expected a JSON list of codec objects such as "
            '[{"name": "bytes"}, {"name": "conditional", "configuration": {"codecs": [...]}}]'
        )
    return chain


def little_endian_bytes(codec: dict[str, Any]) -> dict[str, Any]:
    """A ``bytes`` codec's JSON given without ``endian`` made little-endian (see ``split_chain``);
    any other codec's JSON as it is."""
    if codec.get("name") == "bytes" and not (codec.get("configuration") or {}).get("endian"):
        return {"name": "bytes", "configuration": {**(codec.get("configuration") or {}), "endian": "little"}}
    return codec


def split_chain(chain: list[dict[str, Any]]) -> dict[str, Any]:
    """Codec objects for ``filters``/``serializer``/``compressors`` from a JSON chain.

    A ``bytes`` codec given without ``endian`` is written little-endian, as zarr's default
    chain is: zarr 3.1 would take the machine's order and 3.4 refuses it for multi-byte types,
    so the same command gives the same store on every zarr (zarr drops ``endian`` again for
    1-byte types). Raises ValueError naming ``codecs[i]``.
    """
    from zarr.abc.codec import ArrayArrayCodec, ArrayBytesCodec, BytesBytesCodec
    from zarr.registry import get_codec_class

    from zopt.compat.zarr_compat import resolve_codec

    filters, serializer, compressors = [], None, []
    for i, c in enumerate(chain):
        try:
            cls = get_codec_class(c["name"])
        except (KeyError, ValueError):  # unknown: resolve_codec names it below
            cls = None
        if serializer is None and isinstance(cls, type) and issubclass(cls, BytesBytesCodec):
            raise OptionError("codecs", f"the chain needs an array→bytes codec such as {{\"name\": \"bytes\"}} first; "
                             f"codecs[{i}] {c['name']!r} is a bytes→bytes codec, which comes after it")
        codec = resolve_codec(little_endian_bytes(c), where=f"codecs[{i}]")
        if isinstance(codec, ArrayArrayCodec):
            filters.append(codec)
        elif isinstance(codec, ArrayBytesCodec):
            if serializer is not None:
                raise OptionError("codecs", "the chain has more than one array→bytes codec")
            serializer = codec
        elif isinstance(codec, BytesBytesCodec):
            compressors.append(codec)
    if serializer is None:
        raise OptionError("codecs", "the chain needs an array→bytes codec such as 'bytes'")
    return {"filters": filters or None, "serializer": serializer, "compressors": compressors or None}


def with_checksum(split: dict[str, Any]) -> dict[str, Any]:
    """``split`` with zarr's ``crc32c`` codec appended to the bytes→bytes codecs (unless last)."""
    from zarr.codecs import Crc32cCodec

    compressors = list(split["compressors"] or [])
    if not (compressors and isinstance(compressors[-1], Crc32cCodec)):
        compressors.append(Crc32cCodec())
    return {**split, "compressors": compressors}


def with_decision(array: zarr.Array[Any], decision: DecisionLike, trial_encode: bool | None = None) -> zarr.Array[Any]:
    """The same array, with ``decision`` attached to all its ``conditional`` codecs.

    Use this to write with a decision into an array opened from a store (decisions are runtime
    objects and are not stored). Raises ValueError if the array has no conditional codec.
    """
    from dataclasses import replace

    from zarr.core.array import AsyncArray
    from zarr.core.metadata import ArrayV3Metadata

    meta = array.metadata
    if not isinstance(meta, ArrayV3Metadata) or not conditional_codecs_in(meta.codecs):
        raise ValueError(f"array {array.path!r} has no conditional codec to attach a decision to")
    new_meta = replace(meta, codecs=with_decision_in(meta.codecs, decision, trial_encode))
    aa = array._async_array
    return zarr.Array(AsyncArray(metadata=new_meta, store_path=aa.store_path, config=aa.config))


def _itemsize(data_type: DTypeJSON) -> int | None:
    """Bytes per element of a ``cast_value`` target (a Zarr data type's JSON: its name, or an
    object for types with a configuration), None if unknown."""
    if isinstance(data_type, str):  # numpy's names first (numpy would misread a JSON object)
        try:
            return np.dtype(data_type).itemsize
        except TypeError:
            pass
    try:
        from zopt.dtypes.numeric import zarr_dtype

        return int(zarr_dtype(data_type).to_native_dtype().itemsize)
    except (TypeError, ValueError, KeyError, AttributeError):
        return None


def sized_chain(chain: list[dict[str, Any]], dtype: npt.DTypeLike) -> list[dict[str, Any]]:
    """``chain`` (codec JSON) for an array of ``dtype``, with every ``shuffle`` (inside
    ``conditional`` too) that names no ``element_size`` and every ``blosc`` that names no
    ``typesize`` given the item size of what it receives, where a ``cast_value`` before it changed
    the data type. zarr sizes them from the array's data type, whatever comes before: issue 35
    found files packed differently (float64 re-expressed as int16 codes) written with a shuffle of
    element size 8 over 2-byte codes. Other chains are returned unchanged."""
    itemsize = None  # None: the array's own data type, which zarr gives them

    def sized(codecs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        nonlocal itemsize
        out = []
        for c in codecs:
            conf = dict(c.get("configuration") or {})
            name = c.get("name")
            if name == "cast_value" and "data_type" in conf:
                itemsize = _itemsize(conf["data_type"])
            elif itemsize is not None and name == "shuffle" and conf.get("element_size") is None:
                c = {**c, "configuration": {**conf, "element_size": itemsize}}
            elif itemsize is not None and name == "blosc" and conf.get("typesize") is None:
                c = {**c, "configuration": {**conf, "typesize": itemsize}}
            elif name == "conditional" and isinstance(conf.get("codecs"), list):
                c = {**c, "configuration": {**conf, "codecs": sized(conf["codecs"])}}
            out.append(c)
        return out

    return sized([dict(c) for c in chain])


def split_for(var: SourceVariable, codecs: object, split: dict[str, Any]) -> dict[str, Any]:
    """The chain of one variable: a given chain (``codecs`` not None: ``split`` is it) for every
    variable, else ``zopt.planning.menu``'s default for its data type (issue 19: no shuffle for 1-byte types, where it is a no-op, and zstd 10)."""
    if codecs is not None:
        return split
    return split_chain(default_chain(var.dtype))


def menu_chains(src: str, todo: Mapping[str, SourceVariable], layouts: Mapping[str, tuple[tuple[int, ...], Any]],
                plan: Plan | None, options: MenuOptions | None, *, run: TrialRun,
                partial: str | os.PathLike[str] | None = None,
                repacks: Mapping[str, Repack] | None = None) -> dict[str, MenuChoice]:
    """``{name: zopt.planning.optimizer.MenuChoice}`` of the variables ``todo`` (numeric, not lossy,
    without a chain given: the caller's choice) whose chain the menu chooses (issue 26): with a
    plan, the chains it recorded (no trials); a resumed job (``partial``: its store) keeps its
    first run's chains; else by trial tasks run as ``run`` says
    (``zopt.planning.optimizer.choose_chains``, ``options``: the menu, budget, readers, and
    whether an explicit decision keeps the menu to candidates with a mask and ``fixed-slot``
    to chains with a size bound). ``options`` None: no menu (a chain is given), nothing chosen.
    ``repacks``: ``{name: zopt.io.packing.Repack}`` of files packed differently: the menu of the
    integers, each chain after the re-expression's two codecs (issue 35: the menu chose on the
    floats and its choice was not written). Raises ValueError naming ``menu`` or ``readers``."""
    from zopt.planning.optimizer import DEFAULT_BUDGET, MenuChoice, chains_in_store, choose_chains

    repacks = {n: r for n, r in (repacks or {}).items() if n in todo}
    if plan is not None:  # the chains a plan chose (zopt plan create --menu), no trials
        return {n: MenuChoice(name=str((ap.choice or {}).get("candidate", "plan")), chain=ap.chain, budget=DEFAULT_BUDGET)
                for n in todo if n not in repacks and (ap := plan.arrays.get(n)) is not None and ap.chain is not None}
    if options is None or not todo:
        return {}
    if isinstance(partial, str | os.PathLike):
        return {n: MenuChoice(name="resumed", chain=c, budget=options.budget)
                for n, c in chains_in_store(os.fspath(partial), list(todo)).items()}
    prefixes = {n: (r.filters(), np.dtype(r.int_dtype)) for n, r in repacks.items()}
    return choose_chains(src, todo, layouts, options, scheduler=run.scheduler, job_id=run.job_id, prefixes=prefixes)


class _ChainOwner(Protocol):
    """A variable with its own chain (``zopt.lossy.prepare.LossyVariable``: its codecs before ``base``)."""

    def chain(self, base: list[dict[str, Any]]) -> list[dict[str, Any]]: ...


def chains_to_check(names: list[str], chain: list[dict[str, Any]], lossy_vars: Mapping[str, _ChainOwner],
                    codecs: object, plan: Plan | None) -> dict[str, list[dict[str, Any]]]:
    """``{name: chain}`` that ``--readers`` must be able to read before anything is written: a
    lossy variable's own chain (``lossy_vars``), a given chain (``codecs`` not None), or the chain a plan records (its
    ``classic`` default when it records none); variables whose chain the menu chooses are left
    out (``readers`` narrows the menu instead, ``zopt.planning.candidates.menu_for``)."""
    out = {}
    for n in names:
        if n in lossy_vars:
            out[n] = lossy_vars[n].chain(chain)
        elif codecs is not None:
            out[n] = chain
        elif plan is not None:
            ap = plan.arrays.get(n)
            out[n] = ap.chain if ap is not None and ap.chain is not None else chain
    return out

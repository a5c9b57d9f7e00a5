"""Plans: a ``conditional`` bitmask per chunk over a chunk grid, saved, versionable, applied.

A ``Plan`` holds one ``ArrayPlan`` per array: the mask grid (uint8/16/32/64, wide enough for
``header_bits``), the wrapped codec list and ``header_bits`` it refers to, and the identity of
the source it was made for (array path, shape, chunk shape, dtype and a content fingerprint:
the crc32c of every chunk's values — or, when the analysis read only sample windows
(``zopt.store.raw_read``), of those windows of every fill-padded chunk — combined with BLAKE2b); the plan also records the policy
and its parameters, the zopt version and the creation time (UTC, ISO 8601). A plan may also hold,
beside the masks, a grid of mantissa bits to keep per chunk (``keepbits``, ``zopt.lossy``; its
masks are then 0 over an empty codec list). ``Plan.save``
writes a small Zarr v3 group (one mask array per source array, metadata in attributes), so a
plan can be versioned next to the data; ``Plan.load`` reads it back.

Policies turn an analysis (``zopt.planning.analysis``) into masks, per chunk:

=========================  ==========================================================
``compress_if_smaller``    the runtime heuristic on the measured sizes: a length-changing
                           codec is applied when it makes the chunk smaller than without
                           it; a length-preserving one (shuffle) when the best completion
                           with it is smaller than the best without it
``min_gain`` (``gain``)    the smallest mask, but only if it saves at least ``gain`` of the
                           raw size (default 0.125, as ZFS requires 12.5 %); else mask 0
``smallest``               the smallest measured mask (ties: the lower mask)
``fastest_within``         the mask fastest to decode whose size is within ``within``
(``within``)               (default 0.05) of the smallest
a function ``f(row)``      ``row``: dict of the analysis variables of one chunk (numpy
                           scalars, per-mask arrays); returns the mask
=========================  ==========================================================

Chunks equal to the fill value, and early-out chunks (entropy above the threshold), get mask 0.

Applying: ``Plan.as_decision(name)`` (or an ``ArrayPlan``) is a ``zopt.codecs.decisions.MaskGrid``;
attach it to an array's ``conditional`` codec for a plain zarr write (the spec's
"precomputed optimization plans", Example 3) or pass ``--plan`` to ``zopt recompress``.
A plan made from an analysis with a codec menu (``analyze_array(menu=…)``, ``zopt plan create
--menu``) also records per array the whole chain chosen (``ArrayPlan.chain``) and the choice with
its trial sizes and times (``ArrayPlan.choice``); ``recompress --plan`` writes that chain, with
the masks when it has a ``conditional`` codec (they were measured for its wrapped codecs), with
no trial encoding. ``ArrayPlan.check`` raises ``PlanMismatchError`` saying what differs (grid, codec list,
header_bits, shape, dtype, or — chunk by chunk, while writing — the content).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import xarray as xr
import zarr

from zopt.codecs.decisions import MaskGrid
from zopt.errors import OptionError, ZoptError

__all__ = ["POLICIES", "ArrayPlan", "Plan", "PlanMismatchError", "check_policy", "make_plan", "policy_masks"]


class PlanMismatchError(ZoptError, ValueError):
    """A plan does not fit the array it is applied to; the message says what differs."""


def _mask_dtype(header_bits: int) -> np.dtype:
    for bits, dt in ((8, np.uint8), (16, np.uint16), (32, np.uint32), (64, np.uint64)):
        if header_bits <= bits:
            return np.dtype(dt)
    raise OptionError("header_bits", f"{header_bits} > 64 is not supported for plans")


def fingerprint(digests: np.ndarray, digest_windows: tuple[int, ...] | None = None) -> str:
    """Content fingerprint of an array from its per-chunk crc32c grid: BLAKE2b-128 hex.

    digest_windows : ``ArrayPlan.digest_windows`` when the digests cover sample windows (hashed in,
    so a windowed fingerprint never equals a whole-chunk one); None for whole chunks.
    """
    h = hashlib.blake2b(digest_size=16)
    h.update(np.asarray(digests.shape, dtype="<u8").tobytes())
    h.update(np.ascontiguousarray(digests, dtype="<u4").tobytes())
    if digest_windows is not None:
        h.update(b"windows" + np.asarray(digest_windows, dtype="<u8").tobytes())
    return h.hexdigest()


@dataclass
class ArrayPlan:
    """The plan of one array. masks: integer grid over the analysed chunk grid."""

    name: str
    masks: np.ndarray
    codecs: list[dict[str, Any]]
    header_bits: int
    shape: tuple[int, ...]
    chunk_shape: tuple[int, ...]
    dtype: str
    digests: np.ndarray  # crc32c per chunk (uint32), the content the plan was made for
    stats: dict[str, float] = field(default_factory=dict)
    ratios: np.ndarray | None = None  # estimated raw/stored per chunk (float32; NaN: fill chunks)
    # when the digests cover the sample windows of each fill-padded chunk: (fraction, windows,
    # min_window) for spread windows, (fraction, windows) for the ends windows of zopt 0.1's plans
    digest_windows: tuple[int, ...] | None = None
    # mantissa bits kept per chunk (uint8; zopt.lossy: bitround needs no decode step)
    keepbits: np.ndarray | None = None
    # the whole target chain chosen from the codec menu (zopt.planning.optimizer), and the choice with its
    # trials (MenuChoice.to_json()); None for plans made without a menu
    chain: list[dict[str, Any]] | None = None
    choice: dict[str, Any] | None = None
    # the array's dimension names (axis labels of its picture); None in plans saved without them (zopt 0.1)
    dims: tuple[str, ...] | None = None

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.digests, self.digest_windows)

    def content_digest(self, values: np.ndarray, fill: object) -> int:
        """The digest this plan keeps for a chunk whose values (its part inside the array,
        any shape up to ``chunk_shape``) are ``values``; ``fill``: the fill value, for padding."""
        from zopt.planning.chunk_stats import chunk_digest

        if self.digest_windows is None:
            return chunk_digest(values)
        from zopt.codecs.grid import padded
        from zopt.store.raw_read import sampled_bytes

        values = np.asarray(values)
        chunk = padded(values, tuple(self.chunk_shape), np.asarray(fill, dtype=values.dtype))
        raw = np.ascontiguousarray(chunk).view(np.uint8).ravel()
        fraction, windows, *spread = self.digest_windows  # (fraction, windows): a plan of zopt 0.1, ends windows
        return chunk_digest(sampled_bytes(raw, fraction, windows, spread[0] if spread else None))

    def validate(self) -> None:
        """Raise ValueError when a mask sets bits beyond the codec list (reserved bits)."""
        n = len(self.codecs)
        if self.masks.size and int(self.masks.max()) >> n:
            bad = tuple(int(i) for i in np.unravel_index(int(np.argmax(self.masks >> n)), self.masks.shape))
            raise ValueError(
                f"plan {self.name!r}: mask {int(self.masks[bad]):#b} of chunk {bad} sets reserved bits "
                f"(only the {n} wrapped codecs' bits may be set)"
            )

    def as_decision(self) -> MaskGrid:
        self.validate()
        return MaskGrid(self.masks)

    def check(self, shape: tuple[int, ...], chunk_shape: tuple[int, ...], codecs: list[dict[str, Any]],
              header_bits: int, dtype: str | None = None) -> None:
        """Raise PlanMismatchError listing every difference with the target array."""
        diffs = []
        if tuple(shape) != tuple(self.shape):
            diffs.append(f"shape {tuple(shape)} vs planned {tuple(self.shape)}")
        if tuple(chunk_shape) != tuple(self.chunk_shape):
            diffs.append(f"chunk grid: chunk shape {tuple(chunk_shape)} vs planned {tuple(self.chunk_shape)}")
        if _norm(codecs) != _norm(self.codecs):
            diffs.append(f"codec list {json.dumps(codecs)} vs planned {json.dumps(self.codecs)}")
        if header_bits != self.header_bits:
            diffs.append(f"header_bits {header_bits} vs planned {self.header_bits}")
        if dtype is not None and str(dtype) != self.dtype:
            diffs.append(f"dtype {dtype} vs planned {self.dtype}")
        if diffs:
            raise PlanMismatchError(f"plan {self.name!r} does not fit this array: " + "; ".join(diffs))

    def check_chunk(self, index: tuple[int, ...], values: np.ndarray, fill: object) -> None:
        """Raise PlanMismatchError when a chunk's content differs from the planned content.

        values : the chunk's values inside the array; fill : the array's fill value. Plans made
        from window reads compare the sample windows only (a change elsewhere goes unnoticed; the
        plan then only chooses a less suitable mask, the data written is still exact).
        """
        digest = self.content_digest(values, fill)
        if int(self.digests[index]) != int(digest):
            raise PlanMismatchError(
                f"plan {self.name!r} was made for other data: chunk {index} has crc32c {digest:#010x}, "
                f"the plan's source had {int(self.digests[index]):#010x} (fingerprint {self.fingerprint})"
            )


def _norm(codecs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Codec JSON without defaults that zarr fills in (so {"name": "shuffle"} matches after evolve)."""
    from zopt.compat.zarr_compat import resolve_codec

    out = []
    for c in codecs:
        try:
            out.append(resolve_codec(c).to_dict())
        except ValueError:  # unknown codec: compare as written
            out.append(c)
    for c in out:
        cfg = c.get("configuration")
        if isinstance(cfg, dict):
            c["configuration"] = {k: v for k, v in cfg.items() if v is not None and k != "element_size"}
            if not c["configuration"]:
                c.pop("configuration")
    return out


@dataclass
class Plan:
    """Masks for one or more arrays plus how and when they were made."""

    arrays: dict[str, ArrayPlan]
    policy: str
    params: dict[str, Any] = field(default_factory=dict)
    zopt_version: str = ""
    created: str = ""

    def __getitem__(self, name: str) -> ArrayPlan:
        try:
            return self.arrays[name]
        except KeyError:
            raise KeyError(f"the plan has no array {name!r}; it has {sorted(self.arrays)}") from None

    def as_decision(self) -> MaskGrid:
        """The ``MaskGrid`` of a single-array plan (use ``plan[name].as_decision()`` otherwise)."""
        if len(self.arrays) != 1:
            raise OptionError("decision", f"the plan covers {sorted(self.arrays)}; use plan[name]")
        return next(iter(self.arrays.values())).as_decision()

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the plan as a Zarr v3 group at ``path`` (overwriting)."""
        root = zarr.open_group(os.fspath(path), mode="w", zarr_format=3)
        root.attrs.update({"zopt_plan": 1, "policy": self.policy, "params": self.params,
                           "zopt_version": self.zopt_version, "created": self.created})
        for name, ap in self.arrays.items():
            key = name or "root"
            g = root.create_group(key)
            g.attrs.update({"array": name, "codecs": ap.codecs, "header_bits": ap.header_bits, "shape": list(ap.shape),
                            "chunk_shape": list(ap.chunk_shape), "dtype": ap.dtype, "fingerprint": ap.fingerprint,
                            "digest_windows": None if ap.digest_windows is None else list(ap.digest_windows),
                            "stats": ap.stats, **({"dims": list(ap.dims)} if ap.dims is not None else {}),
                            **({"chain": ap.chain, "menu_choice": ap.choice} if ap.chain is not None else {})})
            # a 0-d grid (scalar array) gets zarr's automatic chunks, which are its shape ()
            g.create_array("masks", data=ap.masks, chunks=ap.masks.shape or "auto")
            g.create_array("digests", data=ap.digests.astype(np.uint32), chunks=ap.digests.shape or "auto")
            if ap.ratios is not None:
                g.create_array("ratios", data=ap.ratios.astype(np.float32), chunks=ap.ratios.shape or "auto")
            if ap.keepbits is not None:
                g.create_array("keepbits", data=ap.keepbits.astype(np.uint8), chunks=ap.keepbits.shape or "auto")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Plan:
        """Read a plan written by ``save``. Raises ValueError if ``path`` is not a zopt plan."""
        try:
            root = zarr.open_group(os.fspath(path), mode="r")
        except Exception as exc:
            raise OptionError("plan", f"cannot open {os.fspath(path)!r} as a Zarr group: {exc}") from exc
        if root.attrs.get("zopt_plan") != 1:
            raise OptionError("plan", f"{os.fspath(path)!r} is not a zopt plan (no 'zopt_plan' attribute)")
        arrays = {}
        for key, g in _plan_groups(root):
            a: dict[str, Any] = g.attrs.asdict()  # the JSON written by ``save``
            ap = ArrayPlan(
                name=a["array"], masks=_grid(g, "masks"), codecs=list(a["codecs"]), header_bits=int(a["header_bits"]),
                shape=tuple(a["shape"]), chunk_shape=tuple(a["chunk_shape"]), dtype=a["dtype"],
                digests=_grid(g, "digests"), stats=dict(a.get("stats", {})),
                ratios=_grid(g, "ratios") if "ratios" in g else None,
                keepbits=_grid(g, "keepbits") if "keepbits" in g else None,
                digest_windows=None if a.get("digest_windows") is None else tuple(int(x) for x in a["digest_windows"]),
                chain=list(a["chain"]) if a.get("chain") is not None else None,
                choice=dict(a["menu_choice"]) if a.get("menu_choice") is not None else None,
                dims=tuple(str(d) for d in a["dims"]) if a.get("dims") is not None else None,
            )
            if ap.fingerprint != a["fingerprint"]:
                raise OptionError("plan", f"{key!r}: stored fingerprint does not match its digests (corrupt plan)")
            ap.validate()
            arrays[ap.name] = ap
        attrs: dict[str, Any] = root.attrs.asdict()
        return cls(arrays=arrays, policy=attrs["policy"], params=dict(attrs.get("params", {})),
                   zopt_version=attrs.get("zopt_version", ""), created=attrs.get("created", ""))


def _grid(group: zarr.Group, name: str) -> np.ndarray:
    """The whole array ``name`` of a saved array plan (a grid over its chunks)."""
    arr = group[name]
    if not isinstance(arr, zarr.Array):
        raise OptionError("plan", f"{group.path}/{name} is a group, not an array (corrupt plan)")
    return np.asarray(arr[...])


def _plan_groups(group: zarr.Group, prefix: str = "") -> Iterator[tuple[str, zarr.Group]]:
    """``(key, group)`` of every array plan under ``group``: an array of a child group (``child/b``)
    is saved under the intermediate group ``child``, which holds no plan of its own."""
    for key, g in group.groups():
        if "array" in g.attrs:
            yield prefix + key, g
        else:
            yield from _plan_groups(g, f"{prefix}{key}/")


# -- policies ---------------------------------------------------------------------------------------


def _sizes(ds: xr.Dataset) -> np.ndarray:
    """(n_chunks, n_masks) float sizes; NaN = not measured (early out)."""
    sizes: np.ndarray = ds["encoded_bytes"].values.reshape(-1, ds.sizes["mask"])
    return sizes


def _smallest(sizes: np.ndarray) -> np.ndarray:
    filled = np.where(np.isnan(sizes), np.inf, sizes)
    best: np.ndarray = np.argmin(filled, axis=1)  # argmin takes the first, i.e. the lower mask, on ties
    return best


def _compress_if_smaller(sizes: np.ndarray, n_codecs: int) -> np.ndarray:
    """The masks ``decisions.CompressIfSmaller`` picks, from every mask's trial size.

    sizes : float ``(n_chunks, 2**n_codecs)`` stored bytes per mask (NaN: not measured).
    Mirrors the runtime decision codec by codec: a length-changing codec is applied when it
    makes the chunk smaller given the codecs already chosen; a length-preserving filter (e.g.
    shuffle) is applied when the rest of the chain, decided the same way, ends smaller with it
    than without it. ``tests/planning/test_plan.py`` checks both give the same mask on the same sizes.
    """
    filled = np.where(np.isnan(sizes), np.inf, sizes)
    rows = np.arange(filled.shape[0])

    def decide(mask: np.ndarray, i: int) -> np.ndarray:
        for j in range(i, n_codecs):
            bit = 1 << j
            with_bit, without = filled[rows, mask | bit], filled[rows, mask]
            greedy = np.where(with_bit < without, mask | bit, mask)
            preserving = with_bit == without
            if preserving.any():
                on, off = decide(mask | bit, j + 1), decide(mask, j + 1)
                branch = np.where(filled[rows, on] < filled[rows, off], on, off)
                return np.where(preserving, branch, decide(greedy, j + 1))
            mask = greedy
        return mask

    return decide(np.zeros(filled.shape[0], dtype=np.int64), 0)


def _min_gain(sizes: np.ndarray, raw: np.ndarray, gain: float) -> np.ndarray:
    best = _smallest(sizes)
    best_size = np.take_along_axis(np.where(np.isnan(sizes), np.inf, sizes), best[:, None], 1)[:, 0]
    return np.where(best_size <= raw * (1 - gain), best, 0)


def _fastest_within(sizes: np.ndarray, decode: np.ndarray, within: float) -> np.ndarray:
    filled = np.where(np.isnan(sizes), np.inf, sizes)
    limit = filled.min(axis=1, keepdims=True) * (1 + within)
    cost = np.where(filled <= limit, np.nan_to_num(decode, nan=np.inf), np.inf)
    fastest: np.ndarray = np.argmin(cost, axis=1)
    return fastest


#: a policy's name (``POLICIES``) or a function of one chunk's analysis row returning its mask
PolicyLike = str | Callable[[dict[str, Any]], int]

POLICIES: dict[str, dict[str, Any]] = {
    "compress_if_smaller": {},
    "min_gain": {"gain": 0.125},
    "smallest": {},
    "fastest_within": {"within": 0.05},
}


def check_policy(policy: PolicyLike, params: Mapping[str, float] | None = None) -> None:
    """Refuse an unknown ``policy`` (a name of ``POLICIES`` or a function) or a parameter it does
    not take: ValueError naming ``policy`` or ``params`` and the allowed values. Reads no data, so
    a job checks it before analysing anything."""
    if callable(policy):
        return
    if policy not in POLICIES:
        raise OptionError("policy", f"{policy!r} is not one of {sorted(POLICIES)} (or a function of an analysis row)")
    unknown = set(params or {}) - set(POLICIES[policy])
    if unknown:
        raise OptionError("params", label=f"policy {policy!r}", message=f"unknown parameters {sorted(unknown)}; "
                          f"allowed {sorted(POLICIES[policy])}")


def policy_masks(ds: xr.Dataset, policy: PolicyLike = "compress_if_smaller",
                 **params: float) -> tuple[np.ndarray, dict[str, Any]]:
    """Masks over the analysis grid for ``policy``; returns ``(masks, parameters used)``.

    Raises ValueError naming ``policy`` and the allowed values, or an unknown parameter.
    """
    n_codecs = len(json.loads(ds.attrs["codecs"]))
    grid = tuple(ds.sizes[d] for d in ds["raw_bytes"].dims)
    sizes = _sizes(ds)
    raw = ds["raw_bytes"].values.reshape(-1).astype(np.float64)
    if callable(policy):
        flat = [ds.isel(dict(zip(ds["raw_bytes"].dims, np.unravel_index(k, grid), strict=True))) for k in range(raw.size)]
        masks = np.array([int(policy({str(v): row[v].values for v in row.data_vars})) for row in flat], dtype=np.int64)
        used: dict[str, Any] = {"function": getattr(policy, "__qualname__", repr(policy))}
    else:
        check_policy(policy, params)
        used = {**POLICIES[policy], **params}
        if policy == "compress_if_smaller":
            masks = _compress_if_smaller(sizes, n_codecs)
        elif policy == "smallest":
            masks = _smallest(sizes)
        elif policy == "min_gain":
            masks = _min_gain(sizes, raw, float(used["gain"]))
        else:
            if not int(ds.attrs.get("decode_times", 1)):
                raise ValueError(
                    "policy 'fastest_within' needs decode times, and this analysis has none: analyse with "
                    "decode_times=True (CLI: --decode-times; zopt plan --policy fastest_within does it itself)"
                )
            decode = ds["decode_seconds"].values.reshape(sizes.shape)
            masks = _fastest_within(sizes, decode, float(used["within"]))
    skip = (ds["is_fill"].values | ds["early_out"].values).reshape(-1)
    masks = np.where(skip, 0, masks)
    return masks.reshape(grid).astype(_mask_dtype(int(ds.attrs["header_bits"]))), used


def _digest_windows(ds: xr.Dataset) -> tuple[int, ...] | None:
    """``zopt.planning.sampling.window_spec`` of an analysis whose digests cover sample windows, else
    None; an analysis saved by zopt 0.1 (no ``placement`` attribute) sampled the chunk's ends."""
    from zopt.planning.sampling import window_spec

    if ds.attrs.get("digest_scope", "chunk") != "windows":
        return None
    spread = int(ds.attrs.get("min_window", -1))
    return window_spec(max(1, round(1 / float(ds.attrs["sample"]))), int(ds.attrs["windows"]),
                       str(ds.attrs.get("placement", "ends")), *((spread,) if spread > 0 else ()))


def _menu_fields(ds: xr.Dataset) -> dict[str, Any]:
    """``chain`` and ``choice`` of an analysis made with a codec menu (``menu_choice`` attribute)."""
    text = ds.attrs.get("menu_choice")
    if not text:
        return {}
    choice = json.loads(text)
    return {"chain": list(choice["chain"]), "choice": choice}


def make_plan(analyses: dict[str, xr.Dataset] | xr.Dataset, policy: PolicyLike = "compress_if_smaller",
              **params: float) -> Plan:
    """A ``Plan`` from analyses (``zopt.planning.analysis.analyze``) with ``policy`` (see module docstring)."""
    from zopt._version import __version__

    if isinstance(analyses, xr.Dataset):
        analyses = {analyses.attrs["array"]: analyses}
    arrays = {}
    used: dict[str, Any] = {}
    for name, ds in analyses.items():
        masks, used = policy_masks(ds, policy, **params)
        sizes = _sizes(ds)
        chosen = np.take_along_axis(np.nan_to_num(sizes, nan=0), masks.reshape(-1, 1).astype(np.int64), 1)[:, 0]
        stored = ~ds["is_fill"].values.reshape(-1)
        menu = _menu_fields(ds)
        if menu and not any(c["name"] == "conditional" for c in menu["chain"]):
            # a chain without masks: every chunk's estimate is the chain's trial ratio
            masks = np.zeros_like(masks)
            trial = menu["choice"]["trials"].get(menu["choice"]["candidate"])
            fraction = trial[0] / max(menu["choice"]["raw_bytes"], 1) if trial else 1.0
            chosen = ds["raw_bytes"].values.reshape(-1) * fraction
        arrays[name] = ArrayPlan(
            name=name, masks=masks, codecs=json.loads(ds.attrs["codecs"]), header_bits=int(ds.attrs["header_bits"]),
            shape=tuple(ds.attrs["shape"]), chunk_shape=tuple(ds.attrs["chunk_shape"]), dtype=ds.attrs["dtype"],
            digests=ds["digest"].values.astype(np.uint32), digest_windows=_digest_windows(ds),
            stats={"raw_bytes": float(ds["raw_bytes"].values.reshape(-1)[stored].sum()),
                   "estimated_bytes": float(chosen[stored].sum())},
            ratios=np.where(stored, ds["raw_bytes"].values.reshape(-1) / np.maximum(chosen, 1), np.nan)
            .reshape(masks.shape).astype(np.float32),
            dims=tuple(str(d).removeprefix("chunk_") for d in ds["raw_bytes"].dims),
            **menu,
        )
    name = policy if isinstance(policy, str) else "function"
    return Plan(arrays=arrays, policy=name, params=used, zopt_version=__version__,
                created=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"))

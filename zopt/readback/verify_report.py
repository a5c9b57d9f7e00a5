"""What ``zopt verify`` found (``zopt.readback.verify``): one ``ArrayCheck`` per array, gathered in a
``VerifyReport`` with its verdict and one-line summaries; ``VerifyError`` for ``recompress --verify``."""

from __future__ import annotations

from dataclasses import dataclass, field

from zopt.errors import ZoptError

__all__ = ["ArrayCheck", "ChunkDifference", "VariableCheck", "VerifyError", "VerifyReport"]


class VerifyError(ZoptError, ValueError):
    """``recompress --verify`` found a difference; the message names the arrays (one line)."""


@dataclass
class ChunkDifference:
    """One inner chunk whose values differ: grid coordinates and element region in the destination's
    chunk grid, differing elements, and the largest absolute difference over pairs of finite
    numbers (array units; None when no such pair differs, e.g. a NaN payload)."""

    coords: tuple[int, ...]
    region: tuple[tuple[int, int], ...]
    elements: int
    max_abs_diff: float | None

    def __str__(self) -> str:
        where = ", ".join(f"{a}:{b}" for a, b in self.region)
        diff = "" if self.max_abs_diff is None else f", max |diff| {self.max_abs_diff:.6g}"
        return f"chunk {'.'.join(map(str, self.coords)) or '0'} [{where}]: {self.elements} element(s){diff}"


@dataclass
class ArrayCheck:
    """The comparison of one array. Errors in the array's units (relative: dimensionless).

    ``violations``: values beyond the bound, or (lossless) elements whose bits differ;
    ``metadata``: one text per metadata difference; ``problem``: the array could not be compared
    (absent from one store, shapes differ); ``differing_chunks`` of ``chunks`` inner chunks, the
    first few in ``first_differences`` (grid order)."""

    name: str
    kind: str = "lossless"  # "lossless", "abs", "rel", "keepbits", "re-expressed" (files packed differently)
    bound: str = ""
    elements: int = 0
    violations: int = 0
    special_mismatches: int = 0  # NaN, ±Infinity or sentinel positions not preserved (lossy)
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    keepbits: str = ""
    information_kept: float | None = None
    problem: str = ""
    metadata: list[str] = field(default_factory=list)
    chunks: int = 0
    differing_chunks: int = 0
    first_differences: list[ChunkDifference] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (not self.problem and not self.metadata and self.violations == 0 and self.special_mismatches == 0
                and self.differing_chunks == 0)

    def summary(self) -> str:
        """What differs, in one line ("" when ok)."""
        parts = [self.problem] if self.problem else []
        parts += self.metadata
        if self.differing_chunks:
            parts.append(f"{self.differing_chunks} of {self.chunks} chunks differ, first: "
                         + "; ".join(map(str, self.first_differences)))
        elif self.violations or self.special_mismatches:
            parts.append(f"{self.violations} value(s) beyond the bound, {self.special_mismatches} special value(s) moved")
        return "; ".join(parts)


VariableCheck = ArrayCheck  # the name zopt.readback.verify used


@dataclass
class VerifyReport:
    """Every array compared; ``ok`` when every check passes."""

    src: str
    dst: str
    checks: list[ArrayCheck] = field(default_factory=list)
    #: differences outside the arrays (``zopt.readback.verify_nodes``): group attributes, consolidated copy
    nodes: list[str] = field(default_factory=list)
    #: source arrays with broken metadata left out (``skip_broken``), not compared
    skipped: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks) and not self.nodes

    @property
    def failed(self) -> list[ArrayCheck]:
        return [c for c in self.checks if not c.ok]

    def failure_line(self) -> str:
        """One line: the verdict (``K of N arrays differ``), then each array that differs (breaks
        its bound) and how, and the other differences ("" when ok)."""
        bad = self.failed
        if not bad and not self.nodes:
            return ""
        arrays = "; ".join(f"{c.name or '(root array)'} ({c.summary()})" for c in bad)
        nodes = "; ".join(self.nodes)
        return f"verify: {self.verdict()}: " + "; ".join(x for x in (arrays, nodes) if x)

    def verdict(self) -> str:
        """The last line of ``zopt verify``: ``N arrays equal`` (lossy ones within their bound,
        re-expressed ones equal to the files' exact decimal values), or ``K of N differ``."""
        n, bad = len(self.checks), len(self.failed)
        arrays = f"array{'s' if n != 1 else ''}"
        others = f" and {len(self.nodes)} other difference(s) (groups, consolidated metadata)" if self.nodes else ""
        if bad or self.nodes:
            return f"{bad} of {n} {arrays} differ{'s' if n == 1 else ''}{others}"
        return f"{n} {arrays} equal" + self._kinds()

    def _kinds(self) -> str:
        lossy = sum(c.kind not in ("lossless", "re-expressed") for c in self.checks)
        again = sum(c.kind == "re-expressed" for c in self.checks)
        parts = ([f"{lossy} within their lossy bound"] if lossy else []) + (
            [f"{again} re-expressed: equal to the files' exact decimal values p·scale+offset, which CF float "
             "decoding (xarray's) may miss in the last bit"] if again else [])
        return f" ({'; '.join(parts)})" if parts else ""

    def success_line(self) -> str:
        plain = sum(c.kind == "lossless" for c in self.checks)
        values = "bit for bit" if plain == len(self.checks) else f"{plain} bit for bit{self._kinds()}"
        return f"verified {self.dst} against {self.src}: {len(self.checks)} array(s), metadata and values {values}"

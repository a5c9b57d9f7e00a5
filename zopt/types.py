"""The forms a user may give an option in (``…Like``), parsed once by ``RecompressJob.parse``.

Type aliases only, no code: the public entry points (``zopt.recompress``, ``zopt.xarray``, the
CLI) annotate their loose inputs with these, and the job holds the parsed, typed values (zarr's
``ArrayConfigLike`` → ``ArrayConfig`` pattern; numpy's ``ArrayLike``). A leaf module, importable
from every layer.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeAlias

__all__ = ["BudgetLike", "CodecJSON", "LossyLike", "MemoryLike", "NamesLike", "PathLike", "ShapeLike",
           "SourceLike"]

#: a path of the local file system, as text or ``os.PathLike``
PathLike: TypeAlias = "str | os.PathLike[str]"
#: one source (path or URL) or several (combined along ``concat_dim``)
SourceLike: TypeAlias = "str | os.PathLike[str] | Sequence[str | os.PathLike[str]]"
#: a chunk or shard shape: ``"y=32,x=32"``, ``"1,32,32"``, a shape, a mapping by dimension name
ShapeLike: TypeAlias = "str | Sequence[int] | Mapping[str, int] | None"
#: names given as a list or as one comma-separated string (``menu``, ``readers``, ``variables``)
NamesLike: TypeAlias = "str | Iterable[str] | None"
#: the menu's speed budget: a number > 0, or ``"inf"``/``"size"`` (size first); None: the default
BudgetLike: TypeAlias = "float | int | str | None"
#: bytes: an int, or text with a unit (``"2GiB"``)
MemoryLike: TypeAlias = "int | str | None"
#: lossy bounds: ``"VAR=SPEC"``, a list of them, or ``{VAR: SPEC}`` (``zopt.lossy.spec``)
LossyLike: TypeAlias = "str | Iterable[str] | Mapping[str, Any] | None"
#: one codec's JSON, as in ``zarr.json``: ``{"name": …, "configuration": {…}}``
CodecJSON: TypeAlias = "dict[str, Any]"

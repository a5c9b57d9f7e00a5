"""The ``complex_*`` data types of zarr-extensions: a real and an imaginary component.

In memory (numpy has no complex types of these widths, ml_dtypes has none at all):

- ``complex_float32`` and ``complex_float64`` are numpy ``complex64``/``complex128`` (aliases of
  zarr's ``complex64``/``complex128`` with zarr-extensions' names);
- every other ``complex_<component>`` is the structured dtype
  ``[("real", component), ("imag", component)]`` with the ml_dtypes (or numpy ``float16``)
  component type, e.g. ``complex_bfloat16`` → ``[("real", bfloat16), ("imag", bfloat16)]``.
  Build values with ``zopt.dtypes.complex.pack_complex(real, imag, dtype)``.

Such arrays are created by name (``dtype="complex_bfloat16"``): zarr cannot infer these types
from a numpy dtype, since ``complex64`` is zarr's own and a structured dtype is zarr's
``structured``.

Bytes (``bytes`` codec): each element is the real then the imaginary component, each as its
component type is stored (one byte per sub-byte component, in the configured endianness for
2-, 4- and 8-byte components). ``packbits`` packs ``b`` bits of the real then ``b`` bits of the
imaginary part. Fill value JSON: ``[re, im]``, each by the component's float rules (numbers,
``"NaN"``, ``"Infinity"``, ``"-Infinity"``, hex bit patterns).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Self, TypeGuard

import numpy as np
from zarr.core.dtype import Float16, Float32, Float64
from zarr.core.dtype.common import HasEndianness, HasItemSize
from zarr.core.dtype.wrapper import ZDType

from zopt.compat.zarr_compat import DataTypeValidationError
from zopt.dtypes import ml
from zopt.errors import OptionError

if TYPE_CHECKING:
    import numpy.typing as npt
    from zarr.core.common import JSON, ZarrFormat
    from zarr.core.dtype.common import DTypeJSON

__all__ = ["COMPLEX_DTYPES", "MLComplex", "pack_complex"]


class _CoreFloat:
    """The to_bits/from_bits/JSON interface of ``ml.MLFloat`` for numpy float16/32/64."""

    def __init__(self, zdtype: ZDType[Any, Any]) -> None:
        self.zdtype = zdtype
        self.native = zdtype.to_native_dtype().newbyteorder("=")
        self.bits = self.native.itemsize * 8
        self.item_size = self.native.itemsize
        self._uint = np.dtype(f"u{self.item_size}").type

    def to_native_dtype(self) -> np.dtype:
        return self.native

    def to_bits(self, values: np.ndarray) -> np.ndarray:
        v = np.asarray(values)
        return np.ascontiguousarray(v, dtype=self.native).view(self._uint).reshape(v.shape)

    def from_bits(self, bits: np.ndarray) -> np.ndarray:
        b = np.asarray(bits)
        return np.ascontiguousarray(b, dtype=self._uint).view(self.native).reshape(b.shape)

    def to_stored_bytes(self, values: np.ndarray) -> np.ndarray:
        return self.to_bits(values)

    def cast_scalar(self, data: object) -> Any:
        return self.zdtype.cast_scalar(data)

    def from_json_scalar(self, data: JSON, *, zarr_format: ZarrFormat) -> Any:
        return self.zdtype.from_json_scalar(data, zarr_format=zarr_format)

    def to_json_scalar(self, data: object, *, zarr_format: ZarrFormat) -> Any:
        return self.zdtype.to_json_scalar(data, zarr_format=zarr_format)


def _component(kind: str) -> Any:
    if kind in ("float16", "float32", "float64"):
        cores: dict[str, ZDType[Any, Any]] = {"float16": Float16(), "float32": Float32(), "float64": Float64()}
        return _CoreFloat(cores[kind])
    return ml.ML_DTYPES[kind]()


@dataclass(frozen=True, kw_only=True)
class MLComplex(ZDType[np.dtype, np.generic], HasItemSize):
    """Base class of the ``complex_*`` types; ``component_name`` names the component type."""

    component_name: ClassVar[str]
    dtype_cls = np.dtypes.VoidDType  # type: ignore[assignment]

    @property
    def component(self) -> Any:
        return _component(self.component_name)

    @property
    def numpy_complex(self) -> bool:
        return self.component_name in ("float32", "float64")

    # -- native dtype ------------------------------------------------------------------------
    @classmethod
    def _check_native_dtype(cls, dtype: np.dtype) -> TypeGuard[np.dtype]:
        return False  # never inferred from numpy: complex64 is zarr's, structured is zarr's

    @classmethod
    def from_native_dtype(cls, dtype: np.dtype) -> Self:
        if isinstance(dtype, np.dtype) and dtype == cls().to_native_dtype():
            return cls()
        raise DataTypeValidationError(f"Invalid data type {dtype!r} for {cls._zarr_v3_name}")

    def to_native_dtype(self) -> np.dtype:
        if self.numpy_complex:
            return np.dtype(np.complex64 if self.component_name == "float32" else np.complex128)
        comp = self.component.to_native_dtype()
        return np.dtype([("real", comp), ("imag", comp)])

    @property
    def item_size(self) -> int:
        return 2 * self.component.item_size

    # -- JSON ----------------------------------------------------------------------------------
    @classmethod
    def _check_json_v3(cls, data: DTypeJSON) -> bool:
        return data == cls._zarr_v3_name or (
            isinstance(data, dict) and data.get("name") == cls._zarr_v3_name and not data.get("configuration")
        )

    @classmethod
    def _from_json_v3(cls, data: DTypeJSON) -> Self:
        if cls._check_json_v3(data):
            return cls()
        raise DataTypeValidationError(f"Invalid JSON for data type {cls._zarr_v3_name}: {data!r}")

    @classmethod
    def _from_json_v2(cls, data: DTypeJSON) -> Self:
        raise DataTypeValidationError(f"{cls._zarr_v3_name} is a Zarr v3 extension data type")

    def to_json(self, zarr_format: Literal[2, 3]) -> Any:
        if zarr_format == 3:
            return self._zarr_v3_name
        raise OptionError("zarr_format", f"{self._zarr_v3_name} can only be stored in Zarr format 3")

    # -- components ------------------------------------------------------------------------------
    def components(self, values: np.ndarray) -> np.ndarray:
        """Component values, shape ``values.shape + (2,)`` (real, imaginary), component dtype."""
        v = np.asarray(values, dtype=self.to_native_dtype())
        if not v.flags.c_contiguous:  # (ascontiguousarray would turn 0-d into 1-d)
            v = v.copy(order="C")
        comp = self.component.to_native_dtype()
        return v.reshape(-1).view(comp).reshape(*v.shape, 2)

    def from_components(self, comps: np.ndarray) -> np.ndarray:
        """Inverse of ``components``: ``(..., 2)`` component values → values of shape ``...``."""
        c = np.asarray(comps, dtype=self.component.to_native_dtype())
        if not c.flags.c_contiguous:
            c = c.copy(order="C")
        return c.view(self.to_native_dtype()).reshape(c.shape[:-1])

    def packbits_layout(self) -> Any:
        from zopt.dtypes.components import ComponentLayout

        comp = self.component

        def to_uint(values: np.ndarray) -> np.ndarray:
            return comp.to_bits(self.components(values)).ravel()

        def from_uint(u: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
            bits = u.astype(comp._uint, copy=False).reshape(*shape, 2)
            return self.from_components(comp.from_bits(bits))

        return ComponentLayout(comp.bits, 2, False, to_uint, from_uint)

    # -- scalars -------------------------------------------------------------------------------------
    def _make(self, re: npt.ArrayLike, im: npt.ArrayLike) -> np.generic:
        comp_dtype = self.component.to_native_dtype()
        pair = np.array([re, im], dtype=comp_dtype)
        return pair.view(self.to_native_dtype())[0]

    def default_scalar(self) -> np.generic:
        comp = self.component
        zero = comp.cast_scalar(1.0 if self.component_name == "float8_e8m0fnu" else 0.0)
        return self._make(zero, zero)

    def _check_scalar(self, data: object) -> bool:
        return isinstance(data, complex | int | float | np.number | list | tuple | np.void)

    def cast_scalar(self, data: object) -> np.generic:
        if isinstance(data, np.generic) and data.dtype == self.to_native_dtype():
            return data
        comp = self.component
        if isinstance(data, list | tuple) and len(data) == 2:
            re, im = data
        elif isinstance(data, np.void) and data.dtype.names == ("real", "imag"):
            re, im = data["real"], data["imag"]
        elif isinstance(data, complex | int | float | np.number):
            re, im = complex(data).real, complex(data).imag
        else:
            raise TypeError(f"Cannot convert {data!r} to a scalar of data type {self._zarr_v3_name}")
        return self._make(comp.cast_scalar(re), comp.cast_scalar(im))

    def from_json_scalar(self, data: JSON, *, zarr_format: int) -> np.generic:
        if not isinstance(data, list) or len(data) != 2:
            raise TypeError(f"fill_value: {self._zarr_v3_name} takes [real, imaginary], got {data!r}")
        comp = self.component
        return self._make(comp.from_json_scalar(data[0], zarr_format=3), comp.from_json_scalar(data[1], zarr_format=3))

    def to_json_scalar(self, data: object, *, zarr_format: int) -> list:
        value = self.cast_scalar(data)
        comps = self.components(np.asarray(value))
        comp = self.component
        return [comp.to_json_scalar(comps[..., 0][()], zarr_format=3), comp.to_json_scalar(comps[..., 1][()], zarr_format=3)]


@dataclass(frozen=True, kw_only=True)
class MLComplexWide(MLComplex, HasEndianness):
    """Complex types with 2-, 4- or 8-byte components: the ``bytes`` codec's ``endian`` applies
    to each component (zarr keeps ``endian`` only for data types with endianness)."""


def _make_class(component: str) -> type[MLComplex]:
    name = f"complex_{component}"
    cls_name = "Complex" + "".join(p.capitalize() for p in component.split("_"))
    base = MLComplexWide if _component(component).item_size > 1 else MLComplex
    cls = type(cls_name, (base,), {"_zarr_v3_name": name, "component_name": component,
                                         "__annotations__": {"_zarr_v3_name": ClassVar[str]}, "__module__": __name__})
    return dataclass(frozen=True, kw_only=True)(cls)


_COMPONENTS = ["float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn", "float8_e3m4", "float8_e4m3",
               "float8_e4m3b11fnuz", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu",
               "bfloat16", "float16", "float32", "float64"]

COMPLEX_DTYPES: dict[str, type[MLComplex]] = {f"complex_{c}": _make_class(c) for c in _COMPONENTS}
globals().update({cls.__name__: cls for cls in COMPLEX_DTYPES.values()})
__all__ += [cls.__name__ for cls in COMPLEX_DTYPES.values()]


def pack_complex(real: npt.ArrayLike, imag: npt.ArrayLike, dtype: str | MLComplex) -> np.ndarray:
    """An array of a ``complex_*`` type from real and imaginary parts (broadcast together)."""
    zd = COMPLEX_DTYPES[dtype]() if isinstance(dtype, str) else dtype
    comp = zd.component.to_native_dtype()
    re, im = np.broadcast_arrays(np.asarray(real), np.asarray(imag))
    return zd.from_components(np.stack([re.astype(comp), im.astype(comp)], axis=-1))

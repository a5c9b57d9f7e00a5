"""Data types: the sub-byte and ML types of zarr-extensions, backed by ml_dtypes."""

from zopt.dtypes.ml import ML_DTYPES, MLDType, MLFloat, MLInt

__all__ = ["ML_DTYPES", "MLDType", "MLFloat", "MLInt", "register_data_types"]


def register_data_types() -> None:
    """Register zopt's data types (``ML_DTYPES`` and the ``complex_*`` types) with zarr's
    data-type registry. Idempotent; zarr 3.1-3.3 need it because they never load the
    ``zarr.data_type`` entry points."""
    from zarr.core.dtype import data_type_registry

    from zopt.dtypes.complex import COMPLEX_DTYPES

    for name, cls in {**ML_DTYPES, **COMPLEX_DTYPES}.items():
        data_type_registry.register(name, cls)

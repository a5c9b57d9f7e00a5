"""Data types: the sub-byte and ML types of zarr-extensions, backed by ml_dtypes."""

from zopt.dtypes.ml import ML_DTYPES, MLDType, MLFloat, MLInt

__all__ = ["ML_DTYPES", "MLDType", "MLFloat", "MLInt"]

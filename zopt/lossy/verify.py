"""Compatibility: ``zopt.lossy.verify`` is now ``zopt.verify`` (general comparison, metadata
included), which checks lossy arrays within their recorded bound through ``zopt.lossy.check``."""

from __future__ import annotations

from zopt.verify import ArrayCheck, VariableCheck, VerifyReport, verify

__all__ = ["ArrayCheck", "VariableCheck", "VerifyReport", "verify"]

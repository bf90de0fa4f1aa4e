"""The cost model's version, recorded in the band tables and in calibrated profiles.

Bump it whenever a change moves predictions (a formula, a constant, a data file the cost model
reads): profiles fitted against another version are refused (solver.cost.profile), and the band
tables must be regenerated (`python -m benchmarks.bands --write`; tests/cost/test_bands.py
fails until they are).
"""
from __future__ import annotations

MODEL_VERSION = "2026.12.17"

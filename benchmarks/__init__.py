"""Benchmarks printed as JSON (planner latency, prediction accuracy); not part of the test gate."""

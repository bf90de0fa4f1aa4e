"""Thin adapters over solver/ and topology/: CLI, HTTP service, report rendering, launcher exports."""

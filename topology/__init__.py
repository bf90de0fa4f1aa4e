"""Cluster specs, GPU catalog, topology graphs and collective bandwidth queries.

Imports nothing else of trainplan's (see DESIGN.md: topology <- solver <- service).
"""

"""Model/training specs, the cost model (solver.cost), the layout search (solver.search), plan assembly."""

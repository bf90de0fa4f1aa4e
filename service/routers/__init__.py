"""HTTP routers, one module per resource (plans, layouts, estimate, presets, health)."""

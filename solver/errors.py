"""Re-export of the exception tree (defined in topology.errors so every package can use it)."""
from topology.errors import (  # noqa: F401
    InfeasibleError,
    PlannerError,
    Problem,
    SolverTimeoutError,
    SpecError,
    UnknownPresetError,
)

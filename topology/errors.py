"""The one exception tree of trainplan (STYLE.md habit 4).

It lives in `topology` because every other package may import `topology` and
`topology` imports none of them. `solver.errors` re-exports it.
"""
from __future__ import annotations


class PlannerError(Exception):
    """Anything a user can cause. Carries field-path problems where they apply."""

    def __init__(self, message: str, problems: list[Problem] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.problems = problems or []


class Problem:
    """One problem with an input: the dotted field path and the reason."""

    __slots__ = ("field", "reason")

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}" if self.field else self.reason

    def as_dict(self) -> dict[str, str]:
        return {"field": self.field, "reason": self.reason}


class SpecError(PlannerError):
    """A spec is malformed: wrong types, missing fields, impossible shapes, absurd sizes."""


class UnknownPresetError(SpecError):
    """A preset name that does not exist (and is not a readable file)."""


class InfeasibleError(PlannerError):
    """The problem is well-formed but no answer exists (e.g. nothing fits in memory)."""

    def __init__(self, message: str, explanation: dict | None = None) -> None:
        super().__init__(message)
        self.explanation = explanation or {}


class SolverTimeoutError(PlannerError):
    """The solver ran out of time before it could prove anything. Never 'infeasible'."""

"""No module of topology, solver or service passes 400 lines (STYLE.md habit 7, issue 12):
split along a seam instead (solver.cost.step -> step_memory)."""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 400


def test_no_module_passes_400_lines():
    long = {str(p.relative_to(ROOT)): n for pkg in ("topology", "solver", "service")
            for p in (ROOT / pkg).rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}


def test_step_still_exports_the_memory_half():
    from solver.cost import step, step_memory

    for name in ("compose_memory", "memory_terms", "stage_profile", "stage_memory_terms",
                 "usable_memory_bytes", "rank_layers", "MemoryTerms"):
        assert getattr(step, name) is getattr(step_memory, name)

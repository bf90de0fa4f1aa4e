"""Pure cost functions (no ortools): accounting, compute, communication, memory, step time."""

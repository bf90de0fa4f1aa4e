"""Pure cost functions (no ortools).

accounting   exact parameters, model state, FLOPs, wall time, batch (seed arithmetic)
options      CostOptions: the calibrated physical constants (one set for every case)
compute      GEMM roofline with tile/wave quantization, attention core, elementwise HBM work
communication  collective / p2p times over topology GroupLinks (topology.collectives)
terms        step-time terms, each a function of the few layout scalars it depends on
memory       per-GPU memory terms (Korthikanti et al. 2022 activations, extended)
step         the one composition of step time and memory from the terms (the search contract)
estimate     estimate_layout -> LayoutEstimate (step time, MFU/HFU, breakdowns, fit)
validation   predictions against measured runs (trainplan validate)
"""

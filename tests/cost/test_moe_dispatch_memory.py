"""The alltoall token dispatcher's working set (solver.cost.moe_memory.dispatch_working_set_bytes)
against hand-derived numbers, from what Megatron-Core's MoELayer holds at its two forward peaks
(NVIDIA/Megatron-LM d98e8a64, moe_layer.py L658-699 and token_dispatcher.py L705-908; module
docstring): the permuted tokens (t k rows) and the all-to-all output (R / etp rows, unless it is
the fc1 input itself) stay alive to the end of the layer; at the first peak the fc2 output (R),
its unsorted copy (R, more than one local expert) and the expert-TP reduce-scatter (R / etp,
etp > 1); at the second the combine's input (R / etp with etp > 1, else R) and its all-to-all
output (t k, ep > 1). 2 bytes x hidden per row.

Mixtral 8x7B (tests/fixtures/hf/mixtral-8x7b): hidden 4096, 8 experts, top-2; seq 8192 (seed-300b),
micro-batch 1, default load imbalance 1.25 (busy rows = ceil(1.25 x mean), ep 1: no imbalance).
"""
from __future__ import annotations

import json
from pathlib import Path

from benchmarks.moe_accuracy import MOE_CASES
from solver.cost.estimate import make_context
from solver.cost.moe_layer import busiest_moe_layers, moe_layer_mask
from solver.cost.moe_memory import dispatch_working_set_bytes, moe_layer_activation_extra_bytes
from solver.cost.memory import in_flight_microbatches
from solver.cost.step_memory import moe_activation_extra_of
from solver.cost.validation import validate_case
from solver.presets import load_model, load_training
from topology.catalog import load_cluster

HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf"
MIXTRAL = load_model(str(HF / "mixtral-8x7b" / "config.json"))
CTX = make_context(MIXTRAL, load_cluster("seed-512"), load_training("seed-300b"))


def _ws(ctx=CTX, *, tp=1, ep=8, etp=1):
    return dispatch_working_set_bytes(ctx, tp=tp, cp=1, micro_batch=1, ep=ep, etp=etp, recompute="none")


def test_one_local_expert_the_all_to_all_output_is_the_fc1_input():
    # tp 1, ep 8: t = 8192, t k = 16,384 permuted rows; mean rows per expert 8192 x 2 x 8 / 8 =
    # 16,384, busiest ceil(1.25 x 16,384) = 20,480 = R (one local expert, no sort, and the
    # all-to-all output is the fc1 input, already stored). Peak 1: 16,384 + fc2 out 20,480 =
    # 36,864 rows; peak 2: 16,384 + 20,480 + the combine's 16,384 = 53,248 rows.
    assert _ws() == 53_248 * 4096 * 2 == 436_207_616


def test_several_local_experts_hold_the_all_to_all_output_and_the_unsorted_copy():
    # ep 2: 4 local experts, mean 8192 x 2 x 2 / 8 = 4,096 rows each, busiest 5,120: R = 20,480.
    # Held: 16,384 permuted + 20,480 all-to-all output = 36,864. Peak 1: + fc2 out 20,480 +
    # unsorted 20,480 = 77,824 rows; peak 2: + 20,480 + 16,384 = 73,728. Max 77,824.
    assert _ws(ep=2) == 77_824 * 4096 * 2 == 637_534_208


def test_expert_tensor_parallelism_adds_the_reduce_scatter():
    # tp 2 (SP), etp 2, ep 8: t = 4096, t k = 8,192; mean 4096 x 2 x 8 x 2 / 8 = 16,384 rows,
    # busiest 20,480 = R after the expert-TP all-gather; the all-to-all output is R / 2 = 10,240.
    # Held 18,432. Peak 1: + fc2 out 20,480 + reduce-scatter 10,240 = 49,152 rows; peak 2:
    # + 10,240 + 8,192 = 36,864.
    assert _ws(tp=2, etp=2) == 49_152 * 4096 * 2 == 402_653_184


def test_without_expert_parallelism_the_all_to_all_is_the_identity():
    # ep 1: the all-to-all returns its input (mappings.py L433-436): only the 16,384 permuted
    # rows are held. 8 local experts, 2,048 rows each, no imbalance: R = 16,384. Peak 1: 16,384 +
    # fc2 out 16,384 + unsorted 16,384 = 49,152 rows; peak 2 (no combine copy): 32,768.
    assert _ws(ep=1) == 49_152 * 4096 * 2 == 402_653_184


def test_dense_models_hold_none():
    dense = MIXTRAL.model_copy(update={"moe": None})
    ctx = make_context(dense, load_cluster("seed-512"), load_training("seed-300b"))
    assert _ws(ctx) == 0.0


def test_deepseek_v3_published_layout_charges_it_once_and_still_fits():
    # DGXC DeepSeek-V3 BF16 on 512 H100 (benchmarks/data/moe_runs.jsonl): TP2 (SP) PP8 EP64 ETP1,
    # mb 1, seq 4096, hidden 7168, 256 experts top-8, token drop at capacity 1.0 (the row's
    # moe_capacity_factor, NeMo's MegatronTokenDropCallback). t = 2048, t k = 16,384; rows per
    # expert 2048 x 8 x 64 / 256 = 4,096 (busiest = capacity = 4,096), 4 local experts: R = 16,384.
    # Held 16,384 + 16,384 = 32,768; peak 1: + 16,384 + 16,384 = 65,536 rows; peak 2: + 16,384 +
    # 16,384 = 65,536. 65,536 x 7168 x 2 = 939,524,096 bytes (at the default imbalance 1.25 the
    # busiest expert gets 5,120 rows: 77,824 rows, 1,115,684,864 bytes, the ~1 GB first estimated).
    row = next(json.loads(t) for t in MOE_CASES.read_text().splitlines() if '"dgxc_dsv3_h100_bf16_512"' in t)
    ctx = make_context(load_model(row["model"]), load_cluster(row["cluster"]), load_training(row["training"]))
    kw = {"tp": 2, "cp": 1, "micro_batch": 1, "ep": 64, "etp": 1}
    assert dispatch_working_set_bytes(ctx, **kw, recompute="selective") == 939_524_096
    # Once per rank, not per layer or micro-batch: the MoE extra is n x in-flight x per-layer + it.
    m = ctx.training.global_batch_tokens // (4096 * 32)  # micro-batches per replica (DP 32)
    n, flight = busiest_moe_layers(moe_layer_mask(ctx.model), 8, 1), in_flight_microbatches(8, 1, m)
    per_layer = moe_layer_activation_extra_bytes(ctx, recompute="selective", **kw)
    total = moe_activation_extra_of(ctx, **kw, pp=8, vpp=1, recompute="selective", grad_accum=m,
                                    mask=moe_layer_mask(ctx.model))
    assert total == n * flight * per_layer + 939_524_096
    assert validate_case(row, row["id"]).fits_device  # 73.5 GB predicted (its [7,8x6,6] split) of 85.9 GB

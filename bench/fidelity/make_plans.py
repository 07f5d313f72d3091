#!/usr/bin/env python3
"""Writes the CPU fidelity plans (bench/fidelity/plans/*.json), used by scripts/fidelity_report.sh.

One dense model and one MoE model, fp32, on the `cpu` preset (one process per device, Gloo).
profile_*: the plans `stretto profile` measures; validate_*: the plans `stretto validate` checks
with that table (other schedules, microbatch counts, placements: the same op shapes).
"""
import json, os

DENSE = {"family": "transformer", "hidden": 256, "heads": 4, "kv_heads": 4, "ffn_hidden": 1024,
         "vocab": 1024, "seq_len": 64, "microbatch_size": 2, "dtype": "fp32", "gated_mlp": False,
         "layers": 4}
MOE = dict(DENSE, moe={"experts": 4, "top_k": 2, "expert_ffn_hidden": 512, "shared_experts": 0})


def plan(model, devices, schedule, pp_regions=None, costmodel=None):
    m = dict(model)
    if pp_regions:
        m["pp_regions"] = pp_regions
    # The optimizer the replay runs (SGD), declared so that the simulation models its step too.
    return {"model": m, "cluster": {"preset": "cpu", "nodes": 1, "devices_per_node": devices},
            "costmodel": costmodel or {"kind": "analytic"}, "optimizer": {"kind": "sgd"},
            "schedule": schedule}


def builder(name, mb, v=1, ranks=2):
    return plan(DENSE, ranks, {"builder": name, "ranks": ranks, "stages_per_rank": v,
                               "microbatches": mb}, pp_regions=ranks * v)


def pp2_dp2(mb, zero):
    rep = {"op": "replicate", "bucket_size": 1.0}
    if zero == 1:
        rep["shard_optimizer"] = True
    if zero == 3:
        rep["shard_params"] = True
        rep["shard_grads"] = True
    base = [{"op": "place", "filter": {"PP": 0}, "devices": [0, 2]},
            {"op": "place", "filter": {"PP": 1}, "devices": [1, 3]},
            dict(rep, filter={"PP": 0}, devices=[0, 2]),
            dict(rep, filter={"PP": 1}, devices=[1, 3])]
    return plan(DENSE, 4, {"builder": "1f1b", "microbatches": mb, "base": base}, pp_regions=2)


def dp2(mb, zero):
    rep = {"op": "replicate", "filter": {}, "devices": [0, 1], "bucket_size": 1.0}
    if zero == 1:
        rep["shard_optimizer"] = True
    if zero == 3:
        rep["shard_params"] = True
        rep["shard_grads"] = True
    return plan(DENSE, 2, [{"op": "place", "filter": {}, "devices": [0, 1]}, rep,
                           {"op": "split", "filter": {}, "dim_name": "MB", "num_microbatches": mb}])


def ep2(mb):
    return plan(MOE, 2, [{"op": "place", "filter": {}, "devices": [0, 1]},
                         {"op": "replicate", "filter": {}, "devices": [0, 1], "bucket_size": 1.0},
                         {"op": "shard", "filter": {"EP": "*"}, "devices": [0, 1]},
                         {"op": "split", "filter": {}, "dim_name": "MB", "num_microbatches": mb}])


plans = {
    # measured by `stretto profile`
    "profile_1f1b_mb4": builder("1f1b", 4),
    "profile_zbh1_mb4": builder("zb-h1", 4),
    # every forward before every backward: backwards at reuse distances 0 to 5
    # (host_reuse_factor; the other profiled plans reach 1 at most)
    "profile_gpipe_mb6": builder("gpipe", 6),
    "profile_dp2_zero1_mb2": dp2(2, 1),
    "profile_dp2_zero3_mb2": dp2(2, 3),
    "profile_pp2_dp2_zero1_mb2": pp2_dp2(2, 1),
    "profile_ep2_mb2": ep2(2),
    # checked by `stretto validate` with that table
    "validate_gpipe_mb4": builder("gpipe", 4),
    "validate_1f1b_mb2": builder("1f1b", 2),
    "validate_1f1b_mb8": builder("1f1b", 8),
    "validate_interleaved_v2_mb4": builder("interleaved-1f1b", 4, v=2),
    "validate_looped_bfs_v2_mb4": builder("looped-bfs", 4, v=2),
    "validate_zbh1_mb8": builder("zb-h1", 8),
    "validate_zbh2_mb6": builder("zb-h2", 6),
    "validate_zbv_mb4": builder("zb-v", 4, v=2),
    "validate_dualpipev_mb4": builder("dualpipev", 4, v=2),
    "validate_pp2_dp2_zero1_mb4": pp2_dp2(4, 1),
    "validate_dp2_zero1_mb4": dp2(4, 1),
    "validate_dp2_zero3_mb4": dp2(4, 3),
    "validate_ep2_mb4": ep2(4),
}
here = os.path.dirname(os.path.abspath(__file__))
os.makedirs(os.path.join(here, "plans"), exist_ok=True)
for name, p in plans.items():
    with open(os.path.join(here, "plans", name + ".json"), "w") as f:
        json.dump(p, f, indent=1)
        f.write("\n")
print(len(plans), "plans")

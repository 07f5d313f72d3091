#!/usr/bin/env python3
"""Writes one Stretto plan per row of Narayanan et al. 2021 (SC'21) Table 1.

The rows' settings come from the paper and the authors' run script (NVIDIA/Megatron-LM
examples/sc21/run_table_1.sh, CONFIG.sh); narayanan2021_table1.csv holds them. Device
numbering follows Megatron's initialize_model_parallel: TP ranks are consecutive (one node
for TP=8), a pipeline stage is a contiguous block of dp*tp ranks, DP groups stride by tp.

  python3 gen_narayanan2021.py            # the plans the test uses (all effects modelled)
  python3 gen_narayanan2021.py --legacy --out /tmp/legacy
                                          # without the fields added by issue 9 (for the
                                          # "before" measurement on older binaries)
"""
import csv, json, os, sys

HERE = os.path.dirname(os.path.abspath(__file__))
legacy = "--legacy" in sys.argv
out_dir = os.path.join(HERE, "legacy" if legacy else "narayanan2021")
if "--out" in sys.argv:
    out_dir = sys.argv[sys.argv.index("--out") + 1]
os.makedirs(out_dir, exist_ok=True)

with open(os.path.join(HERE, "narayanan2021_table1.csv")) as f:
    rows = list(csv.DictReader(f))

for row in rows:
    t, p, d = int(row["tensor_parallel"]), int(row["pipeline_parallel"]), int(row["data_parallel"])
    v = int(row["interleave_chunks_per_gpu"] or 1)
    L, h = int(row["num_layers"]), int(row["hidden_size"])
    m = int(row["num_microbatches_per_replica"])
    gpn = int(row["gpus_per_node"])
    n = t * p * d
    stages = p * v
    model = {
        "family": "transformer", "name": "gpt-" + row["model_label"], "layers": L,
        "hidden": h, "heads": int(row["attention_heads"]), "ffn_hidden": 4 * h,
        "vocab": int(row["vocab_size"]), "seq_len": int(row["seq_length"]),
        "microbatch_size": int(row["micro_batch_size"]), "dtype": "fp16",
        "gated_mlp": False, "tie_embeddings": True, "pp_regions": stages,
    }
    if not legacy:
        model.update({"attention": "unfused", "bias": True, "dropout": 0.1})
        # The 2021 Megatron-LM of these runs all-reduced a column-parallel linear's input
        # gradient after both its GEMMs (ColumnParallelLinear: copy_to_tensor_model_parallel_
        # region, whose backward is a synchronous all-reduce); the asynchronous all-reduce
        # beside the weight-gradient GEMM came in 2022.
        model["async_tp_grad_reduce"] = False

    def dev(stage_rank, dp, tp):
        return stage_rank * d * t + dp * t + tp

    base = []
    for s in range(p):
        base.append({"op": "place", "filter": {"PP": s}, "devices": [dev(s, r, 0) for r in range(d)],
                     "stream": "pp"})
    if d > 1:
        # torch DDP (25 MB buckets, overlapped) for the TP-only rows; Megatron's `local` DDP
        # (one all-reduce after the backward) for the others: one bucket of everything.
        bucket = 25 if row["ddp_impl"] == "torch" else 1e6
        for s in range(stages):
            base.append({"op": "replicate", "filter": {"PP": s},
                         "devices": [dev(s % p, r, 0) for r in range(d)],
                         "reduce_stream": "dp", "bucket_size": bucket})
    if t > 1:
        groups = [[dev(s, r, k) for k in range(t)] for s in range(p) for r in range(d)]
        base.append({"op": "shard_tensor", "filter": {}, "devices": groups, "stream": "tp"})
    if not legacy:
        base.append({"op": "recompute", "filter": {"LAYER": "*"}, "mode": "full"})
    plan = {
        "name": f"Narayanan 2021 Table 1, {row['model_label']}: TP{t} x PP{p} x DP{d}"
                + (f", {v} chunks" if v > 1 else ""),
        "model": model,
        "cluster": {"preset": "a100-sxm", "nodes": n // gpn, "devices_per_node": gpn},
        "costmodel": {"kind": "analytic"},
        "schedule": {"builder": "interleaved-1f1b" if v > 1 else "1f1b", "ranks": p,
                     "microbatches": m, "base": base},
    }
    if v > 1:
        plan["schedule"]["stages_per_rank"] = v
    if not legacy:
        plan["optimizer"] = {"kind": "adam", "master_weights": True, "grad_clip": True}
    name = "table1_" + row["model_label"].replace(".", "_") + ".json"
    with open(os.path.join(out_dir, name), "w") as f:
        json.dump(plan, f, separators=(",", ":"))
        f.write("\n")
print(f"wrote {len(rows)} plans to {out_dir}")

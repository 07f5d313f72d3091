#!/usr/bin/env python3
"""Writes the two Stretto plans of the Korthikanti et al. 2022 (arXiv 2205.05198) cross-check.

The 530B GPT (105 layers, hidden 20480, 128 heads, sequence 2048, vocabulary 51200, micro-batch
1) on 2,240 A100s, the abstract's run: 42.1 % model-FLOPs utilisation with full recompute and
54.2 % with sequence parallelism and selective recompute. 2,240 GPUs at TP 8 x PP 35 is DP 8.

Settings and their sources:
- TP 8 x PP 35, micro-batch 1, 280 microbatches per replica (the paper's configuration table;
  280 per replica assumes a global batch of 2,240 over the 8 replicas).
- The interleaved 1F1B schedule with 3 model chunks per GPU (1 layer per virtual stage): the
  same model and layout on the same cluster ran it in Narayanan et al. 2021, Table 1 (the 530B
  row of narayanan2021_table1.csv, from the authors' run script), and Calculon (Isaev et al.,
  SC'23) models both 530B runs of the paper's Table 5 with pipeline_interleaving 3
  (calculon-ai/calculon, validation/530B_full.json and 530B_seqsel.json).
- The DP 8 gradient all-reduce: Megatron's `local` DDP of 2022 (one all-reduce after the
  backward), one bucket, as for the non-TP-only rows of gen_narayanan2021.py.
- GPT with biases, dropout 0.1, unfused attention (2022, no flash attention), tied embeddings,
  fp16 Adam with fp32 master weights and gradient clipping; Megatron's rank layout (TP ranks
  consecutive, a pipeline stage a contiguous block of DP x TP ranks, DP groups stride by TP).

The paper's Table 5 (end-to-end iteration times of four models, full recompute and "present
work", i.e. sequence parallelism with selective recompute) is checked too, one data-parallel
replica each (korthikanti2022/table5/). Its times and configurations as Calculon quotes and
models them (calculon-ai/calculon: calculon/megatron/validation.py kProfile, citing the paper;
validation/<model>_{full,seqsel}.json; examples/<model>.json): TP 8 for all; 22B (h 6144, 64
heads, 48 layers) PP 1, global batch 4, micro-batch 4; 175B (h 12288, 96 heads, 96 layers)
PP 8, batch 64, interleaved with 3 chunks; 530B PP 35, batch 280, interleaved with 3 chunks;
1T (h 25600, 160 heads, 128 layers) PP 64, batch 512, not interleaved; micro-batch 1 but for
22B; the other settings as above.

  python3 gen_korthikanti2022.py     # writes korthikanti2022/gpt530b_{full,selective}.json
                                     # and korthikanti2022/table5/<model>_{full,selective}.json
"""
import json, os

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "korthikanti2022")
T, P, D, V, M = 8, 35, 8, 3, 280  # TP, PP, DP, model chunks per GPU, microbatches per replica
GPUS_PER_NODE = 8


def dev(stage_rank, dp, tp):
    return stage_rank * D * T + dp * T + tp


def plan(mode):
    full = mode == "full"
    base = [{"op": "place", "filter": {"PP": s}, "devices": [dev(s, r, 0) for r in range(D)],
             "stream": "pp"} for s in range(P)]
    base += [{"op": "replicate", "filter": {"PP": s},
              "devices": [dev(s % P, r, 0) for r in range(D)], "reduce_stream": "dp",
              "bucket_size": 1e6} for s in range(P * V)]
    base.append({"op": "shard_tensor", "filter": {},
                 "devices": [[dev(s, r, k) for k in range(T)] for s in range(P) for r in range(D)],
                 "stream": "tp", "sequence_parallel": not full})
    base.append({"op": "recompute", "filter": {"LAYER": "*"}, "mode": mode})
    what = "full recompute" if full else "selective recompute + sequence parallelism"
    return {
        "name": f"Korthikanti 2022, 530B (TP8 x PP35 x DP8, interleaved 1F1B, 3 chunks), {what}",
        "comment": "Model and parallelism from Korthikanti et al. 2022 (arXiv 2205.05198); written "
                   "by gen_korthikanti2022.py (its docstring gives every setting's source). "
                   "Simulated by fidelity_test (Korthikanti2022.*); see docs/fidelity.md.",
        "model": {"family": "transformer", "layers": 105, "hidden": 20480, "heads": 128,
                  "ffn_hidden": 81920, "vocab": 51200, "seq_len": 2048, "microbatch_size": 1,
                  "dtype": "fp16", "gated_mlp": False, "tie_embeddings": True,
                  "pp_regions": P * V, "attention": "unfused", "bias": True, "dropout": 0.1},
        "cluster": {"preset": "a100-sxm", "nodes": T * P * D // GPUS_PER_NODE,
                    "devices_per_node": GPUS_PER_NODE},
        "optimizer": {"kind": "adam", "master_weights": True, "grad_clip": True},
        "schedule": {"builder": "interleaved-1f1b", "ranks": P, "stages_per_rank": V,
                     "microbatches": M, "base": base},
    }


# Table 5: model, hidden, heads, layers, PP, chunks per GPU, global batch, micro-batch.
TABLE5 = [("22B", 6144, 64, 48, 1, 1, 4, 4), ("175B", 12288, 96, 96, 8, 3, 64, 1),
          ("530B", 20480, 128, 105, 35, 3, 280, 1), ("1T", 25600, 160, 128, 64, 1, 512, 1)]


def table5_plan(row, mode):
    name, h, heads, layers, p, v, batch, mbs = row
    full = mode == "full"
    base = [{"op": "place", "filter": {"PP": s}, "devices": [s * T], "stream": "pp"}
            for s in range(p)]
    base.append({"op": "shard_tensor", "filter": {},
                 "devices": [[s * T + k for k in range(T)] for s in range(p)], "stream": "tp",
                 "sequence_parallel": not full})
    base.append({"op": "recompute", "filter": {"LAYER": "*"}, "mode": mode})
    schedule = {"builder": "interleaved-1f1b" if v > 1 else "1f1b", "ranks": p,
                "microbatches": batch // mbs, "base": base}
    if v > 1:
        schedule["stages_per_rank"] = v
    what = "full recompute" if full else "selective recompute + sequence parallelism"
    return {
        "name": f"Korthikanti 2022 Table 5, {name} (TP8 x PP{p}"
                + (f", {v} chunks" if v > 1 else "") + f"), {what}",
        "comment": "Written by gen_korthikanti2022.py (its docstring gives the sources). "
                   "Simulated by fidelity_test (Korthikanti2022.Table5IterationTimes).",
        "model": {"family": "transformer", "layers": layers, "hidden": h, "heads": heads,
                  "ffn_hidden": 4 * h, "vocab": 51200, "seq_len": 2048, "microbatch_size": mbs,
                  "dtype": "fp16", "gated_mlp": False, "tie_embeddings": True,
                  "pp_regions": p * v, "attention": "unfused", "bias": True, "dropout": 0.1},
        "cluster": {"preset": "a100-sxm", "nodes": p, "devices_per_node": GPUS_PER_NODE},
        "costmodel": {"kind": "analytic"},
        "optimizer": {"kind": "adam", "master_weights": True, "grad_clip": True},
        "schedule": schedule,
    }


def write(path, p):
    with open(path, "w") as f:
        json.dump(p, f, separators=(",", ":"))
        f.write("\n")


os.makedirs(os.path.join(OUT, "table5"), exist_ok=True)
for mode in ("full", "selective"):
    write(os.path.join(OUT, f"gpt530b_{mode}.json"), plan(mode))
    for row in TABLE5:
        write(os.path.join(OUT, "table5", f"{row[0]}_{mode}.json"), table5_plan(row, mode))

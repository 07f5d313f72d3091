#!/usr/bin/env python3
"""Checks that two `stretto` binaries give the same outputs, wall-clock times aside.

For a change meant to make the simulator faster without changing what it computes: runs both
binaries on the same inputs and compares, byte for byte after dropping the fields that hold wall
times (`sim_wall_ms`, a sweep row's `wall_ms`):
  - `simulate --format json --critical-path=full` of every plan in examples/ and
    examples/builders/, at op and pass granularity, each with and without --fold-replicas;
  - the same of generated DualPipeV references (the benchmarks' reference configuration, see
    bench/plans.h), PP4 x DP8 with 32 microbatches, PP16 x DP4 with 64 and, folded and without
    the critical path, PP16 x DP64 with 256;
  - `simulate --trace` (every op's start and end, memory curves) of every example at op
    granularity and of a few at pass granularity;
  - every row of the example sweeps (examples/sweeps/*.json) at op and pass granularity.

Usage: scripts/compare_outputs.py BEFORE AFTER [--quick]
  BEFORE, AFTER: two stretto binaries (e.g. a copy of build/stretto made before the change).
  --quick: examples and the small reference only (no sweeps, no 1,024-device reference).
Exits 0 when every output is the same, 1 otherwise (the differing outputs are listed; an
output that is an error counts as differing).
"""
import json
import os
import sqlite3
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def reference_plan(pp, dp, mbs, layers_per_stage=2):
    """bench/plans.h reference_plan(), in Python."""
    stages = 2 * pp
    model = {
        "family": "transformer", "layers": stages * layers_per_stage, "hidden": 4096,
        "heads": 32, "kv_heads": 8, "ffn_hidden": 14336, "vocab": 128000, "seq_len": 4096,
        "microbatch_size": 1, "pp_regions": stages,
        "moe": {"experts": 64, "top_k": 6, "expert_ffn_hidden": 2048, "shared_experts": 1},
    }
    base = []
    for s in range(stages):
        r = s if s < pp else stages - 1 - s
        devs = [r * dp + k for k in range(dp)]
        base.append({"op": "place", "filter": {"PP": s}, "devices": devs, "stream": "pp"})
        base.append({"op": "replicate", "filter": {"PP": s}, "devices": devs,
                     "reduce_stream": "dp", "shard_optimizer": True})
        base.append({"op": "shard", "filter": {"PP": s, "EP": "*"}, "devices": devs,
                     "stream": "ep"})
    return {
        "model": model,
        "cluster": {"preset": "h100-sxm", "nodes": (pp * dp + 7) // 8, "devices_per_node": 8},
        "costmodel": {"kind": "analytic"},
        "schedule": {"builder": "dualpipev", "ranks": pp, "stages_per_rank": 2,
                     "microbatches": mbs, "base": base},
    }


def strip_walls(v):
    if isinstance(v, dict):
        return {k: strip_walls(x) for k, x in v.items() if k not in ("sim_wall_ms", "wall_ms")}
    if isinstance(v, list):
        return [strip_walls(x) for x in v]
    return v


def run(binary, args, cwd):
    p = subprocess.run([binary] + args, cwd=cwd, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def simulate_json(binary, plan, flags, cwd):
    rc, out, err = run(binary, ["simulate", plan, "--format", "json"] + flags, cwd)
    if rc not in (0, 3):
        return f"exit {rc}: {err}"
    return json.dumps(strip_walls(json.loads(out)), sort_keys=True)


def sweep_rows(binary, spec, granularity, work, tag):
    with open(spec) as f:
        s = json.load(f)
    s["base"] = os.path.join(os.path.dirname(os.path.abspath(spec)), s["base"])
    s["granularity"] = granularity
    path = os.path.join(work, f"{tag}.json")
    with open(path, "w") as f:
        json.dump(s, f)
    db = os.path.join(work, f"{tag}.db")
    rc, _, err = run(binary, ["sweep", path, "--db", db, "-j", "1", "--format", "json"], work)
    if rc != 0:
        return {"error": f"exit {rc}: {err}"}
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    rows = {}
    for r in con.execute("SELECT * FROM points ORDER BY hash"):
        d = {k: r[k] for k in r.keys() if k not in ("wall_ms", "sim_wall_ms")}
        if d.get("metrics"):
            d["metrics"] = json.dumps(strip_walls(json.loads(d["metrics"])), sort_keys=True)
        rows[d["hash"]] = d
    con.close()
    return rows


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    quick = "--quick" in sys.argv
    if len(args) != 2:
        print(__doc__)
        return 2
    before, after = (os.path.abspath(a) for a in args)
    work = tempfile.mkdtemp(prefix="stretto_compare_")
    plans = []
    for d in ("examples", "examples/builders"):
        for n in sorted(os.listdir(os.path.join(ROOT, d))):
            if n.endswith(".json"):
                plans.append(os.path.join(ROOT, d, n))
    refs = [(4, 8, 32)] + ([] if quick else [(16, 4, 64), (16, 64, 256)])
    for pp, dp, mbs in refs:
        path = os.path.join(work, f"reference_pp{pp}_dp{dp}_mb{mbs}.json")
        with open(path, "w") as f:
            json.dump(reference_plan(pp, dp, mbs, 4 if dp == 64 else 2), f)
        plans.append(path)
    cases = []
    for plan in plans:
        big = "pp16_dp64" in plan
        for gran in ("op", "pass"):
            for fold in ([True] if big else [False, True]):
                flags = ["--granularity", gran] + (["--fold-replicas"] if fold else [])
                if not big:
                    flags.append("--critical-path=full")
                cases.append((plan, flags))
    differ = []
    compared = 0
    for plan, flags in cases:
        a = simulate_json(before, plan, flags, work)
        b = simulate_json(after, plan, flags, work)
        compared += 1
        if a != b or a.startswith("exit"):
            differ.append(f"simulate {os.path.relpath(plan, ROOT)} {' '.join(flags)}"
                          + (f" ({a.strip()})" if a.startswith("exit") else ""))
    traces = [(os.path.relpath(p, ROOT), "op") for p in plans if p.startswith(ROOT)]
    traces += [(p, "pass") for p in ("examples/gpt_pp4_dp2_1f1b.json",
                                     "examples/piper_qwen3_moe_pp2_dp2_ep2.json",
                                     "examples/cpu_moe_ep2_dp2.json",
                                     "examples/builders/zb-h1.json")]
    for plan, gran in traces:
        outs = []
        for i, binary in enumerate((before, after)):
            t = os.path.join(work, f"trace{i}.json")
            rc, _, err = run(binary, ["simulate", os.path.join(ROOT, plan), "--granularity",
                                      gran, "--format", "json", "--trace", t], work)
            if rc == 0:
                with open(t) as f:
                    outs.append(f.read())
            else:
                outs.append(f"exit {rc}: {err}")
        compared += 1
        if outs[0] != outs[1] or outs[0].startswith("exit"):
            differ.append(f"trace {plan} --granularity {gran}")
    rows = 0
    if not quick:
        for spec in sorted(os.listdir(os.path.join(ROOT, "examples/sweeps"))):
            for gran in ("op", "pass"):
                path = os.path.join(ROOT, "examples/sweeps", spec)
                a = sweep_rows(before, path, gran, work, f"before_{spec}_{gran}")
                b = sweep_rows(after, path, gran, work, f"after_{spec}_{gran}")
                rows += len(a)
                if "error" in a or a != b:
                    n = sum(1 for k in set(a) | set(b) if a.get(k) != b.get(k))
                    differ.append(f"sweep {spec} at {gran} granularity: {n} rows differ")
    print(f"{compared} simulate/trace outputs and {rows} sweep rows compared "
          f"({len(plans)} plans; work folder {work})")
    for d in differ:
        print("DIFFERENT:", d)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())

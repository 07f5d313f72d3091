#!/usr/bin/env python3
# Fits the analytic cost model's GEMM and flash-attention curves to the kernel sweeps that
# bench/gpu/kernel_sweep.py measured, one device at a time, and prints the tables that
# docs/fidelity.md quotes and the constants that costmodel/src/analytic.cpp uses for the
# h100-sxm and h200 presets.
#
#   python3 bench/gpu/fit_curves.py                 # both devices, tables on stdout
#   python3 bench/gpu/fit_curves.py --tables DIR    # also write profiled tables (see below)
#
# Needs python3 with numpy and scipy (Debian: apt-get install python3-numpy python3-scipy; run
# with /usr/bin/python3). Deterministic (Nelder-Mead from fixed starts).
#
# Data: tests/data/costmodel/{h200,h100}_kernels_measured_raw.json, 1,452 kernels each (CUDA
# events, median of 20 after 5 warm-ups, random bf16 data, torch 2.11.0+cu130; the H200 and the
# H100 80GB HBM3 both at 700 W).
#
# Method.
#   * The model is costmodel/src/analytic.cpp re-implemented line for line (gemm_efficiency,
#     the roofline max(launch floor, compute, memory), peak 989.4 TFLOPS dense BF16, sustained
#     clock ratio 1 for H100/H200, HBM 3350 / 4800 GB/s x memory_efficiency 0.90).
#   * Error of one kernel = modelled time / measured time - 1 (positive: the model is slow).
#   * Kernels under 50 us are left out: the sweep times `torch.matmul` from Python between two
#     CUDA events, and the host needs ~20-25 us to issue one matmul, so below ~50 us the events
#     time the dispatch, not the kernel (the fastest GEMMs all measure 20-30 us whatever their
#     size).
#   * GEMM split: the constants are fitted on the widths h2048, h4096, h5120 and h12288 (GPT
#     shapes, FFN 4h) and tested on the held-out Llama widths h4096_llama (FFN 11008),
#     h5120_llama (13824) and h8192_llama (28672), whose MLP shapes and the 8192 width were not
#     in the fit ("shapes not profiled"). Fitted: gemm_efficiency, gemm_k_half,
#     gemm_split_k_min, with 128x128 tiles and wave_quantization off (with it on, the held-out
#     error is larger: see the table of variants). Loss: mean |log(model / measured)|. The
#     Llama widths' QKV and output projections at h4096 and h5120 have the same shapes as
#     the GPT widths' (measured separately); the rows whose shape is in no fitted row (354 per
#     device) are reported on their own too.
#   * Attention (SDPA, head dim 128, batch 1): the model prices causal attention at
#     2 b s^2 h forward flops and 2.5x that backward, t = flops / (peak * eff * fill) with
#     blocks = ceil(s/128) * heads * batch, fill = min(1, blocks / sms), waves = blocks / sms,
#       eff = attention_efficiency * s / (s + attention_seq_half) * waves / (waves + attention_waves_half)
#     in the forward and attention_bwd_ratio x that in the backward. The seq term is the
#     per-block depth (a causal query block of row i runs i key blocks), the waves term the
#     tail of unequal causal blocks over the SMs. All four fitted on the causal rows
#     (in-sample; a leave-one-configuration-out error is printed too). The backward is measured
#     as FB - F (the sweep times forward + backward together). Attention rows whose time is
#     the host's (F < 75 us, FB < 300 us) are left out. Non-causal rows (4 b s^2 h flops) are
#     reported against the same curve for information; Stretto prices attention as causal.
#   * Memory-bound kernels: achieved fraction of HBM bandwidth, reported, not fitted.
#
# --tables DIR writes DIR/{h200,h100}_kernels_profiled.json: the GEMMs (>= 50 us, one row per
# distinct shape and pass, the smaller measurement where two models share a shape) and the
# causal attention rows as Stretto profiled tables (docs/costmodel.md).
import argparse
import json
import math
import os
import sys

import numpy as np
from scipy.optimize import minimize

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.normpath(os.path.join(HERE, "..", "..", "tests", "data", "costmodel"))

PEAK_FLOPS_PER_NS = 989.4e3  # dense BF16, H100 SXM / H200 data sheets (plan/src/plan.cpp)
SMS = 132
HBM_GBPS = {"h200": 4800.0, "h100": 3350.0}
MEMORY_EFFICIENCY = 0.90
LAUNCH_FLOOR_NS = 3000.0
DISPATCH_FLOOR_MS = 0.05
ATTENTION_F_FLOOR_MS = 0.075
ATTENTION_FB_FLOOR_MS = 0.30
HELD_OUT = ("h4096_llama", "h5120_llama", "h8192_llama")
DEFAULTS = dict(tm=128, tn=128, e0=0.80, k_half=256.0, skmin=256.0, wq=True)


# --- the analytic model (costmodel/src/analytic.cpp) -----------------------------------------
def gemm_efficiency(P, rows, cols, depth, batch=1):
    tm, tn = P["tm"], P["tn"]
    r, c, d = float(rows), float(cols), float(depth)
    area = r * c * batch / (tm * tn)
    splits = 1.0
    max_splits = max(1.0, math.floor(d / P["skmin"]))
    if P["wq"]:
        tiles = math.ceil(r / tm) * math.ceil(c / tn) * batch
        if tiles < SMS:
            splits = min(max(math.floor(SMS / tiles), 1.0), max_splits)
        waves = math.ceil(tiles * splits / SMS)
        fill = area * splits / (waves * SMS)
    else:
        if area < SMS:
            splits = min(max(SMS / area, 1.0), max(1.0, d / P["skmin"]))
        fill = min(1.0, area * splits / SMS)
    kd = d / splits
    return P["e0"] * fill * kd / (kd + P["k_half"])


def gemm_dims(row):
    # Forward [m,k]x[k,n]: F (rows m, cols n | depth k), BI (m, k | n), BW (k, n | m).
    m, k, n = row["m"], row["k"], row["n"]
    return {"F": (m, n, k), "BI": (m, k, n), "BW": (k, n, m)}[row["pass"]]


def gemm_ns(P, row, hbm):
    m, k, n = row["m"], row["k"], row["n"]
    flops = 2.0 * m * k * n
    t_comp = flops / (PEAK_FLOPS_PER_NS * gemm_efficiency(P, *gemm_dims(row)))
    t_mem = 2.0 * (m * k + k * n + m * n) / (hbm * MEMORY_EFFICIENCY)
    return max(LAUNCH_FLOOR_NS, t_comp, t_mem)


def attention_flops(row):
    h = row["heads"] * row["head_dim"]
    fwd = 2.0 * row["batch"] * row["seq"] ** 2 * h * (1 if row["causal"] else 2)
    return fwd if row["pass"] == "F" else 2.5 * fwd


def attention_ns(A, row):
    s = row["seq"]
    blocks = math.ceil(s / 128.0) * row["heads"] * row["batch"]
    fill = min(1.0, blocks / SMS)
    waves = blocks / SMS
    eff = A["e_inf"] * s / (s + A["s_half"]) * waves / (waves + A["w_half"])
    if row["pass"] != "F":
        eff *= A["bwd"]
    return attention_flops(row) / (PEAK_FLOPS_PER_NS * eff * fill)


# --- data --------------------------------------------------------------------------------------
def load(dev):
    with open(os.path.join(DATA, f"{dev}_kernels_measured_raw.json")) as f:
        D = json.load(f)
    gemms = [r for r in D["rows"] if r["kind"] == "gemm"]
    att = {(r["heads"], r["seq"], r["causal"], r["pass"]): r
           for r in D["rows"] if r["kind"] == "attention"}
    attention = []
    for (heads, seq, causal, ps), r in sorted(att.items()):
        if ps != "F":
            continue
        attention.append(dict(r))
        b = dict(r, **{"pass": "B", "ms": att[(heads, seq, causal, "FB")]["ms"] - r["ms"]})
        attention.append(b)
    memory = [r for r in D["rows"] if r["kind"] == "memory"]
    return D, gemms, attention, memory


def errors(pred_ns, rows):
    return np.array([pred_ns(r) / (r["ms"] * 1e6) - 1.0 for r in rows])


def stats(e):
    a = np.abs(e)
    return dict(n=len(e), mean=100 * a.mean(), bias=100 * e.mean(),
                p90=100 * np.percentile(a, 90), worst=100 * a.max())


def line(tag, e):
    s = stats(e)
    return (f"  {tag:<46} {s['n']:5d}  {s['mean']:6.2f} %  {s['bias']:+7.2f} %  "
            f"{s['p90']:6.1f} %  {s['worst']:6.1f} %")


HEADER = "  {:<46} {:>5}  {:>8}  {:>9}  {:>8}  {:>8}".format(
    "", "n", "mean|e|", "bias", "p90|e|", "worst")


# --- fits --------------------------------------------------------------------------------------
def fit_gemm(train, hbm, tm=128, tn=128, wq=False):
    def params(x):
        return dict(tm=tm, tn=tn, wq=wq, e0=x[0], k_half=abs(x[1]), skmin=abs(x[2]) + 1.0)

    def loss(x):
        if not 0 < x[0] <= 1:
            return 1e9
        P = params(x)
        return np.mean([abs(math.log(gemm_ns(P, r, hbm) / (r["ms"] * 1e6))) for r in train])

    best = None
    for x0 in ([0.75, 256, 256], [0.70, 150, 400], [0.80, 400, 150]):
        res = minimize(loss, x0, method="Nelder-Mead",
                       options=dict(maxiter=2000, xatol=1e-4, fatol=1e-8))
        if best is None or res.fun < best.fun:
            best = res
    return params(best.x)


def fit_attention(rows, seq_term=True, waves_term=True):
    def params(x):
        return dict(e_inf=x[0], s_half=x[1] if seq_term else 0.0,
                    w_half=x[2] if waves_term else 0.0, bwd=x[3])

    def loss(x):
        if x[0] <= 0 or x[0] > 1 or min(x) < 0:
            return 1e9
        A = params(x)
        return np.mean([abs(math.log(attention_ns(A, r) / (r["ms"] * 1e6))) for r in rows])

    best = None
    for x0 in ([0.7, 600, 1.0, 0.8], [0.65, 1000, 0.5, 0.85]):
        res = minimize(loss, x0, method="Nelder-Mead",
                       options=dict(maxiter=4000, xatol=1e-5, fatol=1e-10))
        if best is None or res.fun < best.fun:
            best = res
    return params(best.x)


def attention_rows(attention):
    # Timed rows: a forward of at least 75 us, a forward + backward of at least 300 us. Below
    # that the sweep times the host: the forward of 8 and 16 heads at s = 2048 take the same
    # ~55 us for twice the work, and so do their forward + backward calls (~0.20 ms, autograd).
    fb = {(r["heads"], r["seq"], r["causal"]): r["ms"] for r in attention if r["pass"] == "F"}
    keep = []
    for r in attention:
        total = r["ms"] if r["pass"] == "F" else r["ms"] + fb[(r["heads"], r["seq"], r["causal"])]
        if total >= (ATTENTION_F_FLOOR_MS if r["pass"] == "F" else ATTENTION_FB_FLOOR_MS):
            keep.append(r)
    return keep


def leave_one_out(rows, **terms):
    # Leave one (heads, seq) configuration (its F and B rows) out, fit on the rest, predict it.
    errs = []
    for key in sorted({(r["heads"], r["seq"]) for r in rows}):
        A = fit_attention([r for r in rows if (r["heads"], r["seq"]) != key], **terms)
        errs += [attention_ns(A, r) / (r["ms"] * 1e6) - 1.0
                 for r in rows if (r["heads"], r["seq"]) == key]
    return np.array(errs)


def rounded_gemm(P):
    return dict(P, e0=round(P["e0"], 3), k_half=float(round(P["k_half"])),
                skmin=float(round(P["skmin"])))


def rounded_attention(A):
    return dict(e_inf=round(A["e_inf"], 3), s_half=float(round(A["s_half"])),
                w_half=round(A["w_half"], 2), bwd=round(A["bwd"], 3))


# --- report ------------------------------------------------------------------------------------
def report(dev, old_h100_table):
    D, gemms, attention, memory = load(dev)
    hbm = HBM_GBPS[dev]
    print(f"=== {dev}: {D['device']}, {D['sms']} SMs, torch {D['torch']}, CUDA {D['cuda']}")
    print(f"    {D['method']}")
    timed = [r for r in gemms if r["ms"] >= DISPATCH_FLOOR_MS]
    train = [r for r in timed if r["model"] not in HELD_OUT]
    test = [r for r in timed if r["model"] in HELD_OUT]
    print(f"  GEMMs: {len(gemms)} measured, {len(gemms) - len(timed)} under "
          f"{DISPATCH_FLOOR_MS * 1e3:.0f} us left out (dispatch floor); fit on {len(train)} "
          f"(h2048, h4096, h5120, h12288), held out {len(test)} (Llama widths)")

    print("\n  GEMM curve variants (fitted on the fit set; error on each set):")
    print(HEADER)
    print(line("defaults (0.80/256/256, waves on)",
               errors(lambda r: gemm_ns(DEFAULTS, r, hbm), test)) + "  held out")
    variants = {}
    for wq in (False, True):
        P = fit_gemm(train, hbm, wq=wq)
        variants[wq] = P
        tag = (f"fit, waves {'on ' if wq else 'off'}: {P['e0']:.3f}/{P['k_half']:.0f}"
               f"/{P['skmin']:.0f}")
        print(line(tag, errors(lambda r: gemm_ns(P, r, hbm), train)) + "  fit set")
        print(line("", errors(lambda r: gemm_ns(P, r, hbm), test)) + "  held out")

    P = rounded_gemm(variants[False])
    print(f"\n  Calibrated GEMM curve ({dev}): gemm_efficiency {P['e0']:.3f}, gemm_k_half "
          f"{P['k_half']:.0f}, gemm_split_k_min {P['skmin']:.0f}, 128x128 tiles, "
          f"wave_quantization false")
    print(HEADER)
    for tag, rows in (("fit set", train), ("held out", test), ("all >= 50 us", timed)):
        print(line(tag + " (defaults)", errors(lambda r: gemm_ns(DEFAULTS, r, hbm), rows)))
        print(line(tag + " (calibrated)", errors(lambda r: gemm_ns(P, r, hbm), rows)))
    seen = {(r["m"], r["k"], r["n"], r["pass"]) for r in gemms if r["model"] not in HELD_OUT}
    unseen = [r for r in test if (r["m"], r["k"], r["n"], r["pass"]) not in seen]
    print(line("held out, shape in no fitted row (defaults)",
               errors(lambda r: gemm_ns(DEFAULTS, r, hbm), unseen)))
    print(line("held out, shape in no fitted row (calibrated)",
               errors(lambda r: gemm_ns(P, r, hbm), unseen)))
    for ps in ("F", "BI", "BW"):
        rows = [r for r in unseen if r["pass"] == ps]
        print(line(f"  {ps} (calibrated)", errors(lambda r: gemm_ns(P, r, hbm), rows)))
    print("  held out, per pass:")
    for ps in ("F", "BI", "BW"):
        rows = [r for r in test if r["pass"] == ps]
        print(line(f"{ps} (defaults)", errors(lambda r: gemm_ns(DEFAULTS, r, hbm), rows)))
        print(line(f"{ps} (calibrated)", errors(lambda r: gemm_ns(P, r, hbm), rows)))
    e = errors(lambda r: gemm_ns(P, r, hbm), test)
    print("  held-out kernels the calibrated curve misses by more than 10 %:")
    for err, r in sorted(zip(e, test), key=lambda t: -abs(t[0])):
        if abs(err) <= 0.10:
            break
        print(f"    {100 * err:+6.1f} %  {r['model']:<12} T {r['tokens']:5d} TP {r['tp']} "
              f"{r['op']:<8} {r['pass']:<2}  m {r['m']:5d} k {r['k']:5d} n {r['n']:5d}  "
              f"{r['ms'] * 1e3:7.1f} us  {r['tflops']:4.0f} TFLOPS")
    if old_h100_table is not None:
        rows = [dict(k, ms=k["ns"] / 1e6) for k in old_h100_table["kernels"]]
        print(f"\n  tests/data/costmodel/h100_gemm_measured.json ({len(rows)} GEMMs, measured "
              f"earlier on another H100 with h100_gemm_bench.py):")
        print(HEADER)
        print(line("defaults", errors(lambda r: gemm_ns(DEFAULTS, r, hbm), rows)))
        print(line(f"calibrated ({dev})", errors(lambda r: gemm_ns(P, r, hbm), rows)))
        # The same shapes in this sweep: how far two measurements of one GEMM fall apart.
        sweep = {(r["m"], r["k"], r["n"], r["pass"]): r["ms"] for r in gemms}
        both = [r for r in rows if (r["m"], r["k"], r["n"], r["pass"]) in sweep]
        print(line("this sweep vs that table",
                   errors(lambda r: sweep[(r["m"], r["k"], r["n"], r["pass"])] * 1e6, both)))

    # Attention.
    timed_att = attention_rows(attention)
    causal = [r for r in timed_att if r["causal"]]
    A = rounded_attention(fit_attention(causal))
    old = dict(e_inf=0.40, s_half=0.0, w_half=0.0, bwd=1.0)
    print(f"\n  Attention: {len(attention)} rows (F, and B = FB - F), "
          f"{len(attention) - len(timed_att)} left out (F < 75 us or FB < 300 us: host-bound); "
          f"{len(causal)} causal rows fitted")
    print(f"  Calibrated ({dev}): attention_efficiency {A['e_inf']:.3f}, attention_seq_half "
          f"{A['s_half']:.0f}, attention_waves_half {A['w_half']:.2f}, attention_bwd_ratio "
          f"{A['bwd']:.3f}")
    print(HEADER)
    for tag, rows in (("causal F", [r for r in causal if r["pass"] == "F"]),
                      ("causal B", [r for r in causal if r["pass"] == "B"])):
        print(line(tag + " (defaults 0.40)", errors(lambda r: attention_ns(old, r), rows)))
        print(line(tag + " (calibrated)", errors(lambda r: attention_ns(A, r), rows)))
    print(line("causal F+B, leave-one-out", leave_one_out(causal)))
    print(line("  without the waves term, in-sample",
               errors(lambda r: attention_ns(fit_attention(causal, waves_term=False), r),
                      causal)))
    print(line("  without the waves term, leave-one-out",
               leave_one_out(causal, waves_term=False)))
    for ps in ("F", "B"):
        rows = [r for r in timed_att if not r["causal"] and r["pass"] == ps]
        print(line(f"non-causal {ps} (calibrated)", errors(lambda r: attention_ns(A, r), rows)))
    print("  causal efficiency of peak (fill 1), measured / calibrated model:")
    for r in causal:
        eff = attention_flops(r) / (r["ms"] * 1e6 * PEAK_FLOPS_PER_NS)
        model = attention_flops(r) / (attention_ns(A, r) * PEAK_FLOPS_PER_NS)
        print(f"    heads {r['heads']:2d} s {r['seq']:5d} {r['pass']}: {r['ms'] * 1e3:7.1f} us  "
              f"{eff:.3f} / {model:.3f}")

    # Memory-bound kernels.
    print(f"\n  Memory-bound kernels, achieved fraction of {hbm:.0f} GB/s (model: "
          f"{MEMORY_EFFICIENCY:.2f}), rows >= 50 us:")
    for op in ("layer_norm", "gelu", "add"):
        for ps in ("F", "B"):
            rows = [r for r in memory if r["op"] == op and r["pass"] == ps
                    and r["ms"] >= DISPATCH_FLOOR_MS]
            if rows:
                fr = [r["bytes"] / (r["ms"] * 1e6) / hbm for r in rows]
                print(f"    {op:<10} {ps}: n {len(rows):2d}  median {np.median(fr):.2f}  "
                      f"range {min(fr):.2f} .. {max(fr):.2f}")
    print()
    return D, P, A, timed, timed_att


def write_table(path, dev, D, timed, attention):
    names = {"qkv": "qkv", "out_proj": "out_proj", "mlp_up": "mlp_up", "mlp_down": "mlp_down"}
    seen = {}
    for r in timed:
        key = (r["op"], r["pass"], r["m"], r["n"], r["k"])
        ns = int(round(r["ms"] * 1e6))
        seen[key] = min(ns, seen.get(key, ns))
    kernels = [{"op": names[op], "pass": ps, "dtype": "bf16", "m": m, "n": n, "k": k, "ns": ns}
               for (op, ps, m, n, k), ns in sorted(seen.items())]
    for r in attention:
        if not r["causal"]:
            continue
        # The backward is B in a plan without split backward and BI with it (no weights).
        for ps in (("F",) if r["pass"] == "F" else ("B", "BI")):
            kernels.append({"op": "attention", "pass": ps, "dtype": "bf16", "m": r["seq"],
                            "n": r["seq"], "k": r["head_dim"], "batch": r["heads"] * r["batch"],
                            "ns": int(round(r["ms"] * 1e6))})
    table = {"version": 1, "device": "h200" if dev == "h200" else "h100-sxm",
             "kernels": kernels}
    with open(path, "w") as f:  # one kernel per line
        f.write('{"version": 1, "device": "%s", "kernels": [\n' % table["device"])
        f.write(",\n".join("  " + json.dumps(k) for k in kernels))
        f.write("\n]}\n")
    print(f"wrote {path}: {len(kernels)} kernels ({D['device']})")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tables", help="directory to write profiled tables into")
    args = ap.parse_args()
    with open(os.path.join(DATA, "h100_gemm_measured.json")) as f:
        old = json.load(f)
    for dev in ("h200", "h100"):
        D, P, A, timed, attention = report(dev, old)
        if args.tables:
            write_table(os.path.join(args.tables, f"{dev}_kernels_profiled.json"), dev, D,
                        timed, attention)
    return 0


if __name__ == "__main__":
    sys.exit(main())

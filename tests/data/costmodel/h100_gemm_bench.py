# Measures the bf16 GEMMs of transformer layers (forward, input gradient, weight gradient) with
# torch.matmul on one GPU: median of 30 runs after 10 warm-ups, CUDA events. Writes
# $OUT/gemm.json; h100_gemm_measured.json is its output on an H100 80GB HBM3 (SXM, 700 W) with
# torch 2.11.0+cu130, converted to Stretto's profile-table format (ns = round(ms * 1e6)).
import json, os, torch
d = torch.device("cuda"); B = torch.bfloat16
def bench(m, k, n, kind):
    r = lambda *s: torch.randn(*s, device=d, dtype=B)
    if kind == "F": a, b = r(m, k), r(k, n)          # Y = X W
    elif kind == "BI": a, b = r(m, n), r(k, n).t()   # dX = dY W^T
    else: a, b = r(m, k).t(), r(m, n)                # dW = X^T dY
    for _ in range(10): torch.matmul(a, b)
    torch.cuda.synchronize(); ts = []
    for _ in range(30):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); torch.matmul(a, b); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
    ts.sort(); return ts[15]
rows = []
for nm, T, h, f, t in [("gpt7b_tp1", 8192, 4096, 16384, 1), ("gpt13b_tp8", 4096, 5120, 20480, 8),
                       ("gpt175b_tp8", 2048, 12288, 49152, 8)]:
    for op, k, n in [("qkv", h, 3*h//t), ("out_proj", h//t, h), ("mlp_up", h, f//t), ("mlp_down", f//t, h)]:
        for kind in ["F", "BI", "BW"]:
            ms = bench(T, k, n, kind)
            rows.append({"model": nm, "op": op, "pass": kind, "m": T, "k": k, "n": n, "ms": ms,
                         "tflops": 2*T*k*n/ms/1e9})
json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows},
          open(os.path.join(os.environ["OUT"], "gemm.json"), "w"), indent=1)

# Kernel sweep for calibrating the analytic cost model on one GPU (run on the GPU machine):
#   OUT=dir python3 bench/gpu/kernel_sweep.py
# Times, with CUDA events (median of REPS after WARM warm-ups), on random bf16 data:
#   - the forward (F), input-gradient (BI) and weight-gradient (BW) GEMMs of the QKV, output,
#     MLP-up and MLP-down projections of transformer layers: 7 model widths x 4 token counts x
#     TP 1/2/4/8 (torch.matmul, as the replay backend runs them);
#   - flash attention (scaled_dot_product_attention, causal, head dim 128) forward and backward;
#   - memory-bound ops: layer_norm F/B, gelu F/B, add.
# Writes $OUT/kernels.json: {"device", "torch", "cuda", "rows": [...]}, one row per kernel.
import json, os, sys, time
import torch
import torch.nn.functional as Fn

dev = torch.device("cuda")
B = torch.bfloat16
WARM, REPS = 5, 20
torch.manual_seed(0)


def timed(fn, reps=REPS, warm=WARM):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
          for _ in range(reps)]
    for s, e in ev:
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    ts = sorted(s.elapsed_time(e) for s, e in ev)
    return ts[len(ts) // 2], ts[0], ts[-1]


rows = []
t0 = time.time()

# --- GEMMs --------------------------------------------------------------------------------
models = [("h2048", 2048, 8192), ("h4096_llama", 4096, 11008), ("h4096", 4096, 16384),
          ("h5120_llama", 5120, 13824), ("h5120", 5120, 20480), ("h8192_llama", 8192, 28672),
          ("h12288", 12288, 49152)]
for name, h, f in models:
    for T in (2048, 4096, 8192, 16384):
        for tp in (1, 2, 4, 8):
            for op, k, n in (("qkv", h, 3 * h // tp), ("out_proj", h // tp, h),
                             ("mlp_up", h, f // tp), ("mlp_down", f // tp, h)):
                m = T
                x = torch.randn(m, k, device=dev, dtype=B)
                w = torch.randn(k, n, device=dev, dtype=B)
                dy = torch.randn(m, n, device=dev, dtype=B)
                wt, xt = w.t(), x.t()
                for ps, fn in (("F", lambda: torch.matmul(x, w)),
                               ("BI", lambda: torch.matmul(dy, wt)),
                               ("BW", lambda: torch.matmul(xt, dy))):
                    med, lo, hi = timed(fn)
                    rows.append({"kind": "gemm", "model": name, "tokens": T, "tp": tp, "op": op,
                                 "pass": ps, "m": m, "k": k, "n": n, "ms": med, "min_ms": lo,
                                 "max_ms": hi, "tflops": 2 * m * k * n / med / 1e9})
                del x, w, dy, wt, xt
    print(f"gemm {name} done at {time.time() - t0:.1f} s", file=sys.stderr, flush=True)

# --- flash attention ----------------------------------------------------------------------
for s in (2048, 4096, 8192):
    for heads in (8, 16, 32, 64):
        for causal in (True, False):
            q, k_, v = (torch.randn(1, heads, s, 128, device=dev, dtype=B, requires_grad=True)
                        for _ in range(3))
            out = Fn.scaled_dot_product_attention(q, k_, v, is_causal=causal)
            g = torch.randn_like(out)
            med, lo, hi = timed(lambda: Fn.scaled_dot_product_attention(q, k_, v, is_causal=causal))
            rows.append({"kind": "attention", "pass": "F", "batch": 1, "heads": heads, "seq": s,
                         "head_dim": 128, "causal": causal, "ms": med, "min_ms": lo, "max_ms": hi})

            def bwd():
                o = Fn.scaled_dot_product_attention(q, k_, v, is_causal=causal)
                torch.autograd.grad(o, (q, k_, v), g)
            med_fb, lo, hi = timed(bwd)
            rows.append({"kind": "attention", "pass": "FB", "batch": 1, "heads": heads, "seq": s,
                         "head_dim": 128, "causal": causal, "ms": med_fb, "min_ms": lo,
                         "max_ms": hi})
            del q, k_, v, out, g
print(f"attention done at {time.time() - t0:.1f} s", file=sys.stderr, flush=True)

# --- memory-bound ops ---------------------------------------------------------------------
for T in (4096, 8192, 16384):
    for h in (2048, 4096, 8192, 12288):
        x = torch.randn(T, h, device=dev, dtype=B, requires_grad=True)
        y = torch.randn(T, h, device=dev, dtype=B)
        wln = torch.ones(h, device=dev, dtype=B, requires_grad=True)
        bln = torch.zeros(h, device=dev, dtype=B, requires_grad=True)
        g = torch.randn(T, h, device=dev, dtype=B)
        nbytes = T * h * 2
        cases = [
            ("layer_norm", "F", lambda: Fn.layer_norm(x, (h,), wln, bln), 2 * nbytes),
            ("gelu", "F", lambda: Fn.gelu(x), 2 * nbytes),
            ("add", "F", lambda: torch.add(x, y), 3 * nbytes),
        ]
        for op, ps, fn, by in cases:
            med, lo, hi = timed(fn)
            rows.append({"kind": "memory", "op": op, "pass": ps, "tokens": T, "hidden": h,
                         "bytes": by, "ms": med, "min_ms": lo, "max_ms": hi})
        o_ln = Fn.layer_norm(x, (h,), wln, bln)
        o_ge = Fn.gelu(x)
        for op, o, by in (("layer_norm", o_ln, 3 * nbytes), ("gelu", o_ge, 3 * nbytes)):
            med, lo, hi = timed(lambda: torch.autograd.grad(o, x, g, retain_graph=True))
            rows.append({"kind": "memory", "op": op, "pass": "B", "tokens": T, "hidden": h,
                         "bytes": by, "ms": med, "min_ms": lo, "max_ms": hi})
        del x, y, g, o_ln, o_ge
print(f"memory-bound done at {time.time() - t0:.1f} s", file=sys.stderr, flush=True)

props = torch.cuda.get_device_properties(0)
json.dump({"device": torch.cuda.get_device_name(), "sms": props.multi_processor_count,
           "torch": torch.__version__, "cuda": torch.version.cuda,
           "method": f"CUDA events, median of {REPS} after {WARM} warm-ups, random bf16 data",
           "rows": rows},
          open(os.path.join(os.environ.get("OUT", "."), "kernels.json"), "w"), indent=0)
print(f"{len(rows)} kernels in {time.time() - t0:.1f} s", file=sys.stderr)

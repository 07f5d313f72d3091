#!/usr/bin/env python3
"""Writes real PyTorch profiler (Kineto) traces for `stretto import kineto` tests.

Two ranks (processes) on one CUDA machine: each runs a tiny MLP (Linear 1024->4096, ReLU,
Linear 4096->1024, fp32) forward and backward on the GPU for two microbatches under
record_function labels in Stretto's naming ("F PP0 MB1 layer0.mlp.up"), then a gradient
all-reduce and a parameter all-gather over Gloo (CPU tensors), for the profiler's warm-up step
and 4 active ProfilerStep#N iterations. This is what wrote tests/data/traces/real/ (PyTorch
2.11.0+cu130 on one H100). Debian's LibTorch 1.13 cannot: it is built without Kineto
(USE_KINETO=0; ProfilerResult::save throws).
Usage: python3 scripts/kineto_sample.py OUT_DIR   ->  OUT_DIR/rank{0,1}.pt.trace.json.gz
"""
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity as A
from torch.profiler import profile, schedule
from torch.profiler import record_function as rf


def run(r, w, out, st):
    dist.init_process_group("gloo", init_method="file://" + st, rank=r, world_size=w)
    up = torch.nn.Linear(1024, 4096, bias=False).cuda()
    dn = torch.nn.Linear(4096, 1024, bias=False).cuda()
    p = os.path.join(out, f"rank{r}.pt.trace.json.gz")
    with profile(activities=[A.CPU, A.CUDA], record_shapes=True, profile_memory=True,
                 schedule=schedule(wait=0, warmup=1, active=4),
                 on_trace_ready=lambda q: q.export_chrome_trace(p)) as prof:
        for s in range(5):
            for mb in range(2):
                x = torch.randn(2048, 1024, device="cuda")
                with rf(f"F PP{r} MB{mb} layer0.mlp.up"):
                    h = up(x)
                with rf(f"F PP{r} MB{mb} layer0.mlp.down"):
                    y = dn(torch.relu(h))
                with rf(f"B PP{r} MB{mb}"):
                    y.square().mean().backward()
            g = up.weight.grad.detach().cpu()
            with rf(f"all_reduce PP{r} grad-reduce"):
                dist.all_reduce(g)
            f = torch.empty(65536 * w)
            with rf(f"all_gather PP{r} param-gather"):
                dist.all_gather_into_tensor(f, torch.ones(65536))
            torch.cuda.synchronize()
            prof.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    o = sys.argv[1]
    os.makedirs(o, exist_ok=True)
    mp.spawn(run, args=(2, o, tempfile.mktemp()), nprocs=2)

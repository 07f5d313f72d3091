#!/usr/bin/env python3
"""Writes the hand-made Kineto traces of tests/traces (run from this folder; outputs committed).

Two ranks, NCCL, three ProfilerStep#N of 1000 us (the first is warm-up). Each step, per rank r:
  F PP{r} MB0 layer0.mlp.up   aten::linear [[4,512,1024],[4096,1024]] bf16 -> GEMM kernel 100 us
  BW PP{r} MB0 layer0.mlp.up  aten::mm                                 -> GEMM kernel 150 us
  record_param_comms allreduce 1048576 x BFloat16, group 2 -> NCCL kernel 80 + 10 r us
      (the kernel carries the collective args, as Kineto copies them)
  record_param_comms _allgather_base 262144 -> 524288 x Float, ranks "[0, 1]" (no Group size)
      -> NCCL kernel 40 us that carries no args (found by External id)
  aten::add, unlabelled -> elementwise kernel 20 us
  [memory] Total Allocated 1000000 + 10 s + r on cuda:r
Rank 1 is written gzip-compressed.
"""
import gzip, json

def trace(rank):
    ev = []
    ext = [1000 * (rank + 1)]
    corr = [5000 * (rank + 1)]
    def nxt(c):
        c[0] += 1
        return c[0]
    for s in range(3):
        t0 = 10000.0 + s * 1000.0
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s+1}", "pid": 100, "tid": 1,
                   "ts": t0, "dur": 1000.0, "args": {}})
        def gemm(label, start, op, dims, kdur):
            e, c = nxt(ext), nxt(corr)
            ev.append({"ph": "X", "cat": "user_annotation", "name": label, "pid": 100, "tid": 1,
                       "ts": t0 + start, "dur": 100.0, "args": {}})
            ev.append({"ph": "X", "cat": "cpu_op", "name": op, "pid": 100, "tid": 1, "ts": t0 + start + 10,
                       "dur": 30.0, "args": {"External id": e, "Input Dims": dims,
                                             "Input type": ["c10::BFloat16"] * len(dims)}})
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 1,
                       "ts": t0 + start + 15, "dur": 5.0, "args": {"correlation": c, "External id": e}})
            ev.append({"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16bf16_bf16f32", "pid": rank,
                       "tid": 7, "ts": t0 + start + 190, "dur": kdur,
                       "args": {"stream": 7, "correlation": c, "External id": e, "device": rank}})
        gemm(f"F PP{rank} MB0 layer0.mlp.up", 10, "aten::linear", [[4, 512, 1024], [4096, 1024]], 100.0)
        gemm(f"BW PP{rank} MB0 layer0.mlp.up", 300, "aten::mm", [[1024, 2048], [2048, 4096]], 150.0)
        coll = {"Collective name": "allreduce", "In msg nelems": 1048576, "Out msg nelems": 1048576,
                "Group size": 2, "dtype": "BFloat16", "Process Group Ranks": "[0, 1]", "Seq": s}
        e, c = nxt(ext), nxt(corr)
        ev.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 100, "tid": 1,
                   "ts": t0 + 500, "dur": 10.0, "args": dict(coll, **{"External id": e})})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 1,
                   "ts": t0 + 505, "dur": 3.0, "args": {"correlation": c, "External id": e}})
        ev.append({"ph": "X", "cat": "Kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
                   "pid": rank, "tid": 20, "ts": t0 + 600, "dur": 80.0 + 10 * rank,
                   "args": dict(coll, **{"External id": e, "correlation": c, "stream": 20})})
        e, c = nxt(ext), nxt(corr)
        ev.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 100, "tid": 1,
                   "ts": t0 + 520, "dur": 10.0,
                   "args": {"Collective name": "_allgather_base", "In msg nelems": 262144,
                            "Out msg nelems": 524288, "dtype": "Float",
                            "Process Group Ranks": "[0, 1]", "External id": e}})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 1,
                   "ts": t0 + 525, "dur": 3.0, "args": {"correlation": c, "External id": e}})
        ev.append({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
                   "pid": rank, "tid": 20, "ts": t0 + 690, "dur": 40.0,
                   "args": {"External id": e, "correlation": c, "stream": 20}})
        e, c = nxt(ext), nxt(corr)
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 100, "tid": 1, "ts": t0 + 700,
                   "dur": 8.0, "args": {"External id": e}})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 1,
                   "ts": t0 + 702, "dur": 3.0, "args": {"correlation": c}})
        ev.append({"ph": "X", "cat": "kernel", "name": "vectorized_elementwise_kernel", "pid": rank, "tid": 7,
                   "ts": t0 + 760, "dur": 20.0, "args": {"correlation": c, "External id": e, "stream": 7}})
        ev.append({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 100, "tid": 1, "s": "t",
                   "ts": t0 + 800, "args": {"Total Allocated": 1000000 + 10 * s + rank, "Bytes": 10,
                                              "Device Type": 1, "Device Id": rank}})
    return {"schemaVersion": 1, "deviceProperties": [{"id": rank, "name": "NVIDIA H100 80GB HBM3"}],
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
            "traceEvents": ev, "traceName": f"rank{rank}", "baseTimeNanoseconds": 1700000000000000000}

def dump(t):
    # one event per line, as Kineto writes
    lines = ",\n".join(json.dumps(e) for e in t["traceEvents"])
    head = {k: v for k, v in t.items() if k != "traceEvents"}
    h = json.dumps(head)[:-1]
    return h + ', "traceEvents": [\n' + lines + "\n]}\n"

open("kineto_rank0.json", "w").write(dump(trace(0)))
with gzip.open("kineto_rank1.json.gz", "wt") as f:
    f.write(dump(trace(1)))
full = dump(trace(0))
open("bad/truncated.json", "w").write(full[: len(full) // 2])
raw = gzip.compress(dump(trace(1)).encode())
open("bad/truncated.json.gz", "wb").write(raw[: len(raw) // 2])
lines = dump(trace(0)).split("\n")
lines[5] = lines[5].replace('"dur": 100.0', '"dur": "100us"')
open("bad/bad_dur.json", "w").write("\n".join(lines))
t = trace(0)
for e in t["traceEvents"]:
    if e["args"].get("Collective name") == "allreduce":
        e["args"]["In msg nelems"] = "lots"
        break
open("bad/bad_nelems.json", "w").write(dump(t))
open("bad/not_a_trace.json", "w").write('{"model": {"family": "synthetic"}}\n')
open("bad/syntax.json", "w").write('{"traceEvents": [\n  {"ph": "X", "name": "a", "ts": 1, "dur": 2,}\n]}\n')

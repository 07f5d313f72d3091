#!/usr/bin/env python3
"""Writes the hand-made NCCL traces of tests/traces (run from this folder; outputs committed):
nccl_kernels_rank{0,1}.json, two ranks, NCCL, three ProfilerStep#N of 5000 us (the first is
warm-up). Each collective is joined to its GPU kernel a different way, as Kineto of different
PyTorch versions writes it (docs/validation.md, "Kineto import"). Per step, per rank r:
  A  all_reduce 16 Mi x Float, group 2: record_param_comms (60 us) enclosing nccl:all_reduce
     (40 us); the launch and ncclKernel_AllReduce_RING_LL_Sum_float carry the nccl:all_reduce
     op's id as lower-case "external id" (older Kineto); kernel 1500 + 100 r us
  B  reduce_scatter 8 Mi x BFloat16 in, group 2: the launch has no External id but lies inside
     record_param_comms on its thread; kernel ncclDevKernel_ReduceScatter 700 us
  C  all_gather 1 Mi -> 2 Mi x Float, ranks "[0, 1]": no launch event was recorded; kernel
     ncclDevKernel_AllGather 300 us found by stream order alone
  D  all_reduce 4 Ki x Float, group 2: no kernel at all; host time 25 us (unusable)
  E  all_reduce 128 Mi x BFloat16, group 2: the kernel carries the args (newer Kineto) but
     lasts 50 us: 5.4 TB/s, faster than any link (refused)
  F  all_to_all 4 Mi x BFloat16, group 2, process group "3", Seq 100 + step: no launch recorded
     and no External id; the kernel carries the args (Seq, process group name) and is joined to
     its call by them, not to the call before it (1 Mi x Float, process group "5", the same Seq,
     no kernel: host time 15 us, unusable); kernel ncclDevKernel_SendRecv 400 us
  aten::add -> elementwise kernel 20 us; a device-to-device memcpy 30 us; a memset 5 us
"""
import json


def trace(rank):
    ev = []
    ids = {"ext": 100 * (rank + 1), "corr": 9000 * (rank + 1)}

    def nxt(k):
        ids[k] += 1
        return ids[k]

    def x(cat, name, ts, dur, args, pid=300, tid=1):
        ev.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts,
                   "dur": dur, "args": args})

    def kernel(name, ts, dur, args, cat="kernel", stream=16):
        x(cat, name, ts, dur, dict(args, device=rank, stream=stream), pid=rank,
          tid=f"stream {stream}")

    def comms(name, nelems_in, nelems_out, dtype, ts, dur, group=2, **more):
        e = nxt("ext")
        args = {"Collective name": name, "In msg nelems": nelems_in, "Out msg nelems": nelems_out,
                "dtype": dtype, "External id": e, **more}
        if group:
            args["Group size"] = group
        x("cpu_op", "record_param_comms", ts, dur, args)
        return e, args

    for s in range(3):
        t0 = 10000.0 + s * 5000.0
        x("user_annotation", f"ProfilerStep#{s + 1}", t0, 5000.0, {})
        # A
        comms("allreduce", 16777216, 16777216, "Float", t0 + 100, 60.0)
        e = nxt("ext")
        x("cpu_op", "nccl:all_reduce", t0 + 110, 40.0,
          {"External id": e, "Input Dims": [[16777216]], "Input type": ["float"]})
        c = nxt("corr")
        x("cuda_runtime", "cudaLaunchKernel", t0 + 120, 5.0, {"correlation": c, "external id": e})
        kernel("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", t0 + 200,
               1500.0 + 100 * rank, {"correlation": c, "external id": e}, cat="Kernel")
        # B
        comms("_reduce_scatter_base", 8388608, 4194304, "BFloat16", t0 + 300, 50.0)
        c = nxt("corr")
        x("cuda_runtime", "cudaLaunchKernel", t0 + 320, 5.0, {"correlation": c})
        kernel("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
               t0 + 1800, 700.0, {"correlation": c})
        # C
        comms("_allgather_base", 1048576, 2097152, "Float", t0 + 400, 30.0, group=0,
              **{"Process Group Ranks": "[0, 1]"})
        kernel("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
               t0 + 2600, 300.0, {"correlation": nxt("corr")})
        # D
        comms("allreduce", 4096, 4096, "Float", t0 + 450, 25.0)
        # E
        e, args = comms("allreduce", 134217728, 134217728, "BFloat16", t0 + 500, 20.0, Seq=s)
        c = nxt("corr")
        x("cuda_runtime", "cudaLaunchKernel", t0 + 505, 5.0, {"correlation": c, "External id": e})
        kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
               t0 + 3000, 50.0, dict(args, correlation=c))
        # F
        comms("all_to_all", 1048576, 1048576, "Float", t0 + 525, 15.0, Seq=100 + s,
              **{"Process Group Name": "5"})
        e, args = comms("all_to_all", 4194304, 4194304, "BFloat16", t0 + 545, 20.0, Seq=100 + s,
                        **{"Process Group Name": "3"})
        kargs = {k: v for k, v in args.items() if k != "External id"}
        kernel("ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)", t0 + 3200, 400.0,
               dict(kargs, correlation=nxt("corr")))
        # compute, memcpy, memset on the compute stream
        e, c = nxt("ext"), nxt("corr")
        x("cpu_op", "aten::add", t0 + 600, 8.0, {"External id": e})
        x("cuda_runtime", "cudaLaunchKernel", t0 + 602, 3.0, {"correlation": c, "External id": e})
        kernel("void at::native::vectorized_elementwise_kernel<4>", t0 + 650, 20.0,
               {"correlation": c, "External id": e}, stream=7)
        c = nxt("corr")
        x("cuda_runtime", "cudaMemcpyAsync", t0 + 700, 4.0, {"correlation": c})
        kernel("Memcpy DtoD (Device -> Device)", t0 + 710, 30.0,
               {"correlation": c, "bytes": 8388608}, cat="gpu_memcpy", stream=7)
        c = nxt("corr")
        x("cuda_runtime", "cudaMemsetAsync", t0 + 750, 3.0, {"correlation": c})
        kernel("Memset (Device)", t0 + 760, 5.0, {"correlation": c, "bytes": 65536},
               cat="gpu_memset", stream=7)
    return {"schemaVersion": 1, "deviceProperties": [{"id": rank, "name": "NVIDIA A100-SXM4-80GB"}],
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
            "traceEvents": ev, "traceName": f"rank{rank}"}


for r in range(2):
    t = trace(r)
    head = json.dumps({k: v for k, v in t.items() if k != "traceEvents"})[:-1]
    body = ",\n".join(json.dumps(e) for e in t["traceEvents"])
    open(f"nccl_kernels_rank{r}.json", "w").write(head + ', "traceEvents": [\n' + body + "\n]}\n")

#pragma once
// Import of PyTorch profiler (Kineto) traces: measured kernel and collective times for the
// profiled cost model, and a summary of what the traces hold (`stretto import kineto`).
//
// One trace per rank (plain or .gz), streamed (trace_reader.h). Per file the importer keeps a
// compact record of each kernel, CPU op with an `External id`, launch (runtime call with a
// `correlation`), labelled range and `ProfilerStep#N` (about 60 bytes each, names interned;
// stacks, shapes of other ops and unknown args are dropped), joins them at the end of the file
// and keeps only aggregates across files. Memory is bounded by one file's records, not by the
// text size.
//
// Joins (the Kineto conventions, docs/validation.md):
//  * kernel -> launch by `correlation`; kernel -> CPU op by `External id`;
//  * kernel -> step: the `ProfilerStep#N` range enclosing its launch (or its CPU op, or itself);
//    the first step is warm-up and is dropped when there are several (`skip_steps`); a step's
//    time is as kineto_step.h defines it, shared with `compare`;
//  * kernel -> logical op: `args.piper_dag_node`, else the innermost labelled range
//    (op_label.h) enclosing its launch on the launching thread. On a CPU-only trace, the
//    labelled ranges themselves are the measured ops.
//  * collectives: `Collective name`, `In msg nelems`, `Out msg nelems`, `Group size`, `dtype`,
//    `Process Group Ranks` (a list, or a string possibly truncated with "..."), `Seq`,
//    `Process Group Name`, read from the kernel (Kineto copies them there) or from its
//    `record_param_comms` CPU op (a c10d `nccl:*` range nested in it is the same call). Each
//    call is timed by its GPU kernels (`nccl*Kernel_*` on the NCCL stream), found in this
//    order: the kernel's `External id` (either spelling) or its launch's; the call enclosing
//    the kernel's launch on the launching thread; for a kernel carrying the args, the call
//    without a kernel of the same kind and `Seq` (and process group name and group size where
//    both give one), else a call of its own; stream order (the n-th unmatched kernel to the
//    n-th unmatched call). A Gloo range (`gloo:*`) is the CPU backend doing the work: timed by
//    itself. Any other call with no kernel has only the host's launch time: reported, never
//    filed in the table. A collective whose bus bandwidth exceeds the link is refused (a
//    warning, not filed).
//
// The profiled table (docs/costmodel.md) gets: every collective (kind, group size, nodes,
// bytes) with the median time; every labelled op instance that names a model op and a pass,
// with the forward GEMM shape found in its forward instance, the median of its instances.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "stretto/support/diag.h"
#include "stretto/plan/json_source.h"
#include "stretto/traces/kineto_step.h"

namespace stretto::traces {

struct KinetoImportOptions {
  /// Leading ProfilerStep#N ranges to drop as warm-up; -1 = one when there are two or more.
  int skip_steps = -1;
  /// Nodes spanned by every collective group (the traces do not say; 1 = one host).
  int nodes = 1;
  /// The fastest link a device has, GB/s per direction: no collective's bus bandwidth can
  /// exceed it. Default: NVLink 5, 1.8 TB/s per GPU both directions together (NVIDIA B200
  /// data sheet), the fastest link any GPU has; `import kineto --plan` takes the plan's.
  double link_GBps = 900.0;
};

/// Distribution of measured durations (ns).
struct Spread {
  size_t count = 0;
  int64_t median = 0, min = 0, max = 0, total = 0;
};

struct KinetoRank {
  std::string file;
  int rank = -1;        // distributedInfo.rank, or the file's position when absent
  bool rank_from_file_order = false;
  int world_size = 0;
  std::string backend;  // distributedInfo.backend
  std::string device;   // deviceProperties[0].name, "cpu" when there are no GPU events
  size_t events = 0;
  uint64_t bytes = 0;
  bool gzip = false;
  size_t steps_seen = 0, steps_used = 0;
  Spread step;  // durations of the used steps
  std::vector<StepSpan> used_steps;  // kineto_step.h, by start
  size_t kernels = 0;  // GPU kernels (compute and communication) in the used steps
  int64_t kernel_ns = 0;
  size_t memcpy = 0, memset = 0;  // GPU memcpy and memset records in the used steps
  int64_t memcpy_ns = 0, memset_ns = 0;
  size_t cpu_ops = 0, labelled_ops = 0;
  std::map<std::string, int64_t> peak_memory;  // "cuda:0" -> peak `Total Allocated` bytes
};

struct KinetoCollective {
  std::string kind;  // all_reduce, all_gather, reduce_scatter, all_to_all, send_recv, broadcast...
  int group_size = 0;
  int64_t bytes = 0;  // CommQuery::bytes convention
  std::string dtype;
  /// What timed it: "kernel" (its GPU kernels), "cpu_thread" (a Gloo range: the CPU backend's
  /// own work) or "host" (the host's launch-side CPU op: no kernel found; not in the table).
  std::string timing = "kernel";
  bool host_timed = false;  // timing != "kernel"
  bool refused = false;     // faster than the link allows: not in the table
  Spread ns;
  double algbw_GBps = 0, busbw_GBps = 0;  // at the median time
};

struct KinetoOpStat {
  std::string key;  // alignment key of the label ("F PP1 MB3" without MB: "F PP1")
  std::string op;   // table op name, or ""
  Spread ns;
};

struct KinetoImport {
  std::vector<KinetoRank> ranks;
  std::vector<std::pair<std::string, Spread>> top_kernels;  // by total time, at most 15
  std::vector<KinetoCollective> collectives;                // by (kind, group, bytes)
  std::vector<KinetoOpStat> ops;                            // labelled ops, by key
  std::map<std::string, size_t> unattributed;               // reason -> count
  std::vector<std::string> warnings;  // collectives refused as faster than the link allows
  /// The step of median duration over the steps every rank used, each from the earliest
  /// rank's start to the latest rank's end (kineto_step.h): what `compare` shows of the trace.
  std::optional<StepSpan> step;
  plan::Json table;  // the profiled cost-model table (version 1)
  size_t table_kernels = 0, table_collectives = 0;
};

/// Reads the traces (one per rank) and aggregates them. Errors are located diagnostics.
Expected<KinetoImport> import_kineto(const std::vector<std::string>& paths,
                                     const KinetoImportOptions& opt = {});

/// The summary for machines (`--format json`).
plan::Json kineto_summary_json(const KinetoImport& k);
/// The summary for people.
std::string kineto_summary_table(const KinetoImport& k);

/// Bytes of one element of a torch dtype name ("Float" 4, "BFloat16" 2, "c10::Half" 2,
/// "Long" 8, ...); 0 if unknown.
int dtype_size(std::string_view torch_dtype);
/// Normalised collective kind of a c10d `Collective name` ("allreduce" -> "all_reduce",
/// "_allgather_base" -> "all_gather", "send" -> "send_recv"); "" if unknown.
std::string collective_kind(std::string_view collective_name);
/// Bus-bandwidth factor of NCCL's tests: all-reduce 2(n-1)/n, all-gather, reduce-scatter and
/// all-to-all (n-1)/n, send/recv and others 1.
double busbw_factor(std::string_view kind, int group_size);

}  // namespace stretto::traces

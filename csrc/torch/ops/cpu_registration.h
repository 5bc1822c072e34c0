// The CPU registration's one template: an op's plan (its output from the output pool) completed for
// the CPU (kernel_args.h), its torch-free kernel run over ranges of items with at::parallel_for,
// the output returned. An op's <op>.cpp names only its plan, its kernel and its thread split.
#pragma once
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>

#include <algorithm>
#include <cstdint>

#include "ops/kernel_args.h"
#include "ops/output_pool.h"  // pooled_empty, the allocator a CPU plan is given

namespace prefetch {

// How a kernel's items (rows, planes or images) are split among threads: `items` in chunks of at
// least `grain`.
struct CpuSplit {
  int64_t items;
  int64_t grain;
};

// The grain that gives a chunk about `work_per_chunk` units of work when each item costs
// `work_per_item` (at least one item).
inline int64_t grain_for(int64_t work_per_chunk, int64_t work_per_item) {
  return std::max<int64_t>(1, work_per_chunk / std::max<int64_t>(1, work_per_item));
}

// Runs `kernel` over plan.args (completed for the CPU) split as `split(plan.args)` says.
template <typename Plan, typename Args, typename Split>
at::Tensor run_cpu(Plan plan, void (*kernel)(const Args&, int64_t, int64_t), Split split) {
  complete_args(&plan, cpu_target());
  const Args& args = plan.args;
  const CpuSplit s = split(args);
  at::parallel_for(0, s.items, s.grain, [&](int64_t begin, int64_t end) { kernel(args, begin, end); });
  return plan.out;
}

}  // namespace prefetch

// kernel_args.h's helpers that are no template: the constants bound for a target, the problems
// thrown, the launch limit described.
#include "ops/kernel_args.h"

#include <sstream>

#include "common/thread_memory.h"  // kVec

namespace prefetch {

at::Tensor bind_constants(const std::vector<kernels::Affine>& affine, const KernelTarget& target,
                          const kernels::Affine** host, const kernels::Affine** device) {
  *host = affine.data();
  *device = nullptr;
  if (!target.cuda || static_cast<int64_t>(affine.size()) <= kernels::kInlineChannels) return at::Tensor();
  TORCH_CHECK(static_cast<bool>(target.upload),
              "prefetch internal error: a CUDA target without an upload for ", affine.size(), " channels");
  at::Tensor table = target.upload(affine);
  TORCH_CHECK(table.defined() && table.numel() * table.element_size() ==
                                     static_cast<int64_t>(affine.size() * sizeof(kernels::Affine)),
              "prefetch internal error: the uploaded constants do not hold ", affine.size(), " channels");
  *device = static_cast<const kernels::Affine*>(table.const_data_ptr());
  return table;
}

bool points_at(const void* ptr, const at::Tensor& t) {
  if (!t.defined()) return ptr == nullptr;
  return t.numel() == 0 || ptr == t.const_data_ptr();
}

void throw_problems(const char* op, const std::vector<std::string>& problems, bool cuda) {
  if (problems.empty()) return;
  std::ostringstream out;
  out << "prefetch internal error: " << op << "'s " << (cuda ? "CUDA" : "CPU")
      << " kernel arguments are incomplete (please report this):";
  for (const std::string& line : problems) out << "\n  " << line;
  TORCH_CHECK(false, out.str());
}

std::string launch_problem(const char* op, bool planned, int64_t C, int64_t h, int64_t w) {
  if (planned) return "";
  std::ostringstream out;
  out << "launch: one sample's output of C x h x w = " << C << " x " << h << " x " << w
      << " needs more CUDA thread items (of " << kernels::kVec << " elements) than the " << op
      << " kernel numbers in 32 bits (2^31 - 1)";
  return out.str();
}

}  // namespace prefetch

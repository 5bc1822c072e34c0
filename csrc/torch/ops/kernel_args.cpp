// complete_args and the completeness checks of kernel_args.h.
#include "ops/kernel_args.h"

#include <sstream>

#include "common/affine_table.h"
#include "flip_crop/flip_crop_thread_work.h"
#include "normalize_flip/normalize_flip_thread_work.h"
#include "ops/plan_common.h"  // out_dtype
#include "resized_crop/resized_crop_thread_work.h"

namespace prefetch {

namespace {

// Collects problems as readable lines: "<field>: <what is wrong>".
class Problems {
 public:
  void require(bool ok, const std::string& what) {
    if (!ok) lines.push_back(what);
  }
  template <class T>
  void same(const char* field, T got, T expected) {
    if (got != expected) {
      std::ostringstream out;
      out << field << " is " << got << ", the output says " << expected;
      lines.push_back(out.str());
    }
  }
  std::vector<std::string> lines;
};

// The per-channel constants, as every backend reads them: the host table (the CPU kernels read it;
// a CUDA launcher passes up to kInlineChannels of it by value) and, for a CUDA kernel with more
// channels, the device table the target's upload returns.
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

// The checks every image op's float output shares.
template <typename Args>
void check_image_output(Problems* p, const Args& a, const at::Tensor& out, int64_t N, int64_t C,
                        int64_t h, int64_t w, size_t affine_count, bool cuda) {
  if (!out.defined() || out.dim() != 4) {
    p->require(false, "out: the plan has no [N, C, h, w] output tensor");
    return;
  }
  p->same("N", N, out.size(0));
  p->same("C", C, out.size(1));
  p->same("h", h, out.size(2));
  p->same("w", w, out.size(3));
  p->same("oN", a.oN, out.stride(0));
  p->same("oC", a.oC, out.stride(1));
  p->same("oY", a.oY, out.stride(2));
  p->same("oX", a.oX, out.stride(3));
  p->require(out.numel() == 0 || a.out == out.data_ptr(), "out: not the output tensor's data");
  p->require(a.dtype == out_dtype(out.scalar_type()), "dtype: not the output tensor's dtype");
  p->require(static_cast<int64_t>(affine_count) == C, "affine: the plan's table has " +
                                                          std::to_string(affine_count) + " channels, C = " +
                                                          std::to_string(C));
  const bool writes = out.numel() > 0;
  p->require(!writes || a.affine != nullptr, "affine: unset (every backend reads the host table)");
  p->require(!writes || !cuda || C <= kernels::kInlineChannels || a.affine_device != nullptr,
             "affine_device: unset for " + std::to_string(C) + " channels (a CUDA kernel reads more than " +
                 std::to_string(kernels::kInlineChannels) + " from the device)");
}

// A table argument as the plan holds it: null when the plan has none, the tensor's data when it
// has elements (an empty tensor's pointer may be null: no thread reads it).
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

// The CUDA launch of `work_per_sample` thread items must be numbered in 32 bits
// (common/launch_split.h).
std::string launch_problem(const char* op, bool planned, int64_t C, int64_t h, int64_t w) {
  if (planned) return "";
  std::ostringstream out;
  out << "launch: one sample's output of C x h x w = " << C << " x " << h << " x " << w
      << " needs more CUDA thread items (of " << kernels::kVec << " elements) than the " << op
      << " kernel numbers in 32 bits (2^31 - 1)";
  return out.str();
}

}  // namespace

std::vector<std::string> normalize_flip_arg_problems(const NormalizeFlipPlan& plan, bool cuda) {
  Problems p;
  const kernels::NormalizeFlipArgs& a = plan.args;
  const kernels::Geometry& g = a.g;
  check_image_output(&p, a, plan.out, g.N, g.C, g.h, g.w, plan.affine.size(), cuda);
  const bool reads = plan.out.defined() && plan.out.numel() > 0 && g.H > 0 && g.W > 0 && g.sources > 0;
  p.require(!reads || a.images != nullptr, "images: unset");
  p.require(points_at(a.offsets, plan.geometry.offsets), "offsets: not the plan's offsets");
  p.require(points_at(a.hflip, plan.geometry.hflip), "hflip: not the plan's hflip");
  p.require(points_at(a.vflip, plan.geometry.vflip), "vflip: not the plan's vflip");
  p.require(points_at(g.rows, plan.geometry.rows), "g.rows: not the plan's gather indices");
  p.require(!plan.geometry.rows.defined() || plan.geometry.rows.numel() == g.N,
            "g.rows: not one index per output sample");
  if (cuda && p.lines.empty()) {
    std::vector<kernels::NormalizeFlipLaunch> launches;
    const std::string why = launch_problem("normalize_flip", kernels::plan_normalize_flip_launches(a, &launches),
                                           g.C, g.h, g.w);
    p.require(why.empty(), why);
  }
  return p.lines;
}

std::vector<std::string> resized_crop_arg_problems(const ResizedCropPlan& plan, bool cuda) {
  Problems p;
  const kernels::ResizedCropArgs& a = plan.args;
  check_image_output(&p, a, plan.out, a.N, a.C, a.h, a.w, plan.affine.size(), cuda);
  p.require(points_at(a.hflip, plan.hflip), "hflip: not the plan's hflip");
  p.require(points_at(a.vflip, plan.vflip), "vflip: not the plan's vflip");
  // The input half: set by plan_resized_crop; the decoding ops fill it per sample themselves.
  if (plan.samples.defined()) {
    p.require(points_at(a.samples, plan.samples), "samples: not the plan's table");
    p.require(plan.samples.dim() == 2 && plan.samples.size(0) == a.N &&
                  plan.samples.size(1) == kernels::kSampleFields,
              "samples: not an [N, " + std::to_string(kernels::kSampleFields) + "] table");
    p.require(a.N == 0 || a.values != nullptr || plan.out.numel() == 0, "values: unset");
  }
  if (cuda && p.lines.empty()) {
    std::vector<kernels::ResizedCropLaunch> launches;
    const std::string why =
        launch_problem("resized_crop", kernels::plan_resized_crop_launches(a, &launches), a.C, a.h, a.w);
    p.require(why.empty(), why);
  }
  return p.lines;
}

std::vector<std::string> flip_crop_arg_problems(const FlipCropPlan& plan, bool cuda) {
  Problems p;
  const kernels::FlipCropArgs& a = plan.args;
  const kernels::Geometry& g = a.g;
  const at::Tensor& out = plan.out;
  if (!out.defined() || out.dim() != 3) {
    p.require(false, "out: the plan has no [N, h, w] output tensor");
    return p.lines;
  }
  p.same("N", g.N, out.size(0));
  p.same("h", g.h, out.size(1));
  p.same("w", g.w, out.size(2));
  p.require(out.is_contiguous(), "out: not contiguous (the kernels write [N, h, w] rows)");
  p.same("itemsize", static_cast<int64_t>(a.itemsize), static_cast<int64_t>(out.element_size()));
  p.require(out.numel() == 0 || a.out == out.data_ptr(), "out: not the output tensor's data");
  const bool reads = out.numel() > 0 && g.H > 0 && g.W > 0 && g.sources > 0;
  p.require(!reads || a.masks != nullptr, "masks: unset");
  p.require(points_at(a.offsets, plan.geometry.offsets), "offsets: not the plan's offsets");
  p.require(points_at(a.hflip, plan.geometry.hflip), "hflip: not the plan's hflip");
  p.require(points_at(a.vflip, plan.geometry.vflip), "vflip: not the plan's vflip");
  p.require(points_at(g.rows, plan.geometry.rows), "g.rows: not the plan's gather indices");
  if (cuda && p.lines.empty()) {
    std::vector<kernels::FlipCropLaunch> launches;
    const std::string why = launch_problem("flip_crop", kernels::plan_flip_crop_launches(a, &launches), 1, g.h, g.w);
    p.require(why.empty(), why);
    p.require(kernels::with_mask_element(a.itemsize, [](auto) {}),
              "itemsize: no kernel for " + std::to_string(a.itemsize) + "-byte mask elements");
  }
  return p.lines;
}

// What the ops over uint8 [N, C, H, W] images share (affine_warp, sharpness, lookup): their
// output, the images, and the per-image tensor the plan holds (`held`, read through `arg`; `field`
// null: not checked here).
// CUDA launches are split by images (common/plane_rows.h): no launch limit to check. False when
// there is no output to check against (the rest is then moot).
template <typename Args>
bool uint8_image_problems(Problems* p, const Args& a, const at::Tensor& out, const void* arg,
                          const at::Tensor& held, const char* field) {
  if (!out.defined() || out.dim() != 4) {
    p->require(false, "out: the plan has no [N, C, H, W] output tensor");
    return false;
  }
  p->same("N", a.N, out.size(0));
  p->same("C", a.C, out.size(1));
  p->same("H", a.H, out.size(2));
  p->same("W", a.W, out.size(3));
  p->require(out.is_contiguous(), "out: not contiguous (the kernels write [N, C, H, W] rows)");
  p->require(out.numel() == 0 || a.out == out.data_ptr(), "out: not the output tensor's data");
  const bool writes = out.numel() > 0;
  p->require(!writes || a.images != nullptr, "images: unset");
  if (field != nullptr) {  // (null: the caller checks its tensor itself)
    p->require(!writes || (arg != nullptr && arg == held.const_data_ptr()),
               std::string(field) + ": not the plan's " + field);
  }
  return true;
}

std::vector<std::string> affine_warp_arg_problems(const AffineWarpPlan& plan, bool /*cuda*/) {
  Problems p;
  const kernels::AffineWarpArgs& a = plan.args;
  if (uint8_image_problems(&p, a, plan.out, a.matrices, plan.matrices, "matrices")) {
    p.require(a.C <= kernels::kWarpMaxChannels, "C: more channels than the fill holds");
  }
  return p.lines;
}

std::vector<std::string> sharpness_arg_problems(const SharpnessPlan& plan, bool /*cuda*/) {
  Problems p;
  uint8_image_problems(&p, plan.args, plan.out, plan.args.factors, plan.factors, "factors");
  return p.lines;
}

std::vector<std::string> lookup_arg_problems(const LookupPlan& plan, bool /*cuda*/) {
  Problems p;
  const kernels::LookupArgs& a = plan.args;
  if (uint8_image_problems(&p, a, plan.out, a.tables, plan.tables, "tables")) {
    p.require(a.T == 1 || a.T == a.C, "T: " + std::to_string(a.T) + " tables for C = " + std::to_string(a.C));
  }
  return p.lines;
}

std::vector<std::string> color_jitter_arg_problems(const ColorJitterPlan& plan, bool /*cuda*/) {
  Problems p;
  const kernels::ColorJitterArgs& a = plan.args;
  // (the steps' pointer is checked below, with the factors')
  if (uint8_image_problems(&p, a, plan.out, nullptr, at::Tensor(), nullptr)) {
    // A chain of no step (K = 0: RandAugment's num_ops=0, a table with no column) copies the image;
    // its empty tables have no data to point at.
    const bool reads = plan.out.numel() > 0 && a.K > 0;
    p.require(!reads || (a.steps != nullptr && a.steps == plan.steps.const_data_ptr()),
              "steps: not the plan's steps");
    p.require(a.C == 1 || a.C == 3, "C: " + std::to_string(a.C) + " channels (the chains take 1 or 3)");
    p.require(!reads || (a.factors != nullptr && a.factors == plan.factors.const_data_ptr()),
              "factors: not the plan's factors");
    p.require(!reads || (a.grey_sums != nullptr && a.grey_sums == plan.grey_sums.const_data_ptr()),
              "grey_sums: not the plan's grey sums");
    p.same("K", a.K, plan.steps.size(1));
    p.same("K", a.K, plan.factors.size(1));
    p.same("grey_sums' K", a.K, plan.grey_sums.size(1));
  }
  return p.lines;
}

std::vector<std::string> histogram_arg_problems(const HistogramPlan& plan, bool /*cuda*/) {
  Problems p;
  const kernels::HistogramArgs& a = plan.args;
  const at::Tensor& out = plan.out;
  if (!out.defined() || out.dim() != 3) {
    p.require(false, "out: the plan has no [N, C, 256] counts tensor");
    return p.lines;
  }
  p.same("N", a.N, out.size(0));
  p.same("C", a.C, out.size(1));
  p.same("bins", kernels::kHistogramBins, out.size(2));
  p.require(out.is_contiguous() && out.scalar_type() == at::kInt, "out: not contiguous int32 counts");
  p.require(out.numel() == 0 || a.out == out.data_ptr(), "out: not the counts tensor's data");
  p.require(out.numel() == 0 || a.H * a.W == 0 || a.images != nullptr, "images: unset");
  return p.lines;
}

void check_normalize_flip_args(const NormalizeFlipPlan& plan, bool cuda) {
  throw_problems("normalize_flip", normalize_flip_arg_problems(plan, cuda), cuda);
}
void check_resized_crop_args(const ResizedCropPlan& plan, bool cuda) {
  throw_problems("resized_crop", resized_crop_arg_problems(plan, cuda), cuda);
}
void check_flip_crop_args(const FlipCropPlan& plan, bool cuda) {
  throw_problems("flip_crop", flip_crop_arg_problems(plan, cuda), cuda);
}
void check_affine_warp_args(const AffineWarpPlan& plan, bool cuda) {
  throw_problems("affine_warp", affine_warp_arg_problems(plan, cuda), cuda);
}
void check_sharpness_args(const SharpnessPlan& plan, bool cuda) {
  throw_problems("sharpness", sharpness_arg_problems(plan, cuda), cuda);
}
void check_lookup_args(const LookupPlan& plan, bool cuda) { throw_problems("lookup", lookup_arg_problems(plan, cuda), cuda); }
void check_color_jitter_args(const ColorJitterPlan& plan, bool cuda) {
  throw_problems("color_jitter", color_jitter_arg_problems(plan, cuda), cuda);
}
void check_histogram_args(const HistogramPlan& plan, bool cuda) {
  throw_problems("histograms", histogram_arg_problems(plan, cuda), cuda);
}

at::Tensor complete_args(NormalizeFlipPlan* plan, const KernelTarget& target) {
  at::Tensor keep = bind_constants(plan->affine, target, &plan->args.affine, &plan->args.affine_device);
  check_normalize_flip_args(*plan, target.cuda);
  return keep;
}

at::Tensor complete_args(ResizedCropPlan* plan, const KernelTarget& target) {
  at::Tensor keep = bind_constants(plan->affine, target, &plan->args.affine, &plan->args.affine_device);
  check_resized_crop_args(*plan, target.cuda);
  return keep;
}

void complete_args(FlipCropPlan* plan, const KernelTarget& target) { check_flip_crop_args(*plan, target.cuda); }

void complete_args(AffineWarpPlan* plan, const KernelTarget& target) { check_affine_warp_args(*plan, target.cuda); }

void complete_args(SharpnessPlan* plan, const KernelTarget& target) { check_sharpness_args(*plan, target.cuda); }

void complete_args(LookupPlan* plan, const KernelTarget& target) { check_lookup_args(*plan, target.cuda); }

void complete_args(ColorJitterPlan* plan, const KernelTarget& target) { check_color_jitter_args(*plan, target.cuda); }

void complete_args(HistogramPlan* plan, const KernelTarget& target) { check_histogram_args(*plan, target.cuda); }

}  // namespace prefetch

// The prefetch ops library (TORCH_LIBRARY, defined once per library): the augment ops' schemas,
// which prefetch/ops/ wraps and prefetch/ops/fakes.py mirrors, and two sets of controls without
// tensors: the output pool's and the CPU kernels' build selection. Their registrations are
// ops_cpu.cpp and ops_cuda.cpp. The JPEG ops define theirs next to their CPU kernels
// (decode_ops.cpp, a TORCH_LIBRARY_FRAGMENT): they have no CUDA registration and no plan shared
// with one.
#include <torch/library.h>

#include <string>

#include "common/cpu_dispatch.h"
#include "ops/output_pool.h"

namespace prefetch {

namespace {

std::string cpu_kernel_build() { return kernels::cpu_kernel_build(); }

// Returns the build in use before; refuses a name that is no build.
std::string set_cpu_kernel_build(const std::string& highest) {
  std::string previous = kernels::cpu_kernel_build();
  TORCH_CHECK_VALUE(kernels::limit_cpu_kernel_build(highest.c_str()),
                    "prefetch: the CPU kernels' builds are \"avx512\", \"avx2\" and \"baseline\", got \"",
                    highest, "\"");
  return previous;
}

}  // namespace

TORCH_LIBRARY(prefetch, m) {
  m.def(
      "normalize_flip(Tensor images, float[] mean, float[] std, Tensor? hflip=None, "
      "Tensor? vflip=None, int[]? crop=None, Tensor? offsets=None, int fill=0, "
      "ScalarType dtype=float, str layout=\"NHWC\", bool channels_last=False, "
      "Tensor? indices=None) -> Tensor");
  m.def(
      "flip_crop(Tensor masks, Tensor? hflip=None, Tensor? vflip=None, int[]? crop=None, "
      "Tensor? offsets=None, int fill=0, Tensor? indices=None) -> Tensor");
  m.def(
      "resized_crop(Tensor values, Tensor offsets, Tensor sizes, Tensor boxes, int[] size, "
      "float[] mean, float[] std, Tensor? hflip=None, Tensor? vflip=None, ScalarType dtype=float, "
      "bool channels_last=False, bool antialias=True) -> Tensor");
  m.def("sharpness(Tensor images, Tensor factors) -> Tensor");
  m.def("lookup(Tensor images, Tensor tables) -> Tensor");
  m.def("color_jitter(Tensor images, Tensor steps, Tensor factors) -> Tensor");
  m.def("histograms(Tensor images) -> Tensor");
  m.def("affine_warp(Tensor images, Tensor matrices, bool bilinear=False, float[]? fill=None) -> Tensor");
  // The CPU output pool's controls (no tensors: one kernel for every backend). Private names;
  // prefetch/ops/output_pool.py wraps them.
  m.def("_output_pool_stats() -> int[]", &output_pool_stats);
  m.def("_release_output_pool() -> int", &release_output_pool);
  m.def("_set_output_pool_limit(int max_idle_bytes) -> int", &set_output_pool_limit);
  // The CPU kernels' instruction-set build (common/cpu_dispatch.h). Private names;
  // prefetch/ops/cpu_builds.py wraps them.
  m.def("_cpu_kernel_build() -> str", &cpu_kernel_build);
  m.def("_set_cpu_kernel_build(str highest) -> str", &set_cpu_kernel_build);
}

}  // namespace prefetch

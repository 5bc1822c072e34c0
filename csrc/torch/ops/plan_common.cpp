// The checks and helpers of plan_common.h.
#include "ops/plan_common.h"

#include <ATen/ops/empty.h>
#include <c10/util/safe_numerics.h>

#include <cmath>

#include <limits>
#include <sstream>
#include <utility>

namespace prefetch {

void check_devices(const char* op, const at::Tensor& input, const char* input_name,
                   const std::optional<at::Tensor>& hflip, const std::optional<at::Tensor>& vflip,
                   const std::optional<at::Tensor>& offsets,
                   const std::optional<at::Tensor>& indices) {
  const std::pair<const char*, const std::optional<at::Tensor>*> args[] = {
      {"hflip", &hflip}, {"vflip", &vflip}, {"offsets", &offsets}, {"indices", &indices}};
  for (const auto& [name, arg] : args) {
    if (!arg->has_value()) continue;
    const at::Device d = (*arg)->device();
    TORCH_CHECK(d == input.device(), op, ": ", name, " is on ", d, " but the ", input_name,
                " are on ", input.device(), "; every tensor argument must be on the ", input_name,
                "' device");
  }
}

int64_t checked_output_bytes(const char* op, at::IntArrayRef sizes, at::ScalarType dtype) {
  uint64_t numel = 1;
  bool overflow = false;
  for (int64_t s : sizes) overflow |= c10::mul_overflows(numel, static_cast<uint64_t>(s), &numel);
  uint64_t bytes = 0;
  overflow |= c10::mul_overflows(numel, static_cast<uint64_t>(c10::elementSize(dtype)), &bytes);
  overflow |= bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  TORCH_CHECK(!overflow, op, ": the output ", sizes, " of ", dtype,
              " has a size in bytes that overflows int64; reduce the batch (N = ", sizes[0],
              "), the crop or the channels");
  return static_cast<int64_t>(bytes);
}

at::Tensor default_output(at::IntArrayRef sizes, const at::TensorOptions& options,
                          at::MemoryFormat format) {
  return at::empty(sizes, options.memory_format(format));
}

std::string shape_of(const at::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

void check_flip(const std::optional<at::Tensor>& flip, const char* name, int64_t n) {
  if (!flip.has_value()) return;
  const at::Tensor& f = *flip;
  TORCH_CHECK(f.scalar_type() == at::kBool, name, " must be a bool tensor of shape [N] = [", n,
              "], got dtype ", f.scalar_type());
  TORCH_CHECK(f.dim() == 1 && f.size(0) == n, name, " must have shape [N] = [", n, "], got ",
              shape_of(f));
}

void check_mean_std(at::ArrayRef<double> mean, at::ArrayRef<double> std) {
  for (size_t c = 0; c < std.size(); ++c) {
    TORCH_CHECK(std[c] > 0, "std[", c, "] must be > 0, got ", std[c]);
    // NaN gave an all-NaN batch, an infinite std an all-zero one.
    TORCH_CHECK(std::isfinite(std[c]), "std[", c, "] must be finite, got ", std[c]);
    TORCH_CHECK(std::isfinite(mean[c]), "mean[", c, "] must be finite, got ", mean[c]);
  }
}

std::vector<kernels::Affine> affine_of(at::ArrayRef<double> mean, at::ArrayRef<double> std) {
  std::vector<kernels::Affine> affine(std.size());
  for (size_t c = 0; c < std.size(); ++c) {
    affine[c].scale = static_cast<float>(1.0 / (255.0 * std[c]));
    affine[c].bias = static_cast<float>(-mean[c] / std[c]);
  }
  return affine;
}

kernels::OutDType out_dtype(at::ScalarType dtype) {
  return dtype == at::kFloat  ? kernels::OutDType::kFloat32
         : dtype == at::kHalf ? kernels::OutDType::kFloat16
         : dtype == at::kByte ? kernels::OutDType::kUInt8
                              : kernels::OutDType::kBFloat16;
}

void check_out_dtype(const char* op, at::ScalarType dtype) {
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kHalf || dtype == at::kBFloat16 || dtype == at::kByte, op,
              ": dtype must be torch.float32, torch.float16, torch.bfloat16 or torch.uint8 (the normalized "
              "values rounded and saturated), got ",
              dtype);
}

void check_uint8_images(const char* op, const at::Tensor& images, const at::Tensor& other, const char* name) {
  TORCH_CHECK(other.device() == images.device(), op, ": ", name, " is on ", other.device(), " but the images are on ",
              images.device(), "; every tensor argument must be on the images' device");
  TORCH_CHECK(images.scalar_type() == at::kByte && images.dim() == 4, op, ": images must be uint8 [N, C, H, W], got ",
              images.scalar_type(), " of shape ", shape_of(images));
}

}  // namespace prefetch

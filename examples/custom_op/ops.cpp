// The thin torch layer: schema, argument checks that print values, CPU registration, and the
// CUDA registration when built with CUDA (WITH_CUDA).
// The torch headers this file uses, not torch/extension.h (all of torch: ~15 s of parsing a file).
#include <pybind11/pybind11.h>  // first: it includes Python.h
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "posterize.h"

#ifdef WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
int posterize_cuda(const uint8_t* in, float* out, int64_t n, int bits, cudaStream_t stream);
#endif

namespace {

at::Tensor check_and_allocate(const at::Tensor& images, int64_t bits) {
  TORCH_CHECK(images.scalar_type() == at::kByte, "images must be uint8, got ", images.scalar_type());
  TORCH_CHECK(bits >= 1 && bits <= 8, "bits must be in [1, 8], got ", bits);
  return at::empty(images.sizes(), images.options().dtype(at::kFloat));
}

at::Tensor posterize_cpu_impl(const at::Tensor& images, int64_t bits) {
  at::Tensor out = check_and_allocate(images, bits);
  at::Tensor in = images.contiguous();
  const uint8_t* src = in.const_data_ptr<uint8_t>();
  float* dst = out.data_ptr<float>();
  at::parallel_for(0, in.numel(), 1 << 16, [&](int64_t begin, int64_t end) {
    posterize_cpu(src, dst, begin, end, static_cast<int>(bits));
  });
  return out;
}

#ifdef WITH_CUDA
at::Tensor posterize_cuda_impl(const at::Tensor& images, int64_t bits) {
  c10::cuda::CUDAGuard guard(images.device());
  at::Tensor out = check_and_allocate(images, bits);
  at::Tensor in = images.contiguous();
  int status = posterize_cuda(in.const_data_ptr<uint8_t>(), out.data_ptr<float>(), in.numel(),
                              static_cast<int>(bits), at::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(status == 0, "posterize kernel launch failed: ", status);
  return out;
}
#endif

}  // namespace

TORCH_LIBRARY(example_ops, m) { m.def("posterize(Tensor images, int bits) -> Tensor"); }

TORCH_LIBRARY_IMPL(example_ops, CPU, m) { m.impl("posterize", &posterize_cpu_impl); }

#ifdef WITH_CUDA
TORCH_LIBRARY_IMPL(example_ops, CUDA, m) { m.impl("posterize", &posterize_cuda_impl); }
#endif

// torch.utils.cpp_extension.load() expects a Python module; the ops live in torch.ops.
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}

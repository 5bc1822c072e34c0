// JPEG decoding as PyTorch ops on the CPU: the headers of a ragged batch of encoded images, and
// their pixels (or only a box of each) as a ragged batch of HWC uint8 RGB images, one sample per
// task of torch's intra-op thread pool, with the GIL released (ops never hold it).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/safe_numerics.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <tuple>
#include <vector>

#include "jpeg_decode.h"
#include "ops/kernel_args.h"
#include "ops/output_pool.h"
#include "ops/plan_common.h"  // shape_of
#include "ops/resized_crop/resized_crop_plan.h"
#include "resized_crop/resized_crop.h"

namespace prefetch {

namespace {

// An encoded batch as a 1-D prefetch.Ragged holds it: every sample's bytes at values[offsets[n]:
// offsets[n] + sizes[n]], on the CPU (libjpeg reads host memory).
struct EncodedBatch {
  const uint8_t* values = nullptr;
  std::vector<int64_t> offsets, lengths;
  int64_t size() const { return static_cast<int64_t>(offsets.size()); }
  const uint8_t* data(int64_t n) const { return values + offsets[n]; }
};

EncodedBatch encoded_batch(const char* op, const at::Tensor& values, const at::Tensor& offsets,
                           const at::Tensor& sizes) {
  TORCH_CHECK(values.device().is_cpu() && offsets.device().is_cpu() && sizes.device().is_cpu(),
              op, ": the encoded images are decoded on the host: values, offsets and sizes must be "
              "CPU tensors, got ", values.device(), ", ", offsets.device(), ", ", sizes.device());
  TORCH_CHECK(values.scalar_type() == at::kByte && values.dim() == 1,
              op, ": values must be a 1-D uint8 tensor (the bytes of every encoded image, packed), "
              "got dtype ", values.scalar_type(), " and shape ", shape_of(values));
  TORCH_CHECK(values.numel() <= 1 || values.stride(0) == 1, op,
              ": values must be contiguous (stride 1), got stride ", values.stride(0));
  TORCH_CHECK(offsets.scalar_type() == at::kLong && offsets.dim() == 1, op,
              ": offsets must be a 1-D int64 tensor [N], got dtype ", offsets.scalar_type(),
              " and shape ", shape_of(offsets));
  TORCH_CHECK(sizes.scalar_type() == at::kLong &&
                  (sizes.dim() == 1 || (sizes.dim() == 2 && sizes.size(1) == 1)),
              op, ": sizes must be an int64 tensor [N] or [N, 1] of byte counts (a 1-D Ragged's), "
              "got dtype ", sizes.scalar_type(), " and shape ", shape_of(sizes));
  const int64_t N = offsets.size(0);
  TORCH_CHECK(sizes.size(0) == N, op, ": offsets has ", N, " samples but sizes has ", sizes.size(0));
  EncodedBatch b;
  b.values = values.const_data_ptr<uint8_t>();
  const at::Tensor o = offsets.contiguous(), s = sizes.reshape({N}).contiguous();
  b.offsets.assign(o.const_data_ptr<int64_t>(), o.const_data_ptr<int64_t>() + N);
  b.lengths.assign(s.const_data_ptr<int64_t>(), s.const_data_ptr<int64_t>() + N);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t off = b.offsets[n], len = b.lengths[n];
    TORCH_CHECK(off >= 0 && len >= 0 && off <= values.numel() && len <= values.numel() - off, op,
                ": sample ", n, " (offsets[", n, "] = ", off, ", sizes[", n, "] = ", len,
                " bytes) does not lie inside the ", values.numel(), " values");
  }
  return b;
}

// A decoder error of sample n as the op's error, naming the sample.
[[noreturn]] void sample_error(const char* op, const EncodedBatch& b, int64_t n, const decode::JpegError& e) {
  TORCH_CHECK(false, op, ": sample ", n, " (", b.lengths[n], " bytes at offset ", b.offsets[n],
              ") cannot be decoded: ", e.what());
}

// Runs fn(n) for every sample on torch's intra-op threads, each thread taking the next sample when
// it is done with one (images differ in size: a static split leaves a thread idle at the end).
// A decoder error names its sample; the first error stops the others taking more samples, and
// at::parallel_for rethrows it.
template <typename Fn>
void for_each_sample(const char* op, const EncodedBatch& b, Fn fn) {
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  const int64_t N = b.size();
  const int64_t workers = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), N));
  at::parallel_for(0, workers, 1, [&](int64_t, int64_t) {
    for (int64_t n = next.fetch_add(1); n < N && !failed.load(); n = next.fetch_add(1)) {
      try {
        fn(n);
      } catch (const decode::JpegError& e) {
        failed.store(true);
        sample_error(op, b, n, e);
      } catch (...) {
        failed.store(true);
        throw;
      }
    }
  });
}

std::vector<decode::JpegHeader> headers_of(const char* op, const EncodedBatch& b) {
  // On the calling thread: a header is read in about a microsecond (0.2 ms a batch of 256 photos:
  // `python -m prefetch.bench --sections decode_host`), less than waking torch's OpenMP team and
  // the spin-wait it keeps up after each region (which, from a Prefetcher's producer thread, is a
  // second team of N - 1 threads beside the main thread's; on a 2-core machine it took jpeg_sizes
  // from 0.2 to 6 ms a batch).
  std::vector<decode::JpegHeader> headers(static_cast<size_t>(b.size()));
  for (int64_t n = 0; n < b.size(); ++n) {
    try {
      headers[n] = decode::read_jpeg_header(b.data(n), static_cast<size_t>(b.lengths[n]));
    } catch (const decode::JpegError& e) {
      sample_error(op, b, n, e);
    }
  }
  return headers;
}

// Pillow's guard against decompression bombs, with its default (PIL.Image.MAX_IMAGE_PIXELS) and
// its semantics: a header that claims more pixels than the limit warns, more than twice the limit
// is refused before any memory is reserved for the image (a 3 KB file can claim 65500 x 65500,
// 12.9 GB of pixels). 0: no limit. prefetch.ops.set_max_image_pixels sets it. The refusal is here,
// so that no call of the ops can allocate for a bomb; the warning is prefetch/ops/decode.py's (a
// warning raised in an op's kernel does not reach Python's warnings module).
constexpr int64_t kDefaultMaxImagePixels = 89478485;
std::atomic<int64_t> max_image_pixels{kDefaultMaxImagePixels};

void refuse_image_bombs(const char* op, const std::vector<decode::JpegHeader>& headers) {
  const int64_t limit = max_image_pixels.load(std::memory_order_relaxed);
  if (limit <= 0) return;
  for (size_t n = 0; n < headers.size(); ++n) {
    const int64_t H = headers[n].height, W = headers[n].width, pixels = H * W;  // H, W < 2^16
    TORCH_CHECK(pixels <= 2 * limit, op, ": sample ", n, "'s header claims ", H, " x ", W, " = ",
                pixels, " pixels, more than twice the limit of ", limit,
                " pixels: refused as a possible decompression bomb, before any memory is reserved "
                "for it (as Pillow refuses it); prefetch.ops.set_max_image_pixels(n) sets the limit "
                "(None: no limit)");
  }
}

// [N, 3] int64: (H, W, 3) per sample, the sizes table of the RGB images decode_jpeg returns.
at::Tensor jpeg_sizes_cpu(const at::Tensor& values, const at::Tensor& offsets, const at::Tensor& sizes) {
  const EncodedBatch b = encoded_batch("jpeg_sizes", values, offsets, sizes);
  const std::vector<decode::JpegHeader> headers = headers_of("jpeg_sizes", b);
  at::Tensor out = at::empty({b.size(), 3}, at::kLong);
  int64_t* row = out.data_ptr<int64_t>();
  for (const decode::JpegHeader& h : headers) {
    *row++ = h.height;
    *row++ = h.width;
    *row++ = 3;
  }
  return out;
}

// The decoded region of every sample: its box when boxes are given (checked against the header
// before any pixel is decoded), else the whole image.
std::vector<decode::Region> regions_of(const char* op, const EncodedBatch& b,
                                       const std::vector<decode::JpegHeader>& headers,
                                       const std::optional<at::Tensor>& boxes) {
  const int64_t N = b.size();
  std::vector<decode::Region> regions(static_cast<size_t>(N));
  if (!boxes.has_value()) {
    for (int64_t n = 0; n < N; ++n) regions[n] = {0, 0, headers[n].height, headers[n].width};
    return regions;
  }
  TORCH_CHECK(at::isIntegralType(boxes->scalar_type(), /*includeBool=*/false) &&
                  boxes->scalar_type() != at::kUInt64,
              op, ": boxes must be an integer tensor [N, 4] of (top, left, height, width), got dtype ",
              boxes->scalar_type());
  TORCH_CHECK(boxes->dim() == 2 && boxes->size(0) == N && boxes->size(1) == 4,
              op, ": boxes must have shape [N, 4] = [", N, ", 4], got ", shape_of(*boxes));
  const at::Tensor host = boxes->to(at::kCPU, at::kLong).contiguous();
  const int64_t* box = host.const_data_ptr<int64_t>();
  for (int64_t n = 0; n < N; ++n, box += 4) {
    const int64_t H = headers[n].height, W = headers[n].width;
    const int64_t top = box[0], left = box[1], height = box[2], width = box[3];
    TORCH_CHECK(height >= 1 && width >= 1 && top >= 0 && left >= 0 && top <= H - height && left <= W - width,
                op, ": boxes[", n, "] = (top=", top, ", left=", left, ", height=", height,
                ", width=", width, ") is not inside sample ", n, "'s image of H x W = ", H, " x ", W,
                "; a box needs height, width >= 1, 0 <= top <= H - height and 0 <= left <= W - width");
    regions[n] = {top, left, height, width};
  }
  return regions;
}

// A Ragged's (values, offsets, sizes) of the decoded RGB regions, packed without padding.
std::tuple<at::Tensor, at::Tensor, at::Tensor> decode_jpeg_cpu(const at::Tensor& values,
                                                               const at::Tensor& offsets,
                                                               const at::Tensor& sizes,
                                                               const std::optional<at::Tensor>& boxes) {
  const EncodedBatch b = encoded_batch("decode_jpeg", values, offsets, sizes);
  const std::vector<decode::JpegHeader> headers = headers_of("decode_jpeg", b);
  refuse_image_bombs("decode_jpeg", headers);
  const std::vector<decode::Region> regions = regions_of("decode_jpeg", b, headers, boxes);
  const int64_t N = b.size();
  at::Tensor out_offsets = at::empty({N}, at::kLong), out_sizes = at::empty({N, 3}, at::kLong);
  int64_t* off = out_offsets.data_ptr<int64_t>();
  int64_t* size = out_sizes.data_ptr<int64_t>();
  int64_t total = 0;
  for (int64_t n = 0; n < N; ++n) {
    const decode::Region& r = regions[n];
    off[n] = total;
    size[3 * n] = r.height, size[3 * n + 1] = r.width, size[3 * n + 2] = 3;
    int64_t bytes = 0;
    TORCH_CHECK(!c10::mul_overflows(r.height * r.width, int64_t{3}, &bytes) &&
                    !c10::add_overflows(total, bytes, &total),
                "decode_jpeg: the decoded images' bytes overflow int64 at sample ", n);
  }
  at::Tensor out = at::empty({total}, at::kByte);
  uint8_t* pixels = out.data_ptr<uint8_t>();
  for_each_sample("decode_jpeg", b, [&](int64_t n) {
    const decode::Region& r = regions[n];
    decode::decode_jpeg_rgb(b.data(n), static_cast<size_t>(b.lengths[n]), r, pixels + off[n], r.width * 3);
  });
  return std::make_tuple(out, out_offsets, out_sizes);
}

// resized_crop of the decoded boxes, one sample at a time: each thread decodes a box into its own
// buffer and resizes it while it is in cache; only the boxes are decoded. The output equals
// resized_crop(decode_jpeg(...), boxes, ...).
at::Tensor decode_resized_crop_cpu(const at::Tensor& values, const at::Tensor& offsets,
                                   const at::Tensor& sizes, const at::Tensor& boxes, at::IntArrayRef size,
                                   at::ArrayRef<double> mean, at::ArrayRef<double> std,
                                   const std::optional<at::Tensor>& hflip,
                                   const std::optional<at::Tensor>& vflip, at::ScalarType dtype,
                                   bool channels_last, bool antialias,
                                   const std::optional<at::Tensor>& bicubic) {
  const char* op = "decode_resized_crop";
  const EncodedBatch b = encoded_batch(op, values, offsets, sizes);
  TORCH_CHECK(mean.size() == 3, op, ": the decoded images are RGB: mean and std need 3 values, got ",
              mean.size());
  ResizedCropPlan plan = plan_resized_crop_output(b.size(), size, mean, std, hflip, vflip, dtype,
                                                  channels_last, antialias, bicubic, at::TensorOptions(at::kCPU),
                                                  pooled_empty);
  const std::vector<decode::JpegHeader> headers = headers_of(op, b);
  refuse_image_bombs(op, headers);
  const std::vector<decode::Region> regions = regions_of(op, b, headers, boxes);
  complete_args(&plan, cpu_target());
  const kernels::ResizedCropArgs& all = plan.args;
  uint8_t* out = static_cast<uint8_t*>(plan.out.data_ptr());
  const int64_t sample_bytes = all.oN * static_cast<int64_t>(plan.out.element_size());
  // One buffer per thread, grown to the largest box it decodes (a fresh one per sample would be
  // a fresh mmap and its page faults, for boxes above malloc's mmap threshold).
  static thread_local std::vector<uint8_t> box_pixels;
  for_each_sample(op, b, [&](int64_t n) {
    const decode::Region& r = regions[n];
    const size_t bytes = static_cast<size_t>(r.height * r.width * 3);
    // A thread keeps at most what a typical photo's box needs; one huge box is not kept for life.
    constexpr size_t kKeep = size_t{16} << 20;
    if (box_pixels.capacity() > kKeep && bytes <= kKeep) std::vector<uint8_t>().swap(box_pixels);
    box_pixels.resize(bytes);
    decode::decode_jpeg_rgb(b.data(n), static_cast<size_t>(b.lengths[n]), r, box_pixels.data(), r.width * 3);
    const int64_t table[kernels::kSampleFields] = {0, r.height, r.width, 3, 0, 0, r.height, r.width};
    kernels::ResizedCropArgs one = all;
    one.values = box_pixels.data();
    one.samples = table;
    one.N = 1;
    one.hflip = all.hflip != nullptr ? all.hflip + n : nullptr;
    one.vflip = all.vflip != nullptr ? all.vflip + n : nullptr;
    one.bicubic = all.bicubic != nullptr ? all.bicubic + n : nullptr;
    one.out = out + n * sample_bytes;
    kernels::resized_crop_cpu(one, 0, one.h);
  });
  return plan.out;
}

// The limit's Python face (prefetch/ops/decode.py wraps them).
int64_t get_max_image_pixels() { return max_image_pixels.load(); }
int64_t set_max_image_pixels(int64_t limit) {
  TORCH_CHECK(limit >= 0, "max_image_pixels must be >= 0 (0: no limit), got ", limit);
  return max_image_pixels.exchange(limit);
}

bool jpeg_decoder_built() { return decode::jpeg_available(); }
std::string jpeg_decoder_library() { return decode::jpeg_library(); }

}  // namespace

TORCH_LIBRARY_FRAGMENT(prefetch, m) {
  m.def("jpeg_sizes(Tensor values, Tensor offsets, Tensor sizes) -> Tensor");
  m.def(
      "decode_jpeg(Tensor values, Tensor offsets, Tensor sizes, Tensor? boxes=None) "
      "-> (Tensor, Tensor, Tensor)");
  m.def(
      "decode_resized_crop(Tensor values, Tensor offsets, Tensor sizes, Tensor boxes, int[] size, "
      "float[] mean, float[] std, Tensor? hflip=None, Tensor? vflip=None, ScalarType dtype=float, "
      "bool channels_last=False, bool antialias=True, Tensor? bicubic=None) -> Tensor");
  // What this build decodes with (no tensors: one kernel for every backend). Private names;
  // prefetch.built_with_jpeg() and prefetch.ops wrap them.
  m.def("_jpeg_decoder_built() -> bool", &jpeg_decoder_built);
  m.def("_max_image_pixels() -> int", &get_max_image_pixels);
  m.def("_set_max_image_pixels(int limit) -> int", &set_max_image_pixels);
  m.def("_jpeg_decoder_library() -> str", &jpeg_decoder_library);
}

TORCH_LIBRARY_IMPL(prefetch, CPU, m) {
  m.impl("jpeg_sizes", &jpeg_sizes_cpu);
  m.impl("decode_jpeg", &decode_jpeg_cpu);
  m.impl("decode_resized_crop", &decode_resized_crop_cpu);
}

}  // namespace prefetch

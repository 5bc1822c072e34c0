// The GPU JPEG path's host stage as ops: one call per batch each, no Python per image, the GIL
// released (torch.ops calls run without it: invokeOperatorFromPython drops it around the kernel).
//
// - _gather_spans: element ranges of a 1-D CPU tensor, one after another — an ArrayLoader's
//   encoded bytes for a transform's host stage (prefetch/_engine/tree.py's gather_spans), copied
//   by the core's own span copies (csrc/core/collate.h) on the calling thread.
// - _jpeg_layouts: what every image's markers say (csrc/decode/jpeg_layout.h), as an int64 table
//   whose columns _jpeg_layout_fields names; the GPU decoders' screen reads it as tensors.
// - _ragged_views: a Ragged's samples as views of its values (HWC, or CHW views of HWC pixels:
//   what nvJPEG's backends return), in one call.
// - _pack_windows: each decoded image's window copied into one packed output, checking first that
//   the image is what its header promised; any device (the copies are torch's: on a GPU, kernels
//   on the current stream).
// They have no plan shared with a CUDA registration: _gather_spans and _jpeg_layouts read host
// memory, the other two are compositions of torch's own ops, registered once for every device.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/util/safe_numerics.h>
#include <torch/library.h>

#include <cstring>
#include <string>
#include <vector>

#include "collate.h"
#include "errors.h"
#include "jpeg_layout.h"
#include "ops/output_pool.h"
#include "ops/plan_common.h"  // shape_of

namespace prefetch {

namespace {

// --- _gather_spans ---------------------------------------------------------------------------------

// Ranges `spans` (int64 [n, 2] of (start, count), in elements) of the 1-D dense `values`, one
// after another. A range outside values raises IndexError naming `name` and the range, as the
// Python gather did.
at::Tensor gather_spans_cpu(const at::Tensor& values, const at::Tensor& spans, c10::string_view name) {
  const std::string what(name);
  TORCH_CHECK(values.device().is_cpu() && spans.device().is_cpu(),
              "_gather_spans: ", what, ": values and spans must be CPU tensors, got ", values.device(),
              " and ", spans.device());
  TORCH_CHECK(values.dim() == 1 && (values.numel() <= 1 || values.stride(0) == 1),
              "_gather_spans: ", what, ": values must be a 1-D tensor with stride 1, got shape ",
              shape_of(values), values.dim() == 1 ? " and stride " + std::to_string(values.stride(0)) : "");
  TORCH_CHECK(spans.scalar_type() == at::kLong && spans.dim() == 2 && spans.size(1) == 2,
              "_gather_spans: ", what, ": spans must be int64 [n, 2] of (start, count), got dtype ",
              spans.scalar_type(), " and shape ", shape_of(spans));
  std::vector<LeafPlan> leaves(1);
  LeafPlan& leaf = leaves[0];
  leaf.ranges = true;
  HostTensor source;
  source.data = static_cast<const std::byte*>(values.const_data_ptr());
  source.itemsize = values.element_size();
  source.sizes = {values.numel()};
  source.strides = {1};
  leaf.pieces.push_back(std::move(source));
  const at::Tensor s = spans.contiguous();
  leaf.spans.assign(s.const_data_ptr<int64_t>(), s.const_data_ptr<int64_t>() + s.numel());
  try {
    check_rows(leaf);
  } catch (const CollateError& e) {
    // "prefetch: range ... is out of range for L elements" becomes "prefetch: <name>: range ...".
    std::string message = e.what();
    const std::string prefix = "prefetch: ";
    if (message.compare(0, prefix.size(), prefix) == 0) message.erase(0, prefix.size());
    TORCH_CHECK_INDEX(false, "prefetch: ", what, ": ", message);
  }
  size_t total_bytes = 0;
  const std::vector<LeafLayout> layout = pack_layout(leaves, &total_bytes);
  // From the ops' output pool when large (a batch of encoded photos is tens of MB): a fresh
  // allocation of that size is a fresh mapping, every page of it faulted in by the copy; the
  // batch's bytes live only until the decoder has read them, so the next batch reuses the buffer.
  at::Tensor out = pooled_empty({static_cast<int64_t>(total_bytes / leaf.pieces[0].itemsize)},
                                values.options(), at::MemoryFormat::Contiguous);
  if (total_bytes == 0) return out;
  // On the calling thread (a Prefetcher's producer): a batch of 256 encoded photos (~28 MB) is
  // 1-2 ms of memcpy, and torch's OpenMP team called from this thread would be a second team of
  // N - 1 threads beside the main thread's, spinning after each region (measured: the GPU path's
  // host CPU an image 17-18 µs on one thread, 37-220 µs with 2 threads on a loaded 2-core
  // machine: `python -m prefetch.bench --sections decode_host`).
  const std::vector<CopyTask> tasks =
      plan_copies(leaves, layout, static_cast<std::byte*>(out.data_ptr()), size_t{1} << 20);
  for (const CopyTask& task : tasks) run_copy(task);
  return out;
}

// --- _jpeg_layouts ---------------------------------------------------------------------------------

// The table's columns, in order (prefetch/ops/gpu_decoders.py reads their positions from here).
// -1 where the markers did not say (Python's None); jfif and rgb_coded are 0 or 1; bytes is the
// image's length.
const std::vector<std::string>& layout_fields() {
  static const std::vector<std::string> fields = {"sof",        "precision", "height",      "width",
                                                  "components", "jfif",      "adobe_transform",
                                                  "orientation", "rgb_coded", "bytes"};
  return fields;
}

std::vector<std::string> jpeg_layout_fields() { return layout_fields(); }

at::Tensor jpeg_layouts_cpu(at::TensorList images) {
  const auto N = static_cast<int64_t>(images.size());
  const auto F = static_cast<int64_t>(layout_fields().size());
  for (int64_t n = 0; n < N; ++n) {
    const at::Tensor& t = images[n];
    TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == at::kByte && t.dim() == 1 &&
                    (t.numel() <= 1 || t.stride(0) == 1),
                "_jpeg_layouts: image ", n, " must be a 1-D uint8 CPU tensor with stride 1 (the "
                "bytes of one file), got ", t.scalar_type(), " of shape ", shape_of(t), " on ",
                t.device());
  }
  at::Tensor out = at::empty({N, F}, at::kLong);
  int64_t* row = out.data_ptr<int64_t>();
  for (int64_t n = 0; n < N; ++n, row += F) {
    const at::Tensor& t = images[n];
    const decode::JpegLayout l =
        decode::read_jpeg_layout(static_cast<const uint8_t*>(t.const_data_ptr()), static_cast<size_t>(t.numel()));
    const int64_t values[] = {l.sof,        l.precision, l.height, l.width, l.components,
                              l.jfif,       l.adobe_transform, l.orientation, l.rgb_coded,
                              t.numel()};
    static_assert(sizeof(values) / sizeof(values[0]) == 10, "one value per field");
    std::memcpy(row, values, sizeof(values));
  }
  return out;
}

// --- _ragged_views ---------------------------------------------------------------------------------

// The host tables of a Ragged (offsets [N], sizes [N, R], int64 on the CPU): checked here, as each
// view must lie inside values.
void check_tables(const char* op, const at::Tensor& values, const at::Tensor& offsets,
                  const at::Tensor& sizes) {
  TORCH_CHECK(values.dim() == 1 && (values.numel() <= 1 || values.stride(0) == 1), op,
              ": values must be a 1-D tensor with stride 1, got shape ", shape_of(values));
  TORCH_CHECK(offsets.device().is_cpu() && offsets.scalar_type() == at::kLong && offsets.dim() == 1,
              op, ": offsets must be a 1-D int64 CPU tensor, got ", offsets.scalar_type(), " of shape ",
              shape_of(offsets), " on ", offsets.device());
  TORCH_CHECK(sizes.device().is_cpu() && sizes.scalar_type() == at::kLong && sizes.dim() == 2 &&
                  sizes.size(0) == offsets.size(0),
              op, ": sizes must be an int64 CPU tensor [N, rank] with N = ", offsets.size(0),
              " (offsets' length), got ", sizes.scalar_type(), " of shape ", shape_of(sizes), " on ",
              sizes.device());
}

std::vector<at::Tensor> ragged_views(const at::Tensor& values, const at::Tensor& offsets,
                                     const at::Tensor& sizes, bool chw) {
  const char* op = "_ragged_views";
  check_tables(op, values, offsets, sizes);
  const int64_t N = offsets.size(0), R = sizes.size(1);
  TORCH_CHECK(!chw || R == 3, op, ": chw views are of HWC samples (rank 3), got rank ", R);
  const at::Tensor o = offsets.contiguous(), s = sizes.contiguous();
  const int64_t* off = o.const_data_ptr<int64_t>();
  const int64_t* size = s.const_data_ptr<int64_t>();
  std::vector<at::Tensor> views;
  views.reserve(static_cast<size_t>(N));
  std::vector<int64_t> shape(static_cast<size_t>(R)), strides(static_cast<size_t>(R));
  for (int64_t n = 0; n < N; ++n, size += R) {
    int64_t count = 1;
    for (int64_t d = 0; d < R; ++d) {
      TORCH_CHECK(size[d] >= 0, op, ": sample ", n, " has a negative size ", size[d]);
      TORCH_CHECK(!c10::mul_overflows(count, size[d], &count), op, ": sample ", n, "'s size overflows");
    }
    TORCH_CHECK(off[n] >= 0 && off[n] <= values.numel() && count <= values.numel() - off[n], op,
                ": sample ", n, " (offset ", off[n], ", ", count, " elements) does not lie inside the ",
                values.numel(), " values");
    int64_t stride = 1;
    for (int64_t d = R - 1; d >= 0; --d) {
      shape[d] = size[d];
      strides[d] = stride;
      stride *= std::max<int64_t>(size[d], 1);
    }
    if (chw) {  // (C, H, W) of HWC memory: what permute(2, 0, 1) of the HWC view gives
      shape = {size[2], size[0], size[1]};
      strides = {1, size[1] * size[2], size[2]};
    }
    views.push_back(values.as_strided(shape, strides, values.storage_offset() + off[n]));
  }
  return views;
}

// --- _pack_windows ---------------------------------------------------------------------------------

// Columns of _pack_windows' table, one row per image.
enum PackColumn : int64_t { kDest, kImageH, kImageW, kTop, kLeft, kHeight, kWidth, kPackColumns };

// Image k (HWC, or CHW with `chw`) must be uint8 of (H, W, 3) / (3, H, W) on out's device: then
// its window (top, left, height, width) is copied, HWC, into out[dest : dest + height * width * 3]
// and fits[k] is true. An image that is missing (None: its decoder failed) or is not what its
// header promised is left alone, fits[k] false: the CPU decoder takes it. A window outside its
// image or a destination outside out raises (the caller's tables are wrong).
at::Tensor pack_windows(const c10::List<std::optional<at::Tensor>>& images, const at::Tensor& table,
                        bool chw, at::Tensor& out) {
  const char* op = "_pack_windows";
  const auto M = static_cast<int64_t>(images.size());
  TORCH_CHECK(table.device().is_cpu() && table.scalar_type() == at::kLong && table.dim() == 2 &&
                  table.size(0) == M && table.size(1) == kPackColumns,
              op, ": table must be an int64 CPU tensor [", M, ", ", int64_t{kPackColumns},
              "] (dest, H, W, top, left, height, width per image), got ", table.scalar_type(),
              " of shape ", shape_of(table), " on ", table.device());
  TORCH_CHECK(out.scalar_type() == at::kByte && out.dim() == 1 && (out.numel() <= 1 || out.stride(0) == 1),
              op, ": out must be a 1-D uint8 tensor with stride 1, got ", out.scalar_type(),
              " of shape ", shape_of(out));
  const at::Tensor t = table.contiguous();
  const int64_t* row = t.const_data_ptr<int64_t>();
  at::Tensor fits = at::zeros({M}, at::kBool);
  bool* fit = fits.data_ptr<bool>();
  for (int64_t k = 0; k < M; ++k, row += kPackColumns) {
    const int64_t H = row[kImageH], W = row[kImageW], top = row[kTop], left = row[kLeft];
    const int64_t h = row[kHeight], w = row[kWidth], dest = row[kDest];
    TORCH_CHECK(h >= 1 && w >= 1 && top >= 0 && left >= 0 && top <= H - h && left <= W - w, op,
                ": row ", k, "'s window (top=", top, ", left=", left, ", height=", h, ", width=", w,
                ") is not inside its image of ", H, " x ", W);
    const int64_t bytes = h * w * 3;  // h <= H, w <= W: headers' sizes, below 2^16 each
    TORCH_CHECK(dest >= 0 && dest <= out.numel() && bytes <= out.numel() - dest, op, ": row ", k,
                "'s destination (", bytes, " bytes at ", dest, ") does not lie inside out's ",
                out.numel(), " bytes");
    const std::optional<at::Tensor> image = images.get(k);
    if (!image.has_value() || !image->defined()) continue;
    const at::Tensor& im = *image;
    const bool shaped = im.dim() == 3 && (chw ? (im.size(0) == 3 && im.size(1) == H && im.size(2) == W)
                                              : (im.size(0) == H && im.size(1) == W && im.size(2) == 3));
    if (!shaped || im.scalar_type() != at::kByte || im.device() != out.device()) continue;
    const at::Tensor window = chw ? im.slice(1, top, top + h).slice(2, left, left + w).permute({1, 2, 0})
                                  : im.slice(0, top, top + h).slice(1, left, left + w);
    out.narrow(0, dest, bytes).view({h, w, 3}).copy_(window);
    fit[k] = true;
  }
  return fits;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(prefetch, m) {
  m.def("_gather_spans(Tensor values, Tensor spans, str name=\"values\") -> Tensor");
  // A composite (catch-all) kernel: an empty list has no tensor to dispatch on. It reads host
  // memory and checks that every image is a CPU tensor.
  m.def("_jpeg_layouts(Tensor[] images) -> Tensor", &jpeg_layouts_cpu);
  m.def("_jpeg_layout_fields() -> str[]", &jpeg_layout_fields);
  m.def("_ragged_views(Tensor(a) values, Tensor offsets, Tensor sizes, bool chw=False) -> Tensor(a)[]");
  m.def("_pack_windows(Tensor?[] images, Tensor table, bool chw, Tensor(a!) out) -> Tensor");
}

TORCH_LIBRARY_IMPL(prefetch, CPU, m) {
  m.impl("_gather_spans", &gather_spans_cpu);
}

TORCH_LIBRARY_IMPL(prefetch, CompositeImplicitAutograd, m) {
  m.impl("_ragged_views", &ragged_views);
  m.impl("_pack_windows", &pack_windows);
}

}  // namespace prefetch

// geometry_inputs (geometry_inputs.h).
#include "ops/geometry_inputs.h"

#include "ops/plan_common.h"

namespace prefetch {

namespace {

// Gather indices: 1-D integers on the input's device. On the CPU every index is checked here;
// on CUDA the kernel checks (a check here would synchronise the host with the device).
at::Tensor gather_rows(const std::optional<at::Tensor>& indices, int64_t sources) {
  const at::Tensor& i = *indices;
  TORCH_CHECK(at::isIntegralType(i.scalar_type(), /*includeBool=*/false) && i.scalar_type() != at::kUInt64,
              "indices must be an integer tensor of shape [n] (not uint64, whose values from 2^63 "
              "would wrap), got dtype ", i.scalar_type());
  TORCH_CHECK(i.dim() == 1, "indices must be 1-D [n], got shape ", shape_of(i));
  at::Tensor rows = i.to(at::kLong).contiguous();
  if (rows.is_cpu() && rows.numel() > 0) {
    const int64_t* p = rows.const_data_ptr<int64_t>();
    for (int64_t k = 0; k < rows.numel(); ++k) {
      TORCH_CHECK_INDEX(p[k] >= 0 && p[k] < sources, "indices[", k, "] = ", p[k],
                        " is out of range for an input of ", sources, " samples");
    }
  }
  return rows;
}

}  // namespace

GeometryInputs geometry_inputs(int64_t sources, int64_t H, int64_t W,
                               const std::optional<at::Tensor>& hflip,
                               const std::optional<at::Tensor>& vflip, at::OptionalIntArrayRef crop,
                               const std::optional<at::Tensor>& offsets,
                               const std::optional<at::Tensor>& indices) {
  // Bounds the kernels' index sums (offsets are clamped into [-h, H] x [-w, W], geometry.h):
  // no such input fits in memory unless it is a stride-0 expansion.
  TORCH_CHECK(H < kMaxInputSide && W < kMaxInputSide,
              "the input's height and width must be below 2^62, got H = ", H, ", W = ", W);
  GeometryInputs in;
  int64_t N = sources;
  if (indices.has_value()) {
    in.rows = gather_rows(indices, sources);
    N = in.rows.numel();
    in.g.rows = in.rows.const_data_ptr<int64_t>();
  }
  in.g.sources = sources;
  in.g.N = N;
  in.g.H = H;
  in.g.W = W;
  in.g.h = H;
  in.g.w = W;
  if (crop.has_value()) {
    auto c = *crop;
    TORCH_CHECK(c.size() == 2, "crop must be (h, w), got ", c.size(), " values: ", c);
    TORCH_CHECK(c[0] >= 1 && c[1] >= 1 && c[0] <= kMaxCrop && c[1] <= kMaxCrop,
                "crop must be (h, w) with 1 <= h, w <= ", kMaxCrop, ", got ", c);
    in.g.h = c[0];
    in.g.w = c[1];
  }
  check_flip(hflip, "hflip", N);
  check_flip(vflip, "vflip", N);
  // bool is stored as one byte per element: the kernels read it as uint8.
  if (hflip.has_value()) in.hflip = hflip->contiguous().view(at::kByte);
  if (vflip.has_value()) in.vflip = vflip->contiguous().view(at::kByte);
  if (offsets.has_value()) {
    const at::Tensor& o = *offsets;
    TORCH_CHECK(at::isIntegralType(o.scalar_type(), /*includeBool=*/false) && o.scalar_type() != at::kUInt64,
                "offsets must be an integer tensor of shape [N, 2] = [", N, ", 2] (not uint64, "
                "whose values from 2^63 would wrap), got dtype ", o.scalar_type());
    TORCH_CHECK(o.dim() == 2 && o.size(0) == N && o.size(1) == 2,
                "offsets must have shape [N, 2] = [", N, ", 2], got ", shape_of(o));
    in.offsets = o.to(at::kLong).contiguous();
  }
  return in;
}

}  // namespace prefetch

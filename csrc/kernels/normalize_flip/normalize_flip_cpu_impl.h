// normalize_flip's CPU body, compiled twice: by normalize_flip_cpu.cpp for the baseline ISA and by
// normalize_flip_cpu_avx2.cpp for AVX2 + FMA + F16C, chosen at run time. Everything here has
// internal linkage so the two copies never mix. Each output row is produced in two passes: the
// normalized floats of one channel into a row buffer (a unit-stride loop the compiler
// vectorises), then a conversion-and-store pass (f32 copy, bf16 rounding, or fp16 rounding —
// with F16C instructions in the AVX2 build).
#include <cstring>
#include <vector>

#include "common/cpu_stores.h"
#include "normalize_flip/normalize_flip.h"

namespace {

using prefetch::kernels::Affine;
using prefetch::kernels::Geometry;
using prefetch::kernels::NormalizeFlipArgs;
using prefetch::kernels::OutDType;
using prefetch::kernels::Window;

// Normalized values of output row `y` of sample `n`, channel `c`, into buf[0, w).
// kC > 0: compile-time channel count of a packed NHWC input (sC == 1, sW == C).
template <int kC>
inline void row_values(const NormalizeFlipArgs& a, const Window& win, const uint8_t* row,
                       int64_t xb, int64_t xe, int64_t c, float* buf) {
  const Geometry& g = a.g;
  const int64_t sW = kC > 0 ? kC : g.sW;
  const int64_t sC = kC > 0 ? 1 : g.sC;
  const Affine af = a.affine[c];
  const float fill = prefetch::kernels::normalize(a.fill, af);
  const uint8_t* src = row + c * sC;
  for (int64_t x = 0; x < xb; ++x) buf[x] = fill;
  // Source column of x: left + x, or left + w - 1 - x when mirrored; in [0, W) for x in [xb, xe).
  if (!win.hflip) {
    const int64_t first = win.left;
    for (int64_t x = xb; x < xe; ++x) buf[x] = static_cast<float>(src[(first + x) * sW]) * af.scale + af.bias;
  } else {
    const int64_t last = win.left + g.w - 1;
    for (int64_t x = xb; x < xe; ++x) buf[x] = static_cast<float>(src[(last - x) * sW]) * af.scale + af.bias;
  }
  for (int64_t x = xe; x < g.w; ++x) buf[x] = fill;
}

template <typename Store, int kC>
void normalize_rows(const NormalizeFlipArgs& a, int64_t begin, int64_t end) {
  using T = typename Store::type;
  const Geometry& g = a.g;
  const int64_t C = kC > 0 ? kC : g.C;
  // channels_last output: the channels of a row are built side by side, interleaved once, and
  // the whole row (w * C values) is converted and stored contiguously. Stored channel by channel
  // instead, every store has stride C and the conversion loop cannot be vectorised.
  const bool interleave = C > 1 && a.oC == 1 && a.oX == C;
  const int64_t row_len = interleave ? C * g.w : g.w;
  std::vector<float> buf(static_cast<size_t>(interleave ? C * g.w : g.w));
  std::vector<float> mixed(static_cast<size_t>(interleave ? row_len : 0));
  std::vector<T> scratch(Store::kNeedsScratch ? static_cast<size_t>(row_len) : 0);
  T* out = static_cast<T*>(a.out);
  for (int64_t r = begin; r < end; ++r) {
    const int64_t n = r / g.h, y = r % g.h;
    const Window win = prefetch::kernels::sample_window(g, a.offsets, a.hflip, a.vflip, n);
    const int64_t sy = prefetch::kernels::source_row(g, win, y);
    int64_t xb = 0, xe = 0;  // empty when the whole row is outside
    if (sy >= 0 && sy < g.H) prefetch::kernels::inside_columns(g, win, &xb, &xe);
    const uint8_t* row = a.images + prefetch::kernels::source_sample(g, n) * g.sN + (xe > xb ? sy * g.sH : 0);
    T* out_row = out + n * a.oN + y * a.oY;
    if (interleave) {
      for (int64_t c = 0; c < C; ++c) row_values<kC>(a, win, row, xb, xe, c, buf.data() + c * g.w);
      for (int64_t x = 0; x < g.w; ++x) {
        for (int64_t c = 0; c < C; ++c) mixed[x * C + c] = buf[c * g.w + x];
      }
      Store::store(out_row, 1, mixed.data(), scratch.data(), row_len);
      continue;
    }
    for (int64_t c = 0; c < C; ++c) {
      row_values<kC>(a, win, row, xb, xe, c, buf.data());
      Store::store(out_row + c * a.oC, a.oX, buf.data(), scratch.data(), g.w);
    }
  }
}

template <typename Store>
void normalize_dispatch(const NormalizeFlipArgs& a, int64_t begin, int64_t end) {
  const Geometry& g = a.g;
  const bool packed = g.sC == 1 && g.sW == g.C;
  if (packed && g.C == 3) return normalize_rows<Store, 3>(a, begin, end);
  if (packed && g.C == 4) return normalize_rows<Store, 4>(a, begin, end);
  if (packed && g.C == 1) return normalize_rows<Store, 1>(a, begin, end);
  normalize_rows<Store, 0>(a, begin, end);
}

// The float16 store is the including file's: software rounding, or F16C instructions.

template <typename StoreHalf>
void normalize_flip_impl(const NormalizeFlipArgs& args, int64_t row_begin, int64_t row_end) {
  switch (args.dtype) {
    case OutDType::kFloat32:
      return normalize_dispatch<StoreFloat32>(args, row_begin, row_end);
    case OutDType::kFloat16:
      return normalize_dispatch<StoreHalf>(args, row_begin, row_end);
    case OutDType::kBFloat16:
      return normalize_dispatch<StoreBFloat16>(args, row_begin, row_end);
    case OutDType::kUInt8:
      return normalize_dispatch<StoreUInt8>(args, row_begin, row_end);
  }
}

}  // namespace

// CPU twin of normalize_flip.cu: the same geometry (geometry.h), one output row per step.
// Inner loops have unit-stride stores and no bounds tests, so the compiler vectorises them;
// out-of-image columns are filled in separate loops.
#include <cstring>

#include "normalize_flip.h"

namespace prefetch {
namespace kernels {
namespace {

struct ToFloat32 {
  using type = float;
  float operator()(float v) const { return v; }
};
struct ToFloat16 {
  using type = uint16_t;
  uint16_t operator()(float v) const { return float_to_half_bits(v); }
};
struct ToBFloat16 {
  using type = uint16_t;
  uint16_t operator()(float v) const { return float_to_bfloat16_bits(v); }
};

template <typename Conv>
void normalize_rows(const NormalizeFlipArgs& a, int64_t begin, int64_t end) {
  using T = typename Conv::type;
  const Conv conv;
  const Geometry& g = a.g;
  T* out = static_cast<T*>(a.out);
  for (int64_t r = begin; r < end; ++r) {
    const int64_t n = r / g.h, y = r % g.h;
    const Window win = sample_window(g, a.offsets, a.hflip, a.vflip, n);
    const int64_t sy = source_row(g, win, y);
    int64_t xb = 0, xe = 0;  // empty when the whole row is outside
    if (sy >= 0 && sy < g.H) inside_columns(g, win, &xb, &xe);
    const uint8_t* row = a.images + n * g.sN + (xe > xb ? sy * g.sH : 0);
    T* out_row = out + n * a.oN + y * a.oY;
    for (int64_t c = 0; c < g.C; ++c) {
      const Affine af = a.affine[c];
      const T fill = conv(normalize(a.fill, af));
      T* dst = out_row + c * a.oC;
      const uint8_t* src = row + c * g.sC;
      const int64_t sW = g.sW, oX = a.oX;
      for (int64_t x = 0; x < xb; ++x) dst[x * oX] = fill;
      // Source column of x: left + x, or left + w - 1 - x when mirrored; in [0, W) for x in [xb, xe).
      if (!win.hflip) {
        const int64_t first = win.left;
        if (oX == 1) {
          for (int64_t x = xb; x < xe; ++x) dst[x] = conv(normalize(src[(first + x) * sW], af));
        } else {
          for (int64_t x = xb; x < xe; ++x) dst[x * oX] = conv(normalize(src[(first + x) * sW], af));
        }
      } else {
        const int64_t last = win.left + g.w - 1;
        if (oX == 1) {
          for (int64_t x = xb; x < xe; ++x) dst[x] = conv(normalize(src[(last - x) * sW], af));
        } else {
          for (int64_t x = xb; x < xe; ++x) dst[x * oX] = conv(normalize(src[(last - x) * sW], af));
        }
      }
      for (int64_t x = xe; x < g.w; ++x) dst[x * oX] = fill;
    }
  }
}

template <typename T>
void flip_crop_rows(const FlipCropArgs& a, int64_t begin, int64_t end) {
  const Geometry& g = a.g;
  const T* masks = static_cast<const T*>(a.masks);
  T* out = static_cast<T*>(a.out);
  const T fill = static_cast<T>(a.fill);
  for (int64_t r = begin; r < end; ++r) {
    const int64_t n = r / g.h, y = r % g.h;
    const Window win = sample_window(g, a.offsets, a.hflip, a.vflip, n);
    const int64_t sy = source_row(g, win, y);
    int64_t xb = 0, xe = 0;
    if (sy >= 0 && sy < g.H) inside_columns(g, win, &xb, &xe);
    T* dst = out + r * g.w;
    const T* src = masks + n * g.sN + (xe > xb ? sy * g.sH : 0);
    for (int64_t x = 0; x < xb; ++x) dst[x] = fill;
    if (!win.hflip) {
      for (int64_t x = xb; x < xe; ++x) dst[x] = src[(win.left + x) * g.sW];
    } else {
      const int64_t last = win.left + g.w - 1;
      for (int64_t x = xb; x < xe; ++x) dst[x] = src[(last - x) * g.sW];
    }
    for (int64_t x = xe; x < g.w; ++x) dst[x] = fill;
  }
}

}  // namespace

void normalize_flip_cpu(const NormalizeFlipArgs& args, int64_t row_begin, int64_t row_end) {
  switch (args.dtype) {
    case OutDType::kFloat32:
      return normalize_rows<ToFloat32>(args, row_begin, row_end);
    case OutDType::kFloat16:
      return normalize_rows<ToFloat16>(args, row_begin, row_end);
    case OutDType::kBFloat16:
      return normalize_rows<ToBFloat16>(args, row_begin, row_end);
  }
}

void flip_crop_cpu(const FlipCropArgs& args, int64_t row_begin, int64_t row_end) {
  switch (args.itemsize) {
    case 1:
      return flip_crop_rows<uint8_t>(args, row_begin, row_end);
    case 2:
      return flip_crop_rows<int16_t>(args, row_begin, row_end);
    case 4:
      return flip_crop_rows<int32_t>(args, row_begin, row_end);
    case 8:
      return flip_crop_rows<int64_t>(args, row_begin, row_end);
  }
}

}  // namespace kernels
}  // namespace prefetch

// CPU twin of flip_crop.cu: the same geometry (common/geometry.h). Built once, for the baseline
// ISA: the rows are copies, which gain nothing from an AVX2 build (flip_crop.h).
#include <cstdint>

#include "common/geometry.h"
#include "flip_crop/flip_crop.h"

namespace {

using prefetch::kernels::FlipCropArgs;
using prefetch::kernels::Geometry;
using prefetch::kernels::Window;

// Output rows [begin, end) of masks of element type T: the fill left and right of the columns
// whose source lies inside the image, a forward or mirrored copy between them.
template <typename T>
void flip_crop_rows(const FlipCropArgs& a, int64_t begin, int64_t end) {
  const Geometry& g = a.g;
  const T* masks = static_cast<const T*>(a.masks);
  T* out = static_cast<T*>(a.out);
  const T fill = static_cast<T>(a.fill);
  for (int64_t r = begin; r < end; ++r) {
    const int64_t n = r / g.h, y = r % g.h;
    const Window win = prefetch::kernels::sample_window(g, a.offsets, a.hflip, a.vflip, n);
    const int64_t sy = prefetch::kernels::source_row(g, win, y);
    int64_t xb = 0, xe = 0;
    if (sy >= 0 && sy < g.H) prefetch::kernels::inside_columns(g, win, &xb, &xe);
    T* dst = out + r * g.w;
    const T* src = masks + prefetch::kernels::source_sample(g, n) * g.sN + (xe > xb ? sy * g.sH : 0);
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

namespace prefetch {
namespace kernels {

void flip_crop_cpu(const FlipCropArgs& args, int64_t row_begin, int64_t row_end) {
  // Another size writes nothing: the torch layer admits only these.
  with_mask_element(args.itemsize, [&](auto element) {
    flip_crop_rows<decltype(element)>(args, row_begin, row_end);
  });
}

}  // namespace kernels
}  // namespace prefetch

// The CPU resized_crop body, compiled twice: by resized_crop_cpu.cpp for the baseline ISA and by
// resized_crop_cpu_avx2.cpp for AVX2 + FMA + F16C, chosen at run time. Everything here has
// internal linkage so the two copies never mix.
//
// Separable, as torch's kernels are: per output row, a vertical pass blends the row's input rows
// (unit-stride multiply-adds over the crop's bytes, which the compiler vectorises) into a float
// row of the crop's width; a horizontal pass then blends each output pixel's taps of that row,
// reading a pixel's C channels together. The taps come from resized_crop_taps.h: the x taps are
// tabulated once per sample (they do not depend on the row), the y taps once per row. The sums
// run in the order the CUDA thread code (resized_crop_thread_work.h) runs them, so the baseline
// build and that code compiled for the host agree bit for bit (tests/cpp); padded taps add exact
// zeros. On the GPU, FMA contraction leaves the last bits to ptxas (docs/custom_ops.md).
#include <algorithm>
#include <cstring>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
// The AVX2 build (resized_crop_cpu_avx2.cpp) defines PREFETCH_RESIZED_CROP_AVX2 before including
// this file, inside its target pragma and after <immintrin.h> (GCC's target pragma defines no
// __AVX__ macro for the region, so the file says which build it is).
#if defined(PREFETCH_RESIZED_CROP_AVX2)
#define PREFETCH_RESIZE_PAIRS 1
#else
#define PREFETCH_RESIZE_PAIRS 0
#endif

#include "common/cpu_stores.h"
#include "resized_crop/resized_crop.h"
#include "resized_crop/resized_crop_taps.h"

namespace {

using prefetch::kernels::Affine;
using prefetch::kernels::AxisScale;
using prefetch::kernels::AxisTaps;
using prefetch::kernels::OutDType;
using prefetch::kernels::ResizedCropArgs;
using prefetch::kernels::SampleCrop;

// One call's working memory, and the sample whose x taps it holds.
struct Scratch {
  int64_t n = -1;
  SampleCrop crop;
  AxisScale sx, sy;
  int64_t K = 0;                // taps per output column in the table (zero-padded)
  std::vector<AxisTaps> taps;   // [w], while the table is built
  std::vector<int64_t> xfirst;  // [w] first input column of each output column (unflipped)
  std::vector<float> xw;        // [w * K] its weights
  // The AVX build's pairs of output pixels 2i, 2i + 1 (in output order, flipped or not): tap j's
  // two weights, each over four lanes, at xw2[(i * K + j) * 8]: one load a tap for both pixels.
  std::vector<float> xw2;
  int64_t xlo = 0, xhi = 0;     // the input columns some tap reads
  std::vector<float> tmp;       // the vertical pass: crop column col, channel c at col * C + c
  std::vector<float> buf;       // one output row, normalized, before the conversion
};

// Builds sample n's x taps; the row buffer's tail past the read columns is zeroed, so padded
// taps (weight 0) and the 4-wide loads of 3-channel pixels read finite values.
inline void prepare_sample(const ResizedCropArgs& a, int64_t n, int64_t kTaps, Scratch* s) {
  s->n = n;
  s->crop = prefetch::kernels::sample_crop(a, n);
  s->sx = prefetch::kernels::axis_scale(s->crop.width, a.w, a.antialias, s->crop.bicubic);
  s->sy = prefetch::kernels::axis_scale(s->crop.height, a.h, a.antialias, s->crop.bicubic);
  s->taps.resize(static_cast<size_t>(a.w));
  int64_t K = kTaps;
  s->xlo = s->crop.width;
  s->xhi = 0;
  for (int64_t x = 0; x < a.w; ++x) {
    const AxisTaps t = prefetch::kernels::axis_taps(s->sx, x);
    s->taps[x] = t;
    if (kTaps == 0) K = std::max(K, t.count);
    s->xlo = std::min(s->xlo, t.first);
    s->xhi = std::max(s->xhi, t.first + t.count);
  }
  K = std::max<int64_t>(K, 1);
  s->K = K;
  s->xfirst.resize(static_cast<size_t>(a.w));
  s->xw.assign(static_cast<size_t>(a.w * K), 0.0f);
  for (int64_t x = 0; x < a.w; ++x) {
    const AxisTaps& t = s->taps[x];
    s->xfirst[x] = t.first;
    for (int64_t j = 0; j < t.count; ++j) s->xw[x * K + j] = prefetch::kernels::tap_weight(s->sx, t, j);
  }
  if (PREFETCH_RESIZE_PAIRS && (a.C == 3 || a.C == 4)) {
    const int64_t pairs = a.w / 2;
    s->xw2.resize(static_cast<size_t>(pairs * K * 8));
    for (int64_t i = 0; i < pairs; ++i) {
      const int64_t x0 = s->crop.hflip ? a.w - 1 - 2 * i : 2 * i;
      const int64_t x1 = s->crop.hflip ? a.w - 2 - 2 * i : 2 * i + 1;
      for (int64_t j = 0; j < K; ++j) {
        float* lanes = s->xw2.data() + (i * K + j) * 8;
        for (int l = 0; l < 4; ++l) lanes[l] = s->xw[x0 * K + j], lanes[4 + l] = s->xw[x1 * K + j];
      }
    }
  }
  const size_t size = static_cast<size_t>((s->crop.width + K) * a.C + 4);
  if (s->tmp.size() < size) s->tmp.resize(size);
  std::fill(s->tmp.begin() + s->xhi * a.C, s->tmp.end(), 0.0f);
}

// tmp[col * C + c] for the read columns: the row's y taps blended, in tap order.
inline void vertical_pass(const ResizedCropArgs& a, const AxisTaps& ty, Scratch* s) {
  const int64_t C = a.C;
  const int64_t len = (s->xhi - s->xlo) * C;
  float* t = s->tmp.data() + s->xlo * C;
  const uint8_t* base = s->crop.origin + s->xlo * C + ty.first * s->crop.row_stride;
  const int64_t stride = s->crop.row_stride;
  int64_t k = 0;
  if (ty.count >= 2) {
    const float w0 = prefetch::kernels::tap_weight(s->sy, ty, 0);
    const float w1 = prefetch::kernels::tap_weight(s->sy, ty, 1);
    const uint8_t* r0 = base;
    const uint8_t* r1 = base + stride;
    for (int64_t i = 0; i < len; ++i) t[i] = w0 * static_cast<float>(r0[i]) + w1 * static_cast<float>(r1[i]);
    k = 2;
  } else if (ty.count == 1) {
    const float w0 = prefetch::kernels::tap_weight(s->sy, ty, 0);
    for (int64_t i = 0; i < len; ++i) t[i] = w0 * static_cast<float>(base[i]);
    k = 1;
  } else {
    std::fill(t, t + len, 0.0f);
  }
  for (; k < ty.count; ++k) {
    const float wk = prefetch::kernels::tap_weight(s->sy, ty, k);
    const uint8_t* rk = base + k * stride;
    for (int64_t i = 0; i < len; ++i) t[i] += wk * static_cast<float>(rk[i]);
  }
}

// One output pixel's C blended channels: acc[c] = sum over the taps j of w[j] * p[j * C + c].
// kC = 3 and 4 blend four lanes at once (a 3-channel pixel's fourth lane reads its neighbour's
// first channel and is dropped), which the compiler keeps in one vector register.
template <int kC, int kTaps>
inline void blend_pixel(const float* p, const float* wt, int64_t K, int64_t C, float* acc) {
  const int64_t taps = kTaps > 0 ? kTaps : K;
  if (kC == 3 || kC == 4) {
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t j = 0; j < taps; ++j) {
      const float wj = wt[j];
      const float* q = p + j * kC;
      for (int c = 0; c < 4; ++c) v[c] += wj * q[c];
    }
    for (int c = 0; c < kC; ++c) acc[c] = v[c];
  } else if (kC == 1) {
    float v = 0.0f;
    for (int64_t j = 0; j < taps; ++j) v += wt[j] * p[j];
    acc[0] = v;
  } else {
    for (int64_t c = 0; c < C; ++c) {
      float v = 0.0f;
      for (int64_t j = 0; j < taps; ++j) v += wt[j] * p[j * C + c];
      acc[c] = v;
    }
  }
}

// One lane-wise multiply-add of four floats: a multiply, then an add, in every build (the AVX2
// one includes common/no_contraction.h, so its scalar sums are not fused either): each writes the
// bits of the CUDA thread work, which nvcc builds with --fmad=false (tests/cpp compare them). An
// FMA here once moved the last bit of ~5% of values, and a uint8 output's rounding with it: one
// level at 0.03% of a policy's resampled pixels on the H200 (2026-11-27).
#if defined(__SSE2__)
inline __m128 madd4(__m128 acc, __m128 w, __m128 q) { return _mm_add_ps(acc, _mm_mul_ps(w, q)); }
#endif

// Two pixels of 3 or 4 channels at once: blend_pixel's sums, each pixel's taps in its order, as
// two independent chains of 4-lane multiply-adds: the compiler had kept them scalar (8 dependent
// FMAs a tap), the pass's limit.
template <int kC, int kTaps>
inline void blend_two_pixels(const float* p0, const float* w0, const float* p1, const float* w1,
                             const float* w01, int64_t K, float* acc0, float* acc1) {
  static_assert(kC == 3 || kC == 4, "four lanes per pixel");
  const int64_t taps = kTaps > 0 ? kTaps : K;
  float out0[4], out1[4];
#if PREFETCH_RESIZE_PAIRS
  // Both pixels in one 256-bit vector (pixel 0 low, pixel 1 high), their weights one load (w01,
  // Scratch::xw2): the same lane-wise multiply, then add, in the same order as below.
  (void)w0, (void)w1;
  __m256 v = _mm256_setzero_ps();
  for (int64_t j = 0; j < taps; ++j) {
    const __m256 q = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(p0 + j * kC)),
                                          _mm_loadu_ps(p1 + j * kC), 1);
    v = _mm256_add_ps(v, _mm256_mul_ps(_mm256_loadu_ps(w01 + j * 8), q));
  }
  _mm_storeu_ps(out0, _mm256_castps256_ps128(v));
  _mm_storeu_ps(out1, _mm256_extractf128_ps(v, 1));
#elif defined(__SSE2__)
  (void)w01;
  __m128 v0 = _mm_setzero_ps(), v1 = _mm_setzero_ps();
  for (int64_t j = 0; j < taps; ++j) {
    v0 = madd4(v0, _mm_set1_ps(w0[j]), _mm_loadu_ps(p0 + j * kC));
    v1 = madd4(v1, _mm_set1_ps(w1[j]), _mm_loadu_ps(p1 + j * kC));
  }
  _mm_storeu_ps(out0, v0);
  _mm_storeu_ps(out1, v1);
#else  // (no SSE2: one pixel after the other)
  (void)w01;
  blend_pixel<kC, kTaps>(p0, w0, K, kC, out0);
  blend_pixel<kC, kTaps>(p1, w1, K, kC, out1);
#endif
  for (int c = 0; c < kC; ++c) acc0[c] = out0[c], acc1[c] = out1[c];
}

// A bicubic pixel's channels clamped to [0, 255] (resized_crop_taps.h's clamp_pixel).
inline void clamp_pixels(float* acc, int64_t C) {
  for (int64_t c = 0; c < C; ++c) acc[c] = prefetch::kernels::clamp_pixel(acc[c]);
}

// Output row y of the current sample into buf, normalized: w pixels of C channels, interleaved
// (x major) or planar (channel major).
template <int kC, int kTaps, bool kInterleave>
inline void horizontal_pass(const ResizedCropArgs& a, const Scratch& s, float* buf) {
  constexpr int kAcc = kC > 0 ? kC : 1;
  const int64_t C = kC > 0 ? kC : a.C;
  const int64_t w = a.w, K = s.K;
  const float* tmp = s.tmp.data();
  const int64_t* xfirst = s.xfirst.data();
  const float* xw = s.xw.data();
  const Affine* affine = a.affine;
  const bool clamp = s.crop.bicubic;
  float acc_fixed[kAcc];
  std::vector<float> acc_any(kC > 0 ? 0 : static_cast<size_t>(C));
  float* acc = kC > 0 ? acc_fixed : acc_any.data();
  int64_t xo = 0;
  if constexpr (kC == 3 || kC == 4) {
    float acc1[kC];
    for (; xo + 1 < w; xo += 2) {
      const int64_t x0 = s.crop.hflip ? w - 1 - xo : xo;
      const int64_t x1 = s.crop.hflip ? w - 2 - xo : xo + 1;
      const float* w01 = PREFETCH_RESIZE_PAIRS ? s.xw2.data() + (xo / 2) * K * 8 : nullptr;
      blend_two_pixels<kC, kTaps>(tmp + xfirst[x0] * C, xw + x0 * K, tmp + xfirst[x1] * C, xw + x1 * K, w01,
                                  K, acc, acc1);
      if (clamp) clamp_pixels(acc, C), clamp_pixels(acc1, C);
      for (int64_t c = 0; c < C; ++c) {
        buf[kInterleave ? xo * C + c : c * w + xo] = acc[c] * affine[c].scale + affine[c].bias;
        buf[kInterleave ? (xo + 1) * C + c : c * w + xo + 1] = acc1[c] * affine[c].scale + affine[c].bias;
      }
    }
  }
  for (; xo < w; ++xo) {
    const int64_t x = s.crop.hflip ? w - 1 - xo : xo;
    blend_pixel<kC, kTaps>(tmp + xfirst[x] * C, xw + x * K, K, C, acc);
    if (clamp) clamp_pixels(acc, C);
    for (int64_t c = 0; c < C; ++c) {
      buf[kInterleave ? xo * C + c : c * w + xo] = acc[c] * affine[c].scale + affine[c].bias;
    }
  }
}

template <typename Store, int kC, int kTaps>
void resized_crop_rows(const ResizedCropArgs& a, int64_t begin, int64_t end) {
  using T = typename Store::type;
  const int64_t C = kC > 0 ? kC : a.C;
  const int64_t w = a.w;
  // channels_last output: a row is w * C contiguous values, built interleaved and stored at once;
  // otherwise each channel's w values are built side by side and stored one channel at a time.
  const bool interleave = a.oC == 1 && a.oX == C;
  Scratch s;
  s.buf.resize(static_cast<size_t>(w * C));
  std::vector<T> scratch(Store::kNeedsScratch ? static_cast<size_t>(w * C) : 0);
  T* out = static_cast<T*>(a.out);
  for (int64_t r = begin; r < end; ++r) {
    const int64_t n = r / a.h, y = r % a.h;
    if (n != s.n) prepare_sample(a, n, kTaps, &s);
    const int64_t src_y = s.crop.vflip ? a.h - 1 - y : y;
    vertical_pass(a, prefetch::kernels::axis_taps(s.sy, src_y), &s);
    T* out_row = out + n * a.oN + y * a.oY;
    if (interleave) {
      horizontal_pass<kC, kTaps, true>(a, s, s.buf.data());
      Store::store(out_row, 1, s.buf.data(), scratch.data(), w * C);
    } else {
      horizontal_pass<kC, kTaps, false>(a, s, s.buf.data());
      for (int64_t c = 0; c < C; ++c) Store::store(out_row + c * a.oC, a.oX, s.buf.data() + c * w, scratch.data(), w);
    }
  }
}

template <typename Store, int kTaps>
void dispatch_channels(const ResizedCropArgs& a, int64_t begin, int64_t end) {
  if (a.C == 3) return resized_crop_rows<Store, 3, kTaps>(a, begin, end);
  if (a.C == 4) return resized_crop_rows<Store, 4, kTaps>(a, begin, end);
  if (a.C == 1) return resized_crop_rows<Store, 1, kTaps>(a, begin, end);
  resized_crop_rows<Store, 0, kTaps>(a, begin, end);
}

// Bilinear has two taps per pixel and bicubic four, numbers the loops can unroll; antialias has as
// many as the downscale needs, and so does a range of rows whose samples mix the two.
template <typename Store>
void dispatch_taps(const ResizedCropArgs& a, int64_t begin, int64_t end) {
  if (a.antialias || end <= begin) return dispatch_channels<Store, 0>(a, begin, end);
  int64_t bicubic = 0;
  const int64_t first = begin / a.h, last = (end - 1) / a.h;
  for (int64_t n = first; n <= last; ++n) bicubic += a.bicubic != nullptr && a.bicubic[n] != 0;
  if (bicubic == 0) return dispatch_channels<Store, 2>(a, begin, end);
  if (bicubic == last - first + 1) return dispatch_channels<Store, 4>(a, begin, end);
  dispatch_channels<Store, 0>(a, begin, end);
}

// The float16 store is defined by each including file: software rounding, or F16C instructions.
template <typename OutHalf>
void resized_crop_impl(const ResizedCropArgs& args, int64_t row_begin, int64_t row_end) {
  if (args.h <= 0 || args.w <= 0) return;
  switch (args.dtype) {
    case OutDType::kFloat32:
      return dispatch_taps<StoreFloat32>(args, row_begin, row_end);
    case OutDType::kFloat16:
      return dispatch_taps<OutHalf>(args, row_begin, row_end);
    case OutDType::kBFloat16:
      return dispatch_taps<StoreBFloat16>(args, row_begin, row_end);
    case OutDType::kUInt8:
      return dispatch_taps<StoreUInt8>(args, row_begin, row_end);
  }
}

}  // namespace

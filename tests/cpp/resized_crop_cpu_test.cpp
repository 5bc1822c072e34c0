// resized_crop's taps and CPU kernel against a naive double-precision resampler written here from
// torch's formulas (upsample_bilinear2d, upsample_bicubic2d, _upsample_bilinear2d_aa and
// _upsample_bicubic2d_aa, align_corners=False), one output element at a time.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/cpu_dispatch.h"
#include "resized_crop/resized_crop.h"
#include "resized_crop/resized_crop_taps.h"

using namespace prefetch::kernels;

namespace {

// Keys' cubic convolution kernel with parameter a (Keys 1981, eq. 15), at any x.
double keys(double x, double a) {
  x = std::fabs(x);
  if (x < 1.0) return (a + 2.0) * x * x * x - (a + 3.0) * x * x + 1.0;
  if (x < 2.0) return a * x * x * x - 5.0 * a * x * x + 8.0 * a * x - 4.0 * a;
  return 0.0;
}

// Output pixel i's weight on each input pixel of an axis of `in` pixels resampled to `out`.
std::map<int64_t, double> naive_weights(int64_t in, int64_t out, bool antialias, int64_t i,
                                        bool cubic = false) {
  std::map<int64_t, double> w;
  const double scale = static_cast<double>(in) / out;
  if (!antialias && cubic) {
    // upsample_bicubic2d: the source unclamped, four taps around floor(src), indices clamped.
    const double src = scale * (i + 0.5) - 0.5;
    const int64_t i0 = std::min(static_cast<int64_t>(std::floor(src)), in - 1);
    const double t = std::min(std::max(src - i0, 0.0), 1.0);
    for (int64_t k = -1; k <= 2; ++k) {
      w[std::min(std::max<int64_t>(i0 + k, 0), in - 1)] += keys(t - k, -0.75);
    }
    return w;
  }
  if (!antialias) {
    const double src = std::max(scale * (i + 0.5) - 0.5, 0.0);
    const int64_t i0 = std::min(static_cast<int64_t>(std::floor(src)), in - 1);
    const int64_t i1 = std::min(i0 + 1, in - 1);
    const double lambda = std::min(std::max(src - i0, 0.0), 1.0);
    w[i0] += 1.0 - lambda;
    w[i1] += lambda;
    return w;
  }
  const double stretch = scale >= 1.0 ? scale : 1.0;
  const double center = scale * (i + 0.5);
  double total = 0.0;
  for (int64_t p = 0; p < in; ++p) {
    // The triangle (or the cubic with a = -0.5) over input pixel centres p + 0.5, stretched by
    // the downscale.
    const double x = (p + 0.5 - center) / stretch;
    const double v = cubic ? keys(x, -0.5) : std::max(0.0, 1.0 - std::fabs(x));
    if (v != 0.0) w[p] = v, total += v;
  }
  for (auto& kv : w) kv.second /= total;
  return w;
}

TEST(ResizedCropTaps, MatchNaiveWeights) {
  for (bool cubic : {false, true}) {
  for (bool aa : {false, true}) {
    for (int64_t in : {1, 2, 3, 4, 5, 7, 16, 31, 100, 333}) {
      for (int64_t out : {1, 2, 3, 7, 16, 33, 224}) {
        const AxisScale s = axis_scale(in, out, aa, cubic);
        for (int64_t i = 0; i < out; ++i) {
          SCOPED_TRACE("cubic=" + std::to_string(cubic) + " aa=" + std::to_string(aa) + " in=" +
                       std::to_string(in) + " out=" + std::to_string(out) + " i=" + std::to_string(i));
          const AxisTaps t = axis_taps(s, i);
          ASSERT_GE(t.first, 0);
          ASSERT_GE(t.count, 1);
          ASSERT_LE(t.first + t.count, in);
          ASSERT_LE(t.count, s.max_taps);
          std::map<int64_t, double> got;
          for (int64_t j = 0; j < t.count; ++j) got[t.first + j] += tap_weight(s, t, j);
          const std::map<int64_t, double> expected = naive_weights(in, out, aa, i, cubic);
          double sum = 0.0;
          for (const auto& kv : got) sum += kv.second;
          EXPECT_NEAR(sum, 1.0, 1e-6);
          for (const auto& kv : expected) {
            const double g = got.count(kv.first) ? got[kv.first] : 0.0;
            EXPECT_NEAR(g, kv.second, 1e-6) << "input pixel " << kv.first;
          }
          for (const auto& kv : got) {
            if (expected.count(kv.first) == 0) {
              EXPECT_NEAR(kv.second, 0.0, 1e-6) << "input pixel " << kv.first;
            }
          }
        }
      }
    }
  }
  }
}

// floor_to_int is floor for negative, fractional and whole values alike (the unclamped bicubic
// source position is negative near the axis' start).
TEST(ResizedCropTaps, FloorToInt) {
  for (double v : {-2.0, -1.5, -1.0, -0.5, -1e-9, 0.0, 1e-9, 0.5, 1.0, 2.75, 1e6 + 0.5}) {
    EXPECT_EQ(floor_to_int(v), static_cast<int64_t>(std::floor(v))) << v;
  }
}

float half_to_float(uint16_t h) {
  const int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float v = exp == 0 ? std::ldexp(static_cast<float>(mant), -24)
                     : std::ldexp(static_cast<float>(mant | 0x400), exp - 25);
  return (h & 0x8000) ? -v : v;
}

float bfloat16_to_float(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct Sample {
  int64_t H, W, top, left, height, width;
  bool hflip, vflip;
};

// Which samples are bicubic: none (no table), all, every other one (a mixed batch: each call's
// rows span both kinds, the tap count per sample), or the second half (each call's rows one kind:
// the fixed 2- and 4-tap paths of one table).
enum class Cubic { kNone, kAll, kMixed, kHalves };

void check_cpu(int64_t C, bool channels_last, bool aa, OutDType dtype, int64_t h, int64_t w,
               const std::vector<Sample>& samples, std::mt19937& rng, Cubic cubic = Cubic::kNone) {
  const int64_t N = static_cast<int64_t>(samples.size());
  std::vector<int64_t> table(kSampleFields * N), offsets(N);
  std::vector<uint8_t> hflip(N), vflip(N), bicubic(N);
  for (int64_t n = 0; n < N; ++n) {
    bicubic[n] = cubic == Cubic::kAll || (cubic == Cubic::kMixed && n % 2) ||
                 (cubic == Cubic::kHalves && n >= N / 2);
  }
  int64_t total = 0;
  for (int64_t n = 0; n < N; ++n) {
    const Sample& s = samples[n];
    offsets[n] = total;
    total += s.H * s.W * C;
    const int64_t fields[kSampleFields] = {offsets[n], s.H, s.W, C, s.top, s.left, s.height, s.width};
    std::copy(fields, fields + kSampleFields, table.begin() + kSampleFields * n);
    hflip[n] = s.hflip, vflip[n] = s.vflip;
  }
  std::vector<uint8_t> values(static_cast<size_t>(total));
  for (auto& v : values) v = static_cast<uint8_t>(rng());
  std::vector<double> mean(C), stdev(C);
  std::vector<Affine> affine(C);
  for (int64_t c = 0; c < C; ++c) {
    mean[c] = 0.4 + 0.02 * c, stdev[c] = 0.2 + 0.01 * c;
    if (dtype == OutDType::kUInt8) {  // pixel-sized values, saturating below 0 and above 255
      stdev[c] = c % 2 ? 1.0 / (1.5 * 255.0) : 2.0 / 255.0;
      mean[c] = (c % 2 ? 60.0 : 10.0) * stdev[c];
    }
    affine[c] = {static_cast<float>(1.0 / (255.0 * stdev[c])), static_cast<float>(-mean[c] / stdev[c])};
  }
  ResizedCropArgs a;
  a.values = values.data();
  a.samples = table.data();
  a.hflip = hflip.data();
  a.vflip = vflip.data();
  a.bicubic = cubic == Cubic::kNone ? nullptr : bicubic.data();
  a.N = N, a.C = C, a.h = h, a.w = w;
  a.antialias = aa;
  a.affine = affine.data();
  a.dtype = dtype;
  if (channels_last) {
    a.oN = h * w * C, a.oC = 1, a.oY = w * C, a.oX = C;
  } else {
    a.oN = C * h * w, a.oC = h * w, a.oY = w, a.oX = 1;
  }
  std::vector<float> out32(N * C * h * w);
  std::vector<uint16_t> out16(N * C * h * w);
  std::vector<uint8_t> out8(N * C * h * w);
  a.out = dtype == OutDType::kFloat32 ? static_cast<void*>(out32.data())
          : dtype == OutDType::kUInt8 ? static_cast<void*>(out8.data()) : out16.data();
  // In two calls split inside a sample, as the torch layer's threads split the rows (kHalves:
  // between the halves).
  const int64_t split = cubic == Cubic::kHalves ? (N / 2) * h : std::min<int64_t>(N * h, h + h / 2);
  resized_crop_cpu(a, 0, split);
  resized_crop_cpu(a, split, N * h);
  for (int64_t n = 0; n < N; ++n) {
    const Sample& s = samples[n];
    const bool cub = bicubic[n] != 0;
    for (int64_t y = 0; y < h; ++y) {
      const auto wy = naive_weights(s.height, h, aa, s.vflip ? h - 1 - y : y, cub);
      for (int64_t x = 0; x < w; ++x) {
        const auto wx = naive_weights(s.width, w, aa, s.hflip ? w - 1 - x : x, cub);
        for (int64_t c = 0; c < C; ++c) {
          double v = 0.0;
          for (const auto& ky : wy) {
            for (const auto& kx : wx) {
              const int64_t i = offsets[n] + ((s.top + ky.first) * s.W + s.left + kx.first) * C + c;
              v += ky.second * kx.second * values[i];
            }
          }
          // A bicubic blend overshoots at edges; torchvision's uint8 result is clamped.
          if (cub) v = std::min(255.0, std::max(0.0, v));
          const double ref = (v / 255.0 - mean[c]) / stdev[c];
          const int64_t i = n * a.oN + c * a.oC + y * a.oY + x * a.oX;
          // float32: weights rounded to float and float sums of up to a few dozen terms of up to
          // 255, then the normalization (x 1 / (255 std) ~ 0.02): 1e-5 covers it with room.
          if (dtype == OutDType::kFloat32) {
            ASSERT_NEAR(out32[i], ref, 1e-5 * std::max(1.0, std::fabs(ref))) << n << " " << c << " " << y << " " << x;
          } else if (dtype == OutDType::kUInt8) {
            // One of the two roundings of the saturated value (float32 sums decide a near tie).
            const double clamped = std::min(255.0, std::max(0.0, ref));
            ASSERT_LE(std::fabs(out8[i] - clamped), 0.5 + 1e-3) << n << " " << c << " " << y << " " << x;
          } else if (dtype == OutDType::kFloat16) {
            ASSERT_NEAR(half_to_float(out16[i]), ref, std::fabs(ref) * 0x1p-10 + 1e-5) << n << " " << c << " " << y << " " << x;
          } else {
            ASSERT_NEAR(bfloat16_to_float(out16[i]), ref, std::fabs(ref) * 0x1p-7 + 1e-5) << n << " " << c << " " << y << " " << x;
          }
        }
      }
    }
  }
}

}  // namespace

TEST(ResizedCropCpu, MatchesNaiveResampler) {
  std::mt19937 rng(31);
  // Boxes anywhere: whole images, one pixel, at the corners; crops smaller and larger than the
  // output (upscale, downscale, and one axis of each); flips of every kind.
  const std::vector<Sample> samples = {
      {20, 30, 0, 0, 20, 30, false, false},  {20, 30, 5, 7, 1, 1, true, false},
      {9, 40, 2, 3, 6, 37, false, true},     {40, 9, 1, 0, 38, 4, true, true},
      {50, 60, 49, 59, 1, 1, true, true},    {17, 13, 0, 2, 17, 11, false, false},
      {3, 100, 0, 10, 3, 90, true, false},
  };
  for (bool avx2 : {true, false}) {  // the AVX2 build (where the CPU has it) and the baseline
    const bool previous = set_cpu_avx2_allowed(avx2);
    for (bool aa : {false, true}) {
      for (int64_t C : {1, 3, 4, 2}) {
        for (bool cl : {false, true}) {
          for (OutDType dt : {OutDType::kFloat32, OutDType::kFloat16, OutDType::kBFloat16, OutDType::kUInt8}) {
            SCOPED_TRACE("C=" + std::to_string(C) + " channels_last=" + std::to_string(cl) + " aa=" +
                         std::to_string(aa) + " dtype=" + std::to_string(static_cast<int>(dt)) +
                         " avx2=" + std::to_string(avx2));
            check_cpu(C, cl, aa, dt, 9, 14, samples, rng);
          }
        }
      }
    }
    set_cpu_avx2_allowed(previous);
  }
}

// Bicubic, with and without antialias, every sample or every other one (a batch mixing bicubic
// and bilinear, as timm's "random" interpolation draws), in both builds: random bytes overshoot
// at nearly every pixel, so the clamp is exercised too.
TEST(ResizedCropCpu, BicubicMatchesNaiveResampler) {
  std::mt19937 rng(37);
  const std::vector<Sample> samples = {
      {20, 30, 0, 0, 20, 30, false, false},  {20, 30, 5, 7, 1, 1, true, false},
      {9, 40, 2, 3, 6, 37, false, true},     {40, 9, 1, 0, 38, 4, true, true},
      {50, 60, 49, 59, 1, 1, true, true},    {17, 13, 0, 2, 17, 11, false, false},
      {3, 100, 0, 10, 3, 90, true, false},   {2, 2, 0, 0, 2, 2, false, false},
  };
  for (bool avx2 : {true, false}) {
    const bool previous = set_cpu_avx2_allowed(avx2);
    for (Cubic cubic : {Cubic::kAll, Cubic::kMixed, Cubic::kHalves}) {
      for (bool aa : {false, true}) {
        for (int64_t C : {1, 3, 4, 2}) {
          for (bool cl : {false, true}) {
            for (OutDType dt : {OutDType::kFloat32, OutDType::kBFloat16, OutDType::kUInt8}) {
              SCOPED_TRACE("C=" + std::to_string(C) + " channels_last=" + std::to_string(cl) + " aa=" +
                           std::to_string(aa) + " dtype=" + std::to_string(static_cast<int>(dt)) +
                           " avx2=" + std::to_string(avx2) + " cubic=" + std::to_string(static_cast<int>(cubic)));
              check_cpu(C, cl, aa, dt, 9, 14, samples, rng, cubic);
            }
          }
        }
      }
    }
    set_cpu_avx2_allowed(previous);
  }
}

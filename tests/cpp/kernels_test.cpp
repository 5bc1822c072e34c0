// The torch-free kernels: geometry against brute force, the CPU kernels against a naive loop
// written here, and the float -> half/bfloat16 rounding against known bit patterns.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/cpu_dispatch.h"
#include "common/cpu_stores.h"
#include "common/float_outputs.h"
#include "common/geometry.h"
#include "flip_crop/flip_crop.h"
#include "normalize_flip/normalize_flip.h"

using namespace prefetch::kernels;

// torchvision's CenterCrop (torchvision/transforms/v2/functional/_geometry.py): inside the image
// the window starts at _center_crop_compute_crop_anchor's int(round((H - h) / 2.0)) (Python's
// round: half to even, as nearbyint in the default rounding mode); larger than the image, after
// _center_crop_compute_padding's (h - H) // 2 pixels of fill.
TEST(Geometry, CenterStartIsTorchvisionsCenterCrop) {
  ASSERT_EQ(std::fegetround(), FE_TONEAREST);
  for (int64_t H = 1; H <= 40; ++H) {
    for (int64_t h = 1; h <= 40; ++h) {
      const int64_t expected = h <= H ? static_cast<int64_t>(std::nearbyint((H - h) / 2.0))
                                      : -((h - H) / 2);
      EXPECT_EQ(center_start(H, h), expected) << "H=" << H << " h=" << h;
    }
  }
  EXPECT_EQ(center_start(35, 24), 6);   // CenterCrop(24) of 35x39 starts at (6, 8)
  EXPECT_EQ(center_start(39, 24), 8);
  EXPECT_EQ(center_start(32, 37), -2);  // CenterCrop(37) of 32x32 puts the image at (2, 2)
}

TEST(Geometry, InsideColumnsMatchesBruteForce) {
  for (int64_t W : {1, 5, 12}) {
    for (int64_t w : {1, 4, 12, 20}) {
      for (int64_t left = -25; left <= 25; ++left) {
        for (bool hflip : {false, true}) {
          Geometry g;
          g.W = W;
          g.w = w;
          Window win;
          win.left = left;
          win.hflip = hflip;
          int64_t b, e;
          inside_columns(g, win, &b, &e);
          // The callers fill [0, b) and [e, w) of a w-element row.
          ASSERT_TRUE(0 <= b && b <= e && e <= w) << "W=" << W << " w=" << w << " left=" << left
                                                  << " hflip=" << hflip << ": [" << b << ", " << e << ")";
          for (int64_t x = 0; x < w; ++x) {
            int64_t sx = source_col(g, win, x);
            bool inside = sx >= 0 && sx < W;
            EXPECT_EQ(inside, x >= b && x < e) << "W=" << W << " w=" << w << " left=" << left
                                               << " hflip=" << hflip << " x=" << x;
          }
        }
      }
    }
  }
}

TEST(Conversions, HalfKnownValues) {
  struct Case {
    float f;
    uint16_t bits;
  };
  const Case cases[] = {
      {0.0f, 0x0000},      {-0.0f, 0x8000},    {1.0f, 0x3c00},        {-2.0f, 0xc000},
      {65504.0f, 0x7bff},  {65520.0f, 0x7c00}, {1e6f, 0x7c00},        {5.960464477539063e-8f, 0x0001},
      {2.98e-8f, 0x0000},  {6.103515625e-5f, 0x0400}, {1.0009765625f, 0x3c01},
      {1.00048828125f, 0x3c00} /* tie -> even */, {1.00146484375f, 0x3c02} /* tie -> even */,
      {INFINITY, 0x7c00},  {-INFINITY, 0xfc00},
  };
  for (const Case& c : cases) EXPECT_EQ(float_to_half_bits(c.f), c.bits) << c.f;
  EXPECT_EQ(float_to_half_bits(NAN) & 0x7c00, 0x7c00);
  EXPECT_NE(float_to_half_bits(NAN) & 0x03ff, 0);
}

TEST(Conversions, BFloat16KnownValues) {
  EXPECT_EQ(float_to_bfloat16_bits(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bfloat16_bits(-2.0f), 0xc000);
  uint32_t tie_even = 0x3f808000u;  // halfway between 0x3f80 and 0x3f81: stays even
  uint32_t tie_odd = 0x3f818000u;   // halfway between 0x3f81 and 0x3f82: goes to even
  float f;
  std::memcpy(&f, &tie_even, 4);
  EXPECT_EQ(float_to_bfloat16_bits(f), 0x3f80);
  std::memcpy(&f, &tie_odd, 4);
  EXPECT_EQ(float_to_bfloat16_bits(f), 0x3f82);
  uint16_t nan = float_to_bfloat16_bits(NAN);
  EXPECT_EQ(nan & 0x7f80, 0x7f80);
  EXPECT_NE(nan & 0x007f, 0);
}

namespace {

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

// Naive reference: one output element at a time, straight from the op's definition.
float naive(const std::vector<uint8_t>& img, int64_t H, int64_t W, int64_t C, int64_t h, int64_t w,
            int64_t n, int64_t c, int64_t y, int64_t x, int64_t top, int64_t left, bool hf, bool vf,
            uint8_t fill, Affine af) {
  int64_t wy = vf ? h - 1 - y : y, wx = hf ? w - 1 - x : x;
  int64_t sy = top + wy, sx = left + wx;
  uint8_t v = (sy >= 0 && sy < H && sx >= 0 && sx < W) ? img[((n * H + sy) * W + sx) * C + c] : fill;
  return static_cast<float>(v) * af.scale + af.bias;
}

void check_normalize(int64_t C, bool channels_last, OutDType dtype) {
  const int64_t N = 5, H = 9, W = 11, h = 7, w = 13;
  std::mt19937 rng(static_cast<unsigned>(C * 10 + channels_last));
  std::vector<uint8_t> img(N * H * W * C);
  for (auto& v : img) v = static_cast<uint8_t>(rng());
  std::vector<int64_t> offsets(2 * N);
  std::vector<uint8_t> hflip(N), vflip(N);
  for (int64_t n = 0; n < N; ++n) {
    offsets[2 * n] = static_cast<int64_t>(rng() % 15) - 5;
    offsets[2 * n + 1] = static_cast<int64_t>(rng() % 17) - 6;
    hflip[n] = rng() % 2;
    vflip[n] = rng() % 2;
  }
  std::vector<Affine> affine(C);
  for (int64_t c = 0; c < C; ++c) affine[c] = {1.0f / (255.0f * (0.2f + 0.01f * c)), -0.5f - 0.1f * c};
  // uint8: exact values with ties (odd bytes x 0.5), saturating at 0 and at 255.
  if (dtype == OutDType::kUInt8)
    for (int64_t c = 0; c < C; ++c) affine[c] = c % 2 ? Affine{1.5f, -60.0f} : Affine{0.5f, -10.0f};
  NormalizeFlipArgs a;
  a.images = img.data();
  a.g = Geometry{N, C, H, W, H * W * C, 1, W * C, C, h, w};
  a.offsets = offsets.data();
  a.hflip = hflip.data();
  a.vflip = vflip.data();
  a.affine = affine.data();
  a.fill = 33;
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
  normalize_flip_cpu(a, 0, N * h / 2);  // two ranges, as parallel_for would split them
  normalize_flip_cpu(a, N * h / 2, N * h);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x) {
          float ref = naive(img, H, W, C, h, w, n, c, y, x, offsets[2 * n], offsets[2 * n + 1],
                            hflip[n], vflip[n], 33, affine[c]);
          int64_t i = n * a.oN + c * a.oC + y * a.oY + x * a.oX;
          // The AVX2 build fuses the multiply-add (one rounding, as CUDA does) and the naive
          // loop rounds twice: a few float ulps apart near zero, hence the absolute floor.
          if (dtype == OutDType::kFloat32) {
            ASSERT_NEAR(out32[i], ref, 1e-6 * std::max(1.0f, std::fabs(ref)))
                << n << " " << c << " " << y << " " << x;
          } else if (dtype == OutDType::kUInt8) {  // saturated, ties to even
            ASSERT_EQ(out8[i], static_cast<uint8_t>(std::nearbyint(std::min(255.0f, std::max(0.0f, ref)))))
                << n << " " << c << " " << y << " " << x;
          } else if (dtype == OutDType::kFloat16) {
            ASSERT_NEAR(half_to_float(out16[i]), ref, std::fabs(ref) * 0x1p-10f + 0x1p-24f)
                << n << " " << c << " " << y << " " << x;
          } else {
            ASSERT_NEAR(bfloat16_to_float(out16[i]), ref, std::fabs(ref) * 0x1p-7f + 1e-30f)
                << n << " " << c << " " << y << " " << x;
          }
        }
}

}  // namespace

TEST(NormalizeFlipCpu, MatchesNaiveLoop) {
  for (bool avx2 : {true, false}) {  // the AVX2 build (where the CPU has it) and the baseline
  const bool previous = set_cpu_avx2_allowed(avx2);
  for (int64_t C : {1, 2, 3, 4}) {
    for (bool cl : {false, true}) {
      for (OutDType dt : {OutDType::kFloat32, OutDType::kFloat16, OutDType::kBFloat16, OutDType::kUInt8}) {
        SCOPED_TRACE("C=" + std::to_string(C) + " channels_last=" + std::to_string(cl) +
                     " dtype=" + std::to_string(static_cast<int>(dt)) + " avx2=" + std::to_string(avx2));
        check_normalize(C, cl, dt);
      }
    }
  }
  set_cpu_avx2_allowed(previous);
  }
}

TEST(FlipCropCpu, MatchesNaiveLoop) {
  const int64_t N = 3, H = 6, W = 8, h = 9, w = 5;
  std::vector<int32_t> masks(N * H * W);
  for (size_t i = 0; i < masks.size(); ++i) masks[i] = static_cast<int32_t>(i);
  std::vector<int64_t> offsets = {-2, 1, 3, -4, 0, 5};
  std::vector<uint8_t> hflip = {1, 0, 1}, vflip = {0, 1, 1};
  std::vector<int32_t> out(N * h * w, 12345);
  FlipCropArgs a;
  a.masks = masks.data();
  a.itemsize = 4;
  a.g = Geometry{N, 1, H, W, H * W, 0, W, 1, h, w};
  a.offsets = offsets.data();
  a.hflip = hflip.data();
  a.vflip = vflip.data();
  a.fill = -7;
  a.out = out.data();
  flip_crop_cpu(a, 0, N * h);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) {
        int64_t sy = offsets[2 * n] + (vflip[n] ? h - 1 - y : y);
        int64_t sx = offsets[2 * n + 1] + (hflip[n] ? w - 1 - x : x);
        int32_t ref = (sy >= 0 && sy < H && sx >= 0 && sx < W) ? masks[(n * H + sy) * W + sx] : -7;
        ASSERT_EQ(out[(n * h + y) * w + x], ref) << n << " " << y << " " << x;
      }
}

// The uint8 store's SIMD body and float_to_uint8 (the scalar tail, and the CUDA threads' rule)
// write the same bytes: saturation, NaN, infinities, ties at every half, and random values,
// at every offset of a 16-value block.
TEST(StoreUInt8, SimdBodyEqualsTheScalarRule) {
  std::vector<float> v = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::infinity(), -1e30f, 1e30f, -0.0f, 0.0f, -0.5f,
                          -0.49f, 0.49f, 0.5f, 0.51f, 1.5f, 2.5f, 3.5f, 127.5f, 128.5f, 253.5f, 254.5f,
                          254.51f, 255.0f, 255.49f, 255.5f, 256.0f, 3e9f, -3e9f};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> any(-40.0f, 300.0f);
  for (int i = 0; i < 200; ++i) v.push_back(any(rng));
  for (int i = 0; i <= 255; ++i) v.push_back(i + 0.5f);
  for (size_t start = 0; start < 16; ++start) {
    const int64_t n = static_cast<int64_t>(v.size() - start);
    std::vector<uint8_t> got(n, 0xA5);
    StoreUInt8::store(got.data(), 1, v.data() + start, nullptr, n);
    for (int64_t i = 0; i < n; ++i) {
      const float x = v[start + i];
      ASSERT_EQ(got[i], float_to_uint8(x)) << "value " << x;
      if (!std::isnan(x)) {  // ties to even, saturated
        ASSERT_EQ(got[i], static_cast<uint8_t>(std::nearbyint(std::min(255.0f, std::max(0.0f, x))))) << x;
      } else {
        ASSERT_EQ(got[i], 0) << "NaN";
      }
    }
  }
}

// The CUDA resized_crop kernel's per-thread code (resized_crop_thread_work.h), run on the CPU over
// every thread index of every launch, must write exactly what the CPU kernel writes (its baseline
// build: the same roundings as this host code). No GPU needed: only the mapping of threads onto
// these calls is left to the GPU tests.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "common/cpu_dispatch.h"
#include "resized_crop/resized_crop.h"
#include "resized_crop/resized_crop_thread_work.h"

using namespace prefetch::kernels;

namespace {

struct Case {
  int64_t N, C, h, w;
  bool channels_last, antialias;
  OutDType dtype;
  int bicubic = 0;  // 0: no table (every sample bilinear), 1: every sample, 2: a random half
};

std::string describe(const Case& c) {
  return "N=" + std::to_string(c.N) + " C=" + std::to_string(c.C) + " h=" + std::to_string(c.h) +
         " w=" + std::to_string(c.w) + " cl=" + std::to_string(c.channels_last) +
         " aa=" + std::to_string(c.antialias) + " dtype=" + std::to_string(static_cast<int>(c.dtype)) +
         " bicubic=" + std::to_string(c.bicubic);
}

// Runs the CUDA thread body over every launch and thread index, split into launches of at most
// `max_work` items.
void run_threads(const ResizedCropArgs& a, int64_t max_work) {
  std::vector<ResizedCropLaunch> launches;
  ASSERT_TRUE(plan_resized_crop_launches(a, &launches, max_work));
  int64_t samples = 0;
  for (const ResizedCropLaunch& l : launches) {
    ASSERT_EQ(l.n0, samples);
    ASSERT_LE(static_cast<int64_t>(l.work), max_work);
    samples += l.samples;
    for (uint32_t t = 0; t < l.work; ++t) {
      with_converter(a.dtype, [&](auto conv) {
        using Conv = decltype(conv);
        l.channels_last ? resized_crop_thread<Conv, true>(a, l, a.affine, t)
                        : resized_crop_thread<Conv, false>(a, l, a.affine, t);
      });
    }
  }
  ASSERT_EQ(samples, a.N);
}

// Images of random sizes with random boxes: whole images, 1-pixel boxes, boxes at every edge,
// crops both smaller and larger than the output on each axis. Samples lie in `values` in a
// shuffled order with gaps between them, as a Ragged allows.
void check_case(const Case& k, int64_t max_work, std::mt19937& rng) {
  SCOPED_TRACE(describe(k) + " max_work=" + std::to_string(max_work));
  std::vector<int64_t> samples(kSampleFields * k.N);
  std::vector<uint8_t> hflip(k.N), vflip(k.N), bicubic(k.N);
  int64_t total = 0;
  for (int64_t n = k.N - 1; n >= 0; --n) {
    int64_t* row = samples.data() + kSampleFields * n;
    const int64_t H = 1 + static_cast<int64_t>(rng() % 40), W = 1 + static_cast<int64_t>(rng() % 40);
    row[kHeight] = H, row[kWidth] = W, row[kChannels] = k.C;
    row[kOffset] = total + static_cast<int64_t>(rng() % 5);
    total = row[kOffset] + H * W * k.C;
    int64_t bh = 1 + static_cast<int64_t>(rng() % H), bw = 1 + static_cast<int64_t>(rng() % W);
    if (n % 4 == 1) bh = bw = 1;         // a single pixel
    if (n % 4 == 2) bh = H, bw = W;      // the whole image
    row[kTop] = static_cast<int64_t>(rng() % (H - bh + 1));
    row[kLeft] = static_cast<int64_t>(rng() % (W - bw + 1));
    row[kBoxHeight] = bh, row[kBoxWidth] = bw;
    hflip[n] = rng() % 2;
    vflip[n] = rng() % 2;
    bicubic[n] = k.bicubic == 1 || (k.bicubic == 2 && rng() % 2);
  }
  std::vector<uint8_t> values(static_cast<size_t>(total));
  for (auto& v : values) v = static_cast<uint8_t>(rng());
  std::vector<Affine> affine(k.C);
  for (int64_t c = 0; c < k.C; ++c) affine[c] = {1.0f / (255.0f * (0.2f + 0.01f * c)), -0.5f - 0.1f * c};

  ResizedCropArgs a;
  a.values = values.data();
  a.samples = samples.data();
  a.hflip = hflip.data();
  a.vflip = vflip.data();
  a.bicubic = k.bicubic == 0 ? nullptr : bicubic.data();
  a.N = k.N, a.C = k.C, a.h = k.h, a.w = k.w;
  a.antialias = k.antialias;
  a.affine = affine.data();
  a.dtype = k.dtype;
  // Output strides as the op allocates them: contiguous NCHW, or channels_last when C > 1.
  if (k.channels_last && k.C > 1) {
    a.oN = k.h * k.w * k.C, a.oC = 1, a.oY = k.w * k.C, a.oX = k.C;
  } else {
    a.oN = k.C * k.h * k.w, a.oC = k.h * k.w, a.oY = k.w, a.oX = 1;
  }
  const size_t bytes = static_cast<size_t>(k.N * k.C * k.h * k.w) * out_dtype_bytes(k.dtype);
  // Poisoned, so an element no thread writes shows up.
  std::vector<uint8_t> got(bytes, 0x5A);
  a.out = got.data();
  run_threads(a, max_work);
  // Both CPU builds round as the thread work does (the AVX2 one contracts nothing), and so as the
  // GPU does (nvcc --fmad=false): the same bits, uint8 outputs' roundings included.
  for (bool avx2 : {false, true}) {
    SCOPED_TRACE(avx2 ? "AVX2 build" : "baseline build");
    std::vector<uint8_t> expected(bytes, 0xA5);
    a.out = expected.data();
    const bool previous = set_cpu_avx2_allowed(avx2);
    resized_crop_cpu(a, 0, k.N * k.h / 2);  // two ranges, as parallel_for would split them
    resized_crop_cpu(a, k.N * k.h / 2, k.N * k.h);
    set_cpu_avx2_allowed(previous);
    for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(got[i], expected[i]) << "byte " << i << " of " << bytes;
  }
}

}  // namespace

TEST(ResizedCropThread, MatchesCpuKernelOverEveryThread) {
  std::mt19937 rng(23);
  for (OutDType dtype : {OutDType::kFloat32, OutDType::kFloat16, OutDType::kBFloat16, OutDType::kUInt8}) {
    for (bool cl : {false, true}) {
      for (bool aa : {false, true}) {
        for (int64_t C : {1, 3, 4, 5}) {
          // Rows shorter than, equal to and not a multiple of a thread's 8 elements.
          check_case({6, C, 7, 13, cl, aa, dtype}, INT32_MAX, rng);
          check_case({5, C, 16, 8, cl, aa, dtype}, INT32_MAX, rng);
          check_case({4, C, 3, 1, cl, aa, dtype}, INT32_MAX, rng);
        }
      }
    }
  }
}

// Bicubic (random bytes: the clamp at nearly every pixel), every sample or a random half.
TEST(ResizedCropThread, BicubicMatchesCpuKernelOverEveryThread) {
  std::mt19937 rng(41);
  for (OutDType dtype : {OutDType::kFloat32, OutDType::kFloat16, OutDType::kBFloat16, OutDType::kUInt8}) {
    for (bool cl : {false, true}) {
      for (bool aa : {false, true}) {
        for (int bicubic : {1, 2}) {
          for (int64_t C : {1, 3, 4, 5}) {
            check_case({6, C, 7, 13, cl, aa, dtype, bicubic}, INT32_MAX, rng);
            check_case({5, C, 16, 8, cl, aa, dtype, bicubic}, INT32_MAX, rng);
            check_case({4, C, 3, 1, cl, aa, dtype, bicubic}, INT32_MAX, rng);
          }
        }
      }
    }
  }
}

TEST(ResizedCropThread, SplitLaunchesCoverEverySampleOnce) {
  std::mt19937 rng(29);
  for (bool cl : {false, true}) {
    // Work per sample: NCHW 3 * 7 rows * 2 vectors = 42; channels_last 7 rows * 5 vectors = 35.
    // Bounds of one sample, two and a half samples, and a prime.
    for (int64_t max_work : {42, 105, 97, 1000}) {
      check_case({7, 3, 7, 13, cl, true, OutDType::kFloat16}, max_work, rng);
    }
  }
}

TEST(ResizedCropThread, RefusesASampleTooLargeForOneLaunch) {
  ResizedCropArgs a;
  a.N = 2, a.C = 3, a.h = 8, a.w = 8;
  a.oN = 3 * 64, a.oC = 64, a.oY = 8, a.oX = 1;
  std::vector<ResizedCropLaunch> launches;
  EXPECT_FALSE(plan_resized_crop_launches(a, &launches, 23));  // 24 items per sample
  EXPECT_TRUE(plan_resized_crop_launches(a, &launches, 24));
  EXPECT_EQ(launches.size(), 2u);
}

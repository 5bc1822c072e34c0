// The CUDA normalize_flip and flip_crop kernels' per-thread code (normalize_flip_thread_work.h,
// flip_crop_thread_work.h), run on the CPU over every thread index of every launch, must write
// exactly what the CPU kernels write; and the launch-wide divisions it relies on (FastDivmod) must
// be exact. No GPU needed: only the mapping of threads onto these calls is left to the GPU tests.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/affine_table.h"
#include "common/cpu_dispatch.h"
#include "common/fast_divmod.h"
#include "flip_crop/flip_crop.h"
#include "flip_crop/flip_crop_thread_work.h"
#include "normalize_flip/normalize_flip.h"
#include "normalize_flip/normalize_flip_thread_work.h"

using namespace prefetch::kernels;

TEST(FastDivmod, ExactForSmallDivisorsAndEveryNumeratorClass) {
  std::mt19937 rng(7);
  std::vector<uint32_t> numerators = {0u, 1u, 2u, 3u, 0x7fffffffu, 0x80000000u, 0xfffffffeu, 0xffffffffu};
  for (int i = 0; i < 2000; ++i) numerators.push_back(static_cast<uint32_t>(rng()));
  for (uint32_t n = 0; n < 5000; ++n) numerators.push_back(n);
  std::vector<uint32_t> divisors;
  for (uint32_t d = 1; d <= 1100; ++d) divisors.push_back(d);
  for (int s = 11; s <= 31; ++s) {  // around every power of two up to the bound
    const uint32_t p = 1u << s;
    for (uint32_t d : {p - 1, p, p + 1}) divisors.push_back(d);
  }
  for (uint32_t d : divisors) {
    const FastDivmod f(d);
    for (uint32_t n : numerators) {
      uint32_t q, r;
      f.divmod(n, &q, &r);
      ASSERT_EQ(q, n / d) << n << " / " << d;
      ASSERT_EQ(r, n % d) << n << " % " << d;
    }
  }
}

namespace {

struct Case {
  int64_t N, C, H, W, h, w;
  bool nchw_input, channels_last, gather, centred;
  OutDType dtype;
};

std::string describe(const Case& c) {
  return "N=" + std::to_string(c.N) + " C=" + std::to_string(c.C) + " H=" + std::to_string(c.H) +
         " W=" + std::to_string(c.W) + " h=" + std::to_string(c.h) + " w=" + std::to_string(c.w) +
         " nchw_in=" + std::to_string(c.nchw_input) + " cl=" + std::to_string(c.channels_last) +
         " gather=" + std::to_string(c.gather) + " centred=" + std::to_string(c.centred) +
         " dtype=" + std::to_string(static_cast<int>(c.dtype));
}

// Runs the CUDA thread body over every launch and thread index, split into launches of at most
// `max_work` items, into `out`.
void run_threads(const NormalizeFlipArgs& a, int64_t max_work) {
  std::vector<NormalizeFlipLaunch> launches;
  ASSERT_TRUE(plan_normalize_flip_launches(a, &launches, max_work));
  int64_t samples = 0;
  for (const NormalizeFlipLaunch& l : launches) {
    ASSERT_EQ(l.n0, samples);
    ASSERT_LE(static_cast<int64_t>(l.work), max_work);
    samples += l.samples;
    for (uint32_t t = 0; t < l.work; ++t) {
      with_converter(a.dtype, [&](auto conv) {
        using Conv = decltype(conv);
        l.channels_last ? normalize_flip_thread<Conv, true>(a, l, a.affine, t)
                        : normalize_flip_thread<Conv, false>(a, l, a.affine, t);
      });
    }
  }
  ASSERT_EQ(samples, a.g.N);
}

void check_case(const Case& k, int64_t max_work, std::mt19937& rng) {
  SCOPED_TRACE(describe(k) + " max_work=" + std::to_string(max_work));
  const int64_t sources = k.gather ? k.N + 3 : k.N;
  std::vector<uint8_t> img(static_cast<size_t>(sources * k.C * k.H * k.W));
  for (auto& v : img) v = static_cast<uint8_t>(rng());
  std::vector<int64_t> offsets(2 * k.N), rows(k.N);
  std::vector<uint8_t> hflip(k.N), vflip(k.N);
  for (int64_t n = 0; n < k.N; ++n) {
    offsets[2 * n] = static_cast<int64_t>(rng() % (k.H + 5)) - 3;
    offsets[2 * n + 1] = static_cast<int64_t>(rng() % (k.W + 5)) - 3;
    hflip[n] = rng() % 2;
    vflip[n] = rng() % 2;
    rows[n] = static_cast<int64_t>(rng() % sources);
  }
  std::vector<Affine> affine(k.C);
  for (int64_t c = 0; c < k.C; ++c) affine[c] = {1.0f / (255.0f * (0.2f + 0.01f * c)), -0.5f - 0.1f * c};

  NormalizeFlipArgs a;
  a.images = img.data();
  a.g.N = k.N;
  a.g.C = k.C;
  a.g.H = k.H;
  a.g.W = k.W;
  a.g.h = k.h;
  a.g.w = k.w;
  if (k.nchw_input) {
    a.g.sN = k.C * k.H * k.W, a.g.sC = k.H * k.W, a.g.sH = k.W, a.g.sW = 1;
  } else {
    a.g.sN = k.H * k.W * k.C, a.g.sC = 1, a.g.sH = k.W * k.C, a.g.sW = k.C;
  }
  if (k.gather) {
    a.g.rows = rows.data();
    a.g.sources = sources;
  }
  a.offsets = k.centred ? nullptr : offsets.data();
  a.hflip = hflip.data();
  a.vflip = k.centred ? nullptr : vflip.data();
  a.affine = affine.data();
  a.fill = 17;
  a.dtype = k.dtype;
  // Output strides as the op allocates them: contiguous NCHW, or channels_last when C > 1.
  if (k.channels_last && k.C > 1) {
    a.oN = k.h * k.w * k.C, a.oC = 1, a.oY = k.w * k.C, a.oX = k.C;
  } else {
    a.oN = k.C * k.h * k.w, a.oC = k.h * k.w, a.oY = k.w, a.oX = 1;
  }
  const size_t elems = static_cast<size_t>(k.N * k.C * k.h * k.w);
  const size_t bytes = elems * out_dtype_bytes(k.dtype);
  // Poisoned, so an element no thread writes shows up.
  std::vector<uint8_t> got(bytes, 0x5A);
  a.out = got.data();
  run_threads(a, max_work);
  // Both CPU builds round as the thread work does (a multiply, then an add; the AVX2 one contracts
  // nothing), and so as the GPU does (nvcc --fmad=false): the same bits.
  for (bool avx2 : {false, true}) {
    SCOPED_TRACE(avx2 ? "AVX2 build" : "baseline build");
    std::vector<uint8_t> expected(bytes, 0xA5);
    a.out = expected.data();
    const bool previous = set_cpu_avx2_allowed(avx2);
    normalize_flip_cpu(a, 0, k.N * k.h);
    set_cpu_avx2_allowed(previous);
    for (size_t i = 0; i < bytes; ++i) {
      ASSERT_EQ(got[i], expected[i]) << "byte " << i << " of " << bytes;
    }
  }
}

}  // namespace

TEST(NormalizeFlipThread, MatchesCpuKernelOverEveryThread) {
  std::mt19937 rng(11);
  for (OutDType dtype : {OutDType::kFloat32, OutDType::kFloat16, OutDType::kBFloat16, OutDType::kUInt8}) {
    for (bool cl : {false, true}) {
      for (int64_t C : {1, 3, 4, 5}) {
        for (bool nchw_input : {false, true}) {
          // Rows shorter than, equal to and not a multiple of a thread's 8 elements; crops
          // inside, equal to and larger than the image (fill); gathered and centred windows.
          check_case({4, C, 9, 11, 7, 13, nchw_input, cl, false, false, dtype}, INT32_MAX, rng);
          check_case({3, C, 6, 5, 9, 3, nchw_input, cl, true, false, dtype}, INT32_MAX, rng);
          check_case({2, C, 16, 16, 16, 16, nchw_input, cl, false, true, dtype}, INT32_MAX, rng);
          check_case({5, C, 10, 12, 8, 8, nchw_input, cl, true, true, dtype}, INT32_MAX, rng);
        }
      }
    }
  }
}

TEST(NormalizeFlipThread, SplitLaunchesCoverEverySampleOnce) {
  std::mt19937 rng(13);
  for (bool cl : {false, true}) {
    // Work per sample: NCHW 3 * 7 rows * 2 vectors = 42; channels_last 7 rows * 5 vectors = 35.
    // Bounds of one sample, two and a half samples, and a prime.
    for (int64_t max_work : {42, 105, 97, 1000}) {
      check_case({7, 3, 9, 11, 7, 13, false, cl, true, false, OutDType::kFloat16}, max_work, rng);
    }
  }
}

TEST(NormalizeFlipThread, RefusesASampleTooLargeForOneLaunch) {
  NormalizeFlipArgs a;
  a.g.N = 2, a.g.C = 3, a.g.H = 8, a.g.W = 8, a.g.h = 8, a.g.w = 8;
  a.oN = 3 * 64, a.oC = 64, a.oY = 8, a.oX = 1;
  std::vector<NormalizeFlipLaunch> launches;
  EXPECT_FALSE(plan_normalize_flip_launches(a, &launches, 23));  // 24 items per sample
  EXPECT_TRUE(plan_normalize_flip_launches(a, &launches, 24));
  EXPECT_EQ(launches.size(), 2u);
}

namespace {

template <typename T>
void check_flip_crop(int64_t N, int64_t H, int64_t W, int64_t h, int64_t w, bool gather, bool centred,
                     int64_t max_work, std::mt19937& rng) {
  SCOPED_TRACE("itemsize=" + std::to_string(sizeof(T)) + " N=" + std::to_string(N) + " H=" +
               std::to_string(H) + " W=" + std::to_string(W) + " h=" + std::to_string(h) + " w=" +
               std::to_string(w) + " gather=" + std::to_string(gather) + " centred=" +
               std::to_string(centred) + " max_work=" + std::to_string(max_work));
  const int64_t sources = gather ? N + 2 : N;
  std::vector<T> masks(static_cast<size_t>(sources * H * W));
  for (auto& v : masks) v = static_cast<T>(rng());
  std::vector<int64_t> offsets(2 * N), rows(N);
  std::vector<uint8_t> hflip(N), vflip(N);
  for (int64_t n = 0; n < N; ++n) {
    offsets[2 * n] = static_cast<int64_t>(rng() % (H + 5)) - 3;
    offsets[2 * n + 1] = static_cast<int64_t>(rng() % (W + 5)) - 3;
    hflip[n] = rng() % 2;
    vflip[n] = rng() % 2;
    rows[n] = static_cast<int64_t>(rng() % sources);
  }
  FlipCropArgs a;
  a.masks = masks.data();
  a.itemsize = sizeof(T);
  a.g = Geometry{N, 1, H, W, H * W, 0, W, 1, h, w};
  if (gather) {
    a.g.rows = rows.data();
    a.g.sources = sources;
  }
  a.offsets = centred ? nullptr : offsets.data();
  a.hflip = hflip.data();
  a.vflip = centred ? nullptr : vflip.data();
  a.fill = -3;
  std::vector<T> expected(static_cast<size_t>(N * h * w), static_cast<T>(0x5A)), got(expected.size(), static_cast<T>(0x3C));
  a.out = expected.data();
  flip_crop_cpu(a, 0, N * h);
  a.out = got.data();
  if (max_work == 0) max_work = h * ((w + kVec - 1) / kVec);
  std::vector<FlipCropLaunch> launches;
  ASSERT_TRUE(plan_flip_crop_launches(a, &launches, max_work));
  ASSERT_EQ(launches.size(), static_cast<size_t>(max_work == INT32_MAX ? 1 : N));
  int64_t samples = 0;
  for (const FlipCropLaunch& l : launches) {
    ASSERT_EQ(l.n0, samples);
    samples += l.samples;
    for (uint32_t t = 0; t < l.work; ++t) flip_crop_thread<T>(a, l, t);
  }
  ASSERT_EQ(samples, N);
  ASSERT_EQ(got, expected);
}

}  // namespace

TEST(FlipCropThread, MatchesCpuKernelOverEveryThread) {
  std::mt19937 rng(17);
  for (bool gather : {false, true}) {
    for (bool centred : {false, true}) {
      for (int64_t max_work : {int64_t{INT32_MAX}, int64_t{0}}) {  // 0: one launch per sample
        check_flip_crop<uint8_t>(4, 9, 11, 7, 13, gather, centred, max_work, rng);
        check_flip_crop<int16_t>(3, 6, 5, 9, 3, gather, centred, max_work, rng);
        check_flip_crop<int32_t>(2, 16, 16, 16, 16, gather, centred, max_work, rng);
        check_flip_crop<int64_t>(3, 10, 12, 8, 8, gather, centred, max_work, rng);
      }
    }
  }
}

// The launchers' by-value constants (normalize_flip.cu, resized_crop.cu): copied from the host
// table up to kInlineChannels, the device table's presence required beyond; an unset table is a
// refusal (cudaErrorInvalidValue from the launcher), never a read of a null pointer.
TEST(LaunchAffineTable, InlineUpToTheLimitDeviceBeyondAndRefusesAnUnsetTable) {
  std::vector<Affine> host(kInlineChannels + 1);
  for (size_t c = 0; c < host.size(); ++c) host[c] = {0.5f + static_cast<float>(c), -1.0f * static_cast<float>(c)};
  AffineTable table;
  for (int64_t C : {int64_t{1}, int64_t{3}, int64_t{kInlineChannels}}) {
    ASSERT_TRUE(launch_affine_table(host.data(), nullptr, C, &table)) << C;
    for (int64_t c = 0; c < C; ++c) {
      EXPECT_EQ(table.c[c].scale, host[c].scale);
      EXPECT_EQ(table.c[c].bias, host[c].bias);
    }
    for (int64_t c = C; c < kInlineChannels; ++c) EXPECT_EQ(table.c[c].scale, 0.0f);
    EXPECT_FALSE(launch_affine_table(nullptr, host.data(), C, &table)) << "the inline path reads the host table";
  }
  const Affine* device = host.data();  // any non-null pointer: the launcher only passes it on
  EXPECT_TRUE(launch_affine_table(nullptr, device, kInlineChannels + 1, &table));
  EXPECT_FALSE(launch_affine_table(host.data(), nullptr, kInlineChannels + 1, &table));
}

// affine_warp's per-pixel thread work (affine_warp_thread_work.h), run on the CPU over every
// thread index in a shuffled order, must write exactly what the CPU kernel writes over any split
// of its rows, and nothing outside the output; whole-pixel shifts are exact copies with the fill
// outside (an independent reference: plain indexing). The CPU kernel runs as its AVX2 build (where
// the CPU has AVX2) and its baseline build; the AVX2 build's gathers read 4 bytes where the thread
// work reads 1 or 2, which must never leave the tensor (a test puts it against unreadable pages).
// The values against a float64 reference are tests/ops/test_affine_warp.py's.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "affine_warp/affine_warp.h"
#include "affine_warp/affine_warp_thread_work.h"
#include "common/cpu_dispatch.h"
#include "plane_rows_threads.h"

using namespace prefetch::kernels;

namespace {

using plane_rows_test::expect_guards_intact;
using plane_rows_test::kGuard;

struct Case {
  int64_t N, C, H, W;
  std::vector<uint8_t> images;  // [N, H, W, C] (channels last) or [N, C, H, W] (planar)
  std::vector<float> maps;
  bool planar = false;  // planar rows (sW = 1): the kernel reads a row's two taps in one load
  int64_t pad = 0;      // bytes after each row (a view's rows: sH larger than the row)
  int64_t row_stride() const { return planar ? W + pad : W * C + pad; }
  // At least the bytes the images span with these strides (exactly, without padding).
  int64_t extent() const { return N * C * H * (W + pad); }
  AffineWarpArgs args(std::vector<uint8_t>* out, bool bilinear, bool fill) const {
    AffineWarpArgs a;
    a.images = images.data();
    a.N = N, a.C = C, a.H = H, a.W = W;
    if (planar) {
      a.sH = row_stride(), a.sW = 1, a.sC = H * a.sH, a.sN = C * a.sC;
    } else {
      a.sH = row_stride(), a.sW = C, a.sC = 1, a.sN = H * a.sH;
    }
    a.matrices = maps.data();
    a.bilinear = bilinear;
    a.has_fill = fill;
    for (int c = 0; c < C; ++c) a.fill[c] = static_cast<float>(10 * c + 5);
    *out = plane_rows_test::guarded_output(N * C * H * W);
    a.out = out->data() + kGuard;
    return a;
  }
};

Case random_case(int64_t N, int64_t C, int64_t H, int64_t W, std::mt19937* rng) {
  Case k{N, C, H, W, {}, {}};
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  k.pad = 3;  // the planar and channels-last rows of a padded view; tests set 0 for dense ones
  k.images.resize(static_cast<size_t>(k.extent()));
  for (auto& v : k.images) v = static_cast<uint8_t>(byte(*rng));
  for (int64_t n = 0; n < N; ++n) {
    const float angle = 3.1416f * u(*rng), scale = 1.0f + 0.4f * u(*rng);
    const float a = scale * std::cos(angle), b = -scale * std::sin(angle);
    const float ox = 0.5f * (W - 1), oy = 0.5f * (H - 1);
    k.maps.insert(k.maps.end(), {a, b, ox - a * ox - b * oy + 0.3f * W * u(*rng), -b, a,
                                 oy + b * ox - a * oy + 0.3f * H * u(*rng)});
  }
  return k;
}

}  // namespace

TEST(AffineWarpThreadWork, EveryThreadInAnyOrderWritesTheCpuKernelsBytes) {
  std::mt19937 rng(3);
  for (const auto& shape : std::vector<std::vector<int64_t>>{{3, 3, 11, 13}, {2, 1, 7, 5}, {1, 4, 1, 9}, {4, 3, 70, 67}}) {
    Case k = random_case(shape[0], shape[1], shape[2], shape[3], &rng);
    // The CPU kernel copies whole-pixel shifts: image 1 of each batch is one (the thread work
    // computes it as any map), image 0 a near-shift that is not.
    if (k.N > 1) {
      const float shift[6] = {1, 0, -3, 0, 1, 2}, near_shift[6] = {1, 0, -3.5f, 0, 1, 2};
      std::copy(shift, shift + 6, k.maps.begin() + 6);
      std::copy(near_shift, near_shift + 6, k.maps.begin());
    }
    for (int variant = 0; variant < 8; ++variant) {
      const bool bilinear = variant & 1, fill = variant & 2, avx2 = variant & 4;
      const bool previous = set_cpu_avx2_allowed(avx2);
      for (int64_t pad : {0, 3}) {
        for (bool planar : {false, true}) {
          k.planar = planar, k.pad = pad;
          std::vector<uint8_t> cpu, threads;
          const AffineWarpArgs a = k.args(&cpu, bilinear, fill);
          const int64_t rows = k.N * k.H;
          plane_rows_test::run_cpu_in_random_chunks(&affine_warp_cpu, a, rows, 5, &rng);
          const AffineWarpArgs b = k.args(&threads, bilinear, fill);
          // Launches of at most 2 images' rows; C = 1 in the numbering (a thread: one pixel).
          auto thread = [&](int64_t n, int64_t c, int64_t y, int64_t x) {
            ASSERT_EQ(c, 0);
            if (k.C == 3) AffineWarpThread<3>{b}(n, c, y, x);
            else if (k.C == 1) AffineWarpThread<1>{b}(n, c, y, x);
            else AffineWarpThread<0>{b}(n, c, y, x);
          };
          plane_rows_test::run_every_thread(thread, k.N, 1, k.H, k.W, 2, &rng);
          expect_guards_intact(cpu);
          expect_guards_intact(threads);
          ASSERT_EQ(cpu, threads) << "bilinear " << bilinear << " fill " << fill << " planar " << planar << " pad "
                                  << pad << " avx2 " << avx2;
        }
      }
      set_cpu_avx2_allowed(previous);
    }
  }
}

TEST(AffineWarpThreadWork, WholePixelShiftsAreCopiesWithTheFillOutside) {
  std::mt19937 rng(5);
  Case k = random_case(3, 3, 6, 8, &rng);
  k.pad = 0;
  const int64_t dx[3] = {0, 2, -9}, dy[3] = {0, -1, 3};
  for (int n = 0; n < 3; ++n) {
    const float m[6] = {1, 0, static_cast<float>(-dx[n]), 0, 1, static_cast<float>(-dy[n])};
    std::copy(m, m + 6, k.maps.begin() + 6 * n);
  }
  for (bool bilinear : {false, true}) {
    std::vector<uint8_t> out;
    const AffineWarpArgs a = k.args(&out, bilinear, true);
    affine_warp_cpu(a, 0, k.N * k.H);
    for (int64_t n = 0; n < k.N; ++n) {
      for (int64_t c = 0; c < k.C; ++c) {
        for (int64_t y = 0; y < k.H; ++y) {
          for (int64_t x = 0; x < k.W; ++x) {
            const int64_t sx = x - dx[n], sy = y - dy[n];
            const bool inside = sx >= 0 && sx < k.W && sy >= 0 && sy < k.H;
            const uint8_t want = inside ? k.images[((n * k.H + sy) * k.W + sx) * k.C + c]
                                        : static_cast<uint8_t>(10 * c + 5);
            ASSERT_EQ(a.out[((n * k.C + c) * k.H + y) * k.W + x], want)
                << "n " << n << " c " << c << " y " << y << " x " << x << " bilinear " << bilinear;
          }
        }
      }
    }
  }
}

namespace {

// Three pages, the outer two unreadable: a read outside the middle one faults.
class GuardedPages {
 public:
  GuardedPages() : page_(sysconf(_SC_PAGESIZE)) {
    void* p = mmap(nullptr, 3 * page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;
    base_ = static_cast<uint8_t*>(p);
    guarded_ = mprotect(base_, page_, PROT_NONE) == 0 && mprotect(base_ + 2 * page_, page_, PROT_NONE) == 0;
  }
  ~GuardedPages() {
    if (base_ != nullptr) munmap(base_, 3 * page_);
  }
  GuardedPages(const GuardedPages&) = delete;
  GuardedPages& operator=(const GuardedPages&) = delete;
  // The readable page, or nullptr where the pages could not be made (or guarded).
  uint8_t* first() const { return guarded_ ? base_ + page_ : nullptr; }
  int64_t size() const { return page_; }

 private:
  int64_t page_;
  uint8_t* base_ = nullptr;
  bool guarded_ = false;
};

}  // namespace

TEST(AffineWarpThreadWork, ReadsNoByteOutsideTheTensor) {
  // A batch whose first byte starts a readable page and, again, whose last byte ends it: maps that
  // reach every edge (rotations about the centre, up to 1.4x zoomed out) make the kernel's reads
  // touch both ends of the tensor, where a 4-byte read past the last byte or before the first
  // faults. Every channel count, both layouts and interpolations, the AVX2 build where the CPU has it.
  GuardedPages pages;
  ASSERT_NE(pages.first(), nullptr);
  std::mt19937 rng(11);
  for (const auto& shape : std::vector<std::vector<int64_t>>{{2, 3, 20, 21}, {3, 1, 9, 17}, {1, 4, 16, 16}}) {
    Case k = random_case(shape[0], shape[1], shape[2], shape[3], &rng);
    k.pad = 0;
    const int64_t bytes = k.extent();
    ASSERT_LE(bytes, pages.size());
    for (int variant = 0; variant < 16; ++variant) {
      const bool bilinear = variant & 1, planar = variant & 2, avx2 = variant & 4, at_end = variant & 8;
      k.planar = planar;
      uint8_t* images = at_end ? pages.first() + pages.size() - bytes : pages.first();
      std::copy(k.images.begin(), k.images.begin() + bytes, images);
      const bool previous = set_cpu_avx2_allowed(avx2);
      std::vector<uint8_t> cpu, threads;
      AffineWarpArgs a = k.args(&cpu, bilinear, true);
      a.images = images;
      affine_warp_cpu(a, 0, k.N * k.H);
      AffineWarpArgs b = k.args(&threads, bilinear, true);
      b.images = images;
      for (int64_t n = 0; n < k.N; ++n) {
        for (int64_t y = 0; y < k.H; ++y) {
          for (int64_t x = 0; x < k.W; ++x) affine_warp_pixel<0>(b, n, y, x);
        }
      }
      set_cpu_avx2_allowed(previous);
      ASSERT_EQ(cpu, threads) << "bilinear " << bilinear << " planar " << planar << " avx2 " << avx2 << " at_end "
                              << at_end;
    }
  }
}

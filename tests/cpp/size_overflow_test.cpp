// Size arithmetic in collation never wraps: a product or sum past 64 bits is a CollateError before
// anything is allocated, and buffer sizes near SIZE_MAX are refused (issue 13, item 3).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <new>
#include <stdexcept>
#include <vector>

#include "aligned_buffer.h"
#include "checked_math.h"
#include "collate.h"
#include "errors.h"
#include "ring.h"

namespace prefetch {
namespace {

constexpr size_t kSizeMax = std::numeric_limits<size_t>::max();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

TEST(CheckedMath, ProductsAndSumsThatFitAreExact) {
  EXPECT_EQ(checked_mul(size_t{1} << 31, size_t{1} << 32, "x"), size_t{1} << 63);
  EXPECT_EQ(checked_add(kSizeMax - 1, size_t{1}, "x"), kSizeMax);
  EXPECT_EQ(checked_mul(int64_t{1} << 31, int64_t{1} << 31, "x"), int64_t{1} << 62);
  EXPECT_EQ(checked_add(kInt64Max - 1, int64_t{1}, "x"), kInt64Max);
  EXPECT_EQ(checked_round_up(257, 256, "x"), 512u);
  EXPECT_EQ(checked_round_up(0, 256, "x"), 0u);
}

TEST(CheckedMath, OverflowsThrowCollateError) {
  EXPECT_THROW(checked_mul(size_t{1} << 32, size_t{1} << 32, "x"), CollateError);
  EXPECT_THROW(checked_add(kSizeMax, size_t{1}, "x"), CollateError);
  EXPECT_THROW(checked_mul(int64_t{1} << 32, int64_t{1} << 31, "x"), CollateError);
  EXPECT_THROW(checked_add(kInt64Max, int64_t{1}, "x"), CollateError);
  EXPECT_THROW(checked_round_up(kSizeMax - 10, 256, "x"), CollateError);
  try {
    checked_mul(size_t{1} << 40, size_t{1} << 40, "the row's byte size");
    FAIL() << "no exception";
  } catch (const CollateError& e) {
    EXPECT_NE(std::string(e.what()).find("the row's byte size"), std::string::npos) << e.what();
  }
}

TEST(CheckedMath, NumelIsZeroWhenAnyDimIsZeroEvenNextToHugeDims) {
  const int64_t huge = int64_t{1} << 40;
  EXPECT_EQ(checked_numel(std::vector<int64_t>{huge, huge, 0}, "x"), 0);
  EXPECT_EQ(checked_numel(std::vector<int64_t>{0, huge, huge}, "x"), 0);
  EXPECT_EQ(checked_numel(std::vector<int64_t>{}, "x"), 1);
  EXPECT_THROW(checked_numel(std::vector<int64_t>{huge, huge}, "x"), CollateError);
  EXPECT_THROW(checked_numel(std::vector<int64_t>{3, -1}, "x"), CollateError);
}

// A tensor of `sizes` whose strides are 0 (an expanded scalar): its true size is huge, its
// memory is one element.
HostTensor expanded(const std::byte* data, size_t itemsize, std::vector<int64_t> sizes) {
  HostTensor t;
  t.data = data;
  t.itemsize = itemsize;
  t.strides.assign(sizes.size(), 0);
  t.sizes = std::move(sizes);
  return t;
}

TEST(SizeOverflow, ByteSizeOfAnExpandedTensorDoesNotWrap) {
  std::byte one[8] = {};
  // 2^62 elements of 8 bytes: numel fits int64, the byte size (2^65) would wrap to 0.
  HostTensor t = expanded(one, 8, {int64_t{1} << 62});
  EXPECT_EQ(t.numel(), int64_t{1} << 62);
  EXPECT_THROW(t.nbytes(), CollateError);
  // 2^61 + 1 elements: the wrapped size would be a small 8 bytes, and the copy would run past it.
  HostTensor u = expanded(one, 8, {(int64_t{1} << 61) + 1});
  EXPECT_THROW(u.nbytes(), CollateError);
  // Element counts past int64.
  HostTensor v = expanded(one, 1, {int64_t{1} << 32, int64_t{1} << 32});
  EXPECT_THROW(v.numel(), CollateError);
}

TEST(SizeOverflow, RowBytesAndGatheredLeavesDoNotWrap) {
  std::byte one[8] = {};
  HostTensor rows = expanded(one, 8, {4, int64_t{1} << 31, int64_t{1} << 31});
  EXPECT_THROW(row_bytes(rows), CollateError);
  HostTensor empty_rows = expanded(one, 8, {4, int64_t{1} << 40, int64_t{1} << 40, 0});
  EXPECT_EQ(row_bytes(empty_rows), 0u);
  // Rows that fit, times many rows, do not.
  LeafPlan gather;
  gather.gather = true;
  gather.pieces.push_back(expanded(one, 8, {4, int64_t{1} << 58}));  // rows of 2^61 bytes
  gather.rows.assign(2, 0);
  EXPECT_EQ(row_bytes(gather.pieces[0]), size_t{1} << 61);
  EXPECT_EQ(gather.nbytes(), size_t{1} << 62);
  gather.rows.assign(4, 0);  // 2^63 bytes: fits size_t, past the int64 limit
  EXPECT_THROW(gather.nbytes(), CollateError);
  gather.rows.assign(8, 0);  // 2^64 bytes: wraps size_t
  EXPECT_THROW(gather.nbytes(), CollateError);
}

TEST(SizeOverflow, SamplesAndLeavesSummingPastTheLimitThrow) {
  std::byte one[8] = {};
  LeafPlan samples;
  for (int i = 0; i < 4; ++i) samples.pieces.push_back(expanded(one, 8, {int64_t{1} << 59}));
  EXPECT_THROW(samples.nbytes(), CollateError);  // 4 * 2^62 bytes
  // Many leaves whose sizes fit one by one, but whose aligned offsets sum past the limit.
  std::vector<LeafPlan> leaves(3);
  for (auto& leaf : leaves) leaf.pieces.push_back(expanded(one, 1, {(int64_t{1} << 62) - 1}));
  size_t total = 0;
  EXPECT_THROW(pack_layout(leaves, &total), CollateError);
  leaves.resize(1);
  EXPECT_NO_THROW(pack_layout(leaves, &total));
  EXPECT_EQ(total, (size_t{1} << 62) - 1);
}

TEST(SizeOverflow, ShapesWithAZeroDimNextToHugeDimsAreEmpty) {
  std::byte one[8] = {};
  std::vector<LeafPlan> leaves(1);
  leaves[0].pieces.push_back(expanded(one, 8, {int64_t{1} << 40, 0, int64_t{1} << 40}));
  size_t total = 1;
  auto layout = pack_layout(leaves, &total);
  EXPECT_EQ(total, 0u);
  EXPECT_TRUE(plan_copies(leaves, layout, nullptr, 4096).empty());
}


// Sizes near SIZE_MAX are refused, never rounded up past it to a small buffer.
TEST(SizeOverflow, BuffersAndRingCapacitiesNearSizeMaxAreRefused) {
  EXPECT_THROW(AlignedBuffer{kSizeMax}, std::bad_alloc);
  EXPECT_THROW(AlignedBuffer{kSizeMax - 100}, std::bad_alloc);
  EXPECT_THROW(grown_capacity(kSizeMax), std::bad_alloc);
  EXPECT_THROW(grown_capacity(kSizeMax - kSizeMax / 16), std::bad_alloc);  // + 1/8 wraps
  EXPECT_EQ(grown_capacity(1), size_t{1} << 20);
  EXPECT_GE(grown_capacity(kSizeMax / 2), kSizeMax / 2);
}

}  // namespace
}  // namespace prefetch

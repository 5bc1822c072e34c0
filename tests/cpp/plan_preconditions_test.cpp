// The preconditions the core documents for a LeafPlan, checked by the core itself (not only by the
// Python binding): a gather leaf's rows must lie in its source. An out-of-range row would make a
// copy task read outside the source, so check_rows, pack_layout and every engine entry point that
// collates refuse it with a CollateError naming the position, the index and the row count.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collate.h"
#include "engine.h"
#include "errors.h"

namespace prefetch {
namespace {

// A dense source of `rows` rows of `cols` bytes each.
struct Source {
  std::vector<std::byte> bytes;
  HostTensor tensor;
  Source(int64_t rows, int64_t cols) : bytes(static_cast<size_t>(rows * cols)) {
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(i);
    tensor.data = bytes.data();
    tensor.itemsize = 1;
    tensor.sizes = {rows, cols};
    tensor.strides = {cols, 1};
  }
};

LeafPlan gather(const HostTensor& source, std::vector<int64_t> rows) {
  LeafPlan leaf;
  leaf.gather = true;
  leaf.pieces.push_back(source);
  leaf.rows = std::move(rows);
  leaf.dtype_code = 0;
  leaf.shape = {static_cast<int64_t>(leaf.rows.size()), source.sizes.size() > 1 ? source.sizes[1] : 1};
  return leaf;
}

// The CollateError's message, or "" when `f` does not throw one.
template <typename F>
std::string collate_error(F&& f) {
  try {
    f();
  } catch (const CollateError& e) {
    return e.what();
  }
  return "";
}

TEST(PlanPreconditions, RowsInRangePass) {
  Source s(5, 3);
  EXPECT_NO_THROW(check_rows(gather(s.tensor, {0, 4, 2, 2})));
  EXPECT_NO_THROW(check_rows(gather(s.tensor, {})));
  // Not a gather: rows are not looked at.
  LeafPlan plain;
  plain.pieces.push_back(s.tensor);
  plain.rows = {-7};
  EXPECT_NO_THROW(check_rows(plain));
}

TEST(PlanPreconditions, RowOutOfRangeNamesPositionIndexAndRowCount) {
  Source s(5, 3);
  EXPECT_EQ(collate_error([&] { check_rows(gather(s.tensor, {0, 1, 5, 9})); }),
            "prefetch: index 5 (position 2 of the batch) is out of range for 5 rows");
  EXPECT_EQ(collate_error([&] { check_rows(gather(s.tensor, {-1})); }),
            "prefetch: index -1 (position 0 of the batch) is out of range for 5 rows");
  Source empty(0, 3);
  EXPECT_EQ(collate_error([&] { check_rows(gather(empty.tensor, {0})); }),
            "prefetch: index 0 (position 0 of the batch) is out of range for 0 rows");
}

TEST(PlanPreconditions, GatherNeedsOneSourceWithRows) {
  Source s(5, 3);
  LeafPlan two = gather(s.tensor, {0});
  two.pieces.push_back(s.tensor);
  EXPECT_NE(collate_error([&] { check_rows(two); }).find("one source tensor, got 2"),
            std::string::npos);
  HostTensor scalar = s.tensor;
  scalar.sizes.clear();
  scalar.strides.clear();
  EXPECT_NE(collate_error([&] { check_rows(gather(scalar, {0})); }).find("0-D"), std::string::npos);
  LeafPlan no_source;
  no_source.gather = true;
  no_source.rows = {0};
  EXPECT_NE(collate_error([&] { check_rows(no_source); }).find("out of range for 0 rows"),
            std::string::npos);
}

TEST(PlanPreconditions, PackLayoutChecksEveryLeaf) {
  Source s(4, 2);
  std::vector<LeafPlan> leaves = {gather(s.tensor, {0, 3}), gather(s.tensor, {1, 4})};
  size_t total = 0;
  EXPECT_EQ(collate_error([&] { pack_layout(leaves, &total); }),
            "prefetch: index 4 (position 1 of the batch) is out of range for 4 rows");
  leaves[1].rows = {1, 3};
  EXPECT_NO_THROW(pack_layout(leaves, &total));
}

// The engine refuses the batch before collating anything, and stays usable for the next one.
TEST(PlanPreconditions, EngineRefusesRowsOutOfRange) {
  EngineOptions options;
  options.depth = 2;
  options.num_threads = 2;
  Engine engine(make_host_backend(), options);
  auto allocate = [](size_t bytes) {
    auto buffer = std::make_shared<std::vector<std::byte>>(bytes);
    return Destination{buffer->data(), buffer};
  };
  Source s(6, 4);
  const uint64_t token = engine.start_epoch();
  EXPECT_EQ(collate_error([&] { engine.submit(token, {gather(s.tensor, {2, 6})}, allocate); }),
            "prefetch: index 6 (position 1 of the batch) is out of range for 6 rows");
  EXPECT_EQ(collate_error([&] { engine.stage(token, {gather(s.tensor, {-3})}, allocate); }),
            "prefetch: index -3 (position 0 of the batch) is out of range for 6 rows");
  EXPECT_EQ(collate_error([&] { engine.submit(token, {gather(s.tensor, {0, 1, 100})}, allocate); }),
            "prefetch: index 100 (position 2 of the batch) is out of range for 6 rows");
  EXPECT_EQ(engine.stats().submitted, 0u);

  // A good batch after the refused ones: rows 5 and 0, in that order.
  EXPECT_EQ(engine.submit(token, {gather(s.tensor, {5, 0})}, allocate), 0u);
  engine.finish(token, false);
  ReadyBatch batch;
  ASSERT_EQ(engine.next(token, &batch, std::chrono::seconds(10)), NextStatus::kBatch);
  engine.backend().wait_on(*batch.ready, nullptr);
  ASSERT_EQ(batch.leaves.size(), 1u);
  const std::byte* out = batch.destination.data + batch.leaves[0].offset;
  for (int64_t c = 0; c < 4; ++c) {
    EXPECT_EQ(out[c], s.bytes[static_cast<size_t>(5 * 4 + c)]);
    EXPECT_EQ(out[4 + c], s.bytes[static_cast<size_t>(c)]);
  }
}

}  // namespace
}  // namespace prefetch

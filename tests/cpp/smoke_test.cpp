#include <gtest/gtest.h>

#include "engine.h"

TEST(Smoke, EngineDeliversOneBatch) {
  prefetch::Engine engine(prefetch::make_host_backend(), prefetch::EngineOptions{});
  uint64_t token = engine.start_epoch();
  std::vector<uint8_t> src(1000, 7);
  prefetch::LeafPlan leaf;
  leaf.pieces.push_back({reinterpret_cast<const std::byte*>(src.data()), 1, {1000}, {1}});
  std::vector<uint8_t> dst(1000, 0);
  engine.submit(token, {leaf}, [&](size_t) {
    return prefetch::Destination{reinterpret_cast<std::byte*>(dst.data()), nullptr};
  });
  prefetch::ReadyBatch batch;
  ASSERT_EQ(engine.next(token, &batch, std::chrono::seconds(5)), prefetch::NextStatus::kBatch);
  batch.ready->wait();
  EXPECT_EQ(dst, src);
}

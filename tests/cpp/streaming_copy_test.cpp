#include "streaming_copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace prefetch {
namespace {

// copy_bytes has memcpy semantics for every size (around the non-temporal threshold too) and
// every alignment of source and destination, and writes nothing outside the range.
TEST(StreamingCopy, MatchesMemcpyForAllSizesAndAlignments) {
  const size_t k = kStreamingCopyMinBytes;
  const std::vector<size_t> sizes = {0, 1, 15, 16, 63, 64, 65, 4096, k - 1, k, k + 1, k + 63, k + 64,
                                     3 * k + 17, (size_t{1} << 20) + 5};
  const size_t guard = 128;
  std::mt19937_64 rng(99);
  // Room for the largest size at the largest offset, with a guard zone on both sides.
  std::vector<uint8_t> src_buf(guard + 64 + (size_t{1} << 20) + 5 + guard);
  for (auto& b : src_buf) b = static_cast<uint8_t>(rng());
  std::vector<uint8_t> dst_buf(src_buf.size());
  for (size_t n : sizes) {
    for (size_t src_off : {0, 1, 8, 33, 64}) {
      for (size_t dst_off : {0, 1, 15, 16, 48, 63}) {
        const size_t end = guard + dst_off + n;  // one past the last byte to be written
        std::memset(dst_buf.data(), 0xA5, end + guard);
        const uint8_t* src = src_buf.data() + guard + src_off;
        uint8_t* dst = dst_buf.data() + guard + dst_off;
        copy_bytes(dst, src, n);
        SCOPED_TRACE("n=" + std::to_string(n) + " src+" + std::to_string(src_off) + " dst+" + std::to_string(dst_off));
        for (size_t i = 0; i < guard + dst_off; ++i) ASSERT_EQ(dst_buf[i], 0xA5) << "write before the range";
        ASSERT_EQ(std::memcmp(dst, src, n), 0);
        for (size_t i = end; i < end + guard; ++i) ASSERT_EQ(dst_buf[i], 0xA5) << "write past the range";
      }
    }
  }
}

}  // namespace
}  // namespace prefetch

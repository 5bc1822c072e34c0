#include "collate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "errors.h"
#include "thread_pool.h"

namespace prefetch {
namespace {

// Random bytes a HostTensor can view.
struct Storage {
  std::vector<uint8_t> bytes;
  Storage(size_t n, uint64_t seed) : bytes(n) {
    std::mt19937_64 rng(seed);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  }
  const std::byte* at(size_t byte_offset) const {
    return reinterpret_cast<const std::byte*>(bytes.data()) + byte_offset;
  }
};

HostTensor view(const Storage& s, size_t itemsize, std::vector<int64_t> sizes,
                std::vector<int64_t> strides, size_t element_offset = 0) {
  HostTensor t;
  t.data = s.at(element_offset * itemsize);
  t.itemsize = itemsize;
  t.sizes = std::move(sizes);
  t.strides = std::move(strides);
  return t;
}

// The reference: walks every element in row-major order of `sizes` and appends its bytes.
void reference_append(const HostTensor& t, std::vector<uint8_t>* out) {
  int64_t numel = 1;
  for (int64_t s : t.sizes) numel *= s;
  if (numel == 0) return;
  std::vector<int64_t> idx(t.sizes.size(), 0);
  for (int64_t e = 0; e < numel; ++e) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides[d];
    const uint8_t* src = reinterpret_cast<const uint8_t*>(t.data) + off * static_cast<int64_t>(t.itemsize);
    out->insert(out->end(), src, src + t.itemsize);
    for (size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < t.sizes[d]) break;
      idx[d] = 0;
    }
  }
}

size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

constexpr uint8_t kSentinel = 0xCD;

// Packs `leaves` with the core (plan_copies + run_copy, tasks run in a scrambled order or on a
// pool) and with the reference, and compares every byte of the buffer, padding included.
void check_pack(const std::vector<LeafPlan>& leaves, size_t chunk_bytes, ThreadPool* pool = nullptr,
                size_t min_tasks = 0) {
  // Reference layout, computed independently.
  std::vector<uint8_t> expected;
  std::vector<size_t> ref_offsets;
  for (const auto& leaf : leaves) {
    size_t off = round_up(expected.size(), kLeafAlignment);
    expected.resize(off, kSentinel);
    ref_offsets.push_back(off);
    if (leaf.ranges) {
      // Range k is elements [start, start + count) of the 1-D source, walked by the reference.
      const HostTensor& src = leaf.pieces[0];
      for (size_t k = 0; k < leaf.spans.size(); k += 2) {
        HostTensor part = src;
        part.data = src.data + leaf.spans[k] * src.strides[0] * static_cast<int64_t>(src.itemsize);
        part.sizes = {leaf.spans[k + 1]};
        reference_append(part, &expected);
      }
      continue;
    }
    if (leaf.gather) {
      // Row k is the sub-tensor at index rows[k] of the first dimension, walked by the reference.
      const HostTensor& src = leaf.pieces[0];
      for (int64_t r : leaf.rows) {
        HostTensor row;
        row.data = src.data + r * src.strides[0] * static_cast<int64_t>(src.itemsize);
        row.itemsize = src.itemsize;
        row.sizes.assign(src.sizes.begin() + 1, src.sizes.end());
        row.strides.assign(src.strides.begin() + 1, src.strides.end());
        reference_append(row, &expected);
      }
      continue;
    }
    for (const auto& piece : leaf.pieces) reference_append(piece, &expected);
  }

  size_t total = 12345;
  std::vector<LeafLayout> layout = pack_layout(leaves, &total);
  ASSERT_EQ(total, expected.size());
  ASSERT_EQ(layout.size(), leaves.size());
  for (size_t l = 0; l < leaves.size(); ++l) {
    EXPECT_EQ(layout[l].offset, ref_offsets[l]) << "leaf " << l;
    EXPECT_EQ(layout[l].nbytes, leaves[l].nbytes()) << "leaf " << l;
  }

  // Output with guard zones on both sides, all set to the sentinel.
  const size_t guard = 512;
  std::vector<uint8_t> out(guard + total + guard, kSentinel);
  std::byte* base = reinterpret_cast<std::byte*>(out.data() + guard);
  std::vector<CopyTask> tasks = plan_copies(leaves, layout, base, chunk_bytes);
  EXPECT_GE(tasks.size(), min_tasks) << "the copies were not split into chunks";
  // The tasks partition the packed bytes: disjoint destination ranges that add up to every
  // leaf's bytes (a duplicated range would be a data race between pool threads).
  std::vector<std::pair<size_t, size_t>> ranges;
  size_t covered = 0;
  for (const auto& t : tasks) {
    ASSERT_NE(t.source, nullptr);
    ASSERT_LT(t.begin, t.end) << "an empty task";
    const HostTensor& src = *t.source;
    size_t unit = 1;  // contiguous tasks count bytes, strided and gather ones rows
    if (t.rows != nullptr || (!src.sizes.empty() && !src.is_contiguous())) {
      unit = src.itemsize;
      for (size_t d = 1; d < src.sizes.size(); ++d) unit *= static_cast<size_t>(src.sizes[d]);
    }
    const size_t begin = static_cast<size_t>(t.dest - base);
    size_t len = static_cast<size_t>(t.end - t.begin) * unit;
    if (t.spans != nullptr) {  // a run of whole spans
      len = 0;
      for (int64_t k = t.begin; k < t.end; ++k) len += static_cast<size_t>(t.spans[2 * k + 1]) * src.itemsize;
    }
    ASSERT_LE(begin + len, total) << "a task writes past the packed buffer";
    ranges.emplace_back(begin, begin + len);
    covered += len;
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    ASSERT_LE(ranges[i - 1].second, ranges[i].first) << "two tasks write the same bytes";
  }
  size_t leaf_total = 0;
  for (const auto& leaf : leaves) leaf_total += leaf.nbytes();
  ASSERT_EQ(covered, leaf_total);
  if (chunk_bytes >= 4096) {
    // No task is much larger than a chunk, except a single row that is larger by itself.
    for (const auto& t : tasks) {
      const HostTensor& src = *t.source;
      if (t.rows == nullptr && (src.sizes.empty() || src.is_contiguous())) {
        EXPECT_LE(static_cast<size_t>(t.end - t.begin), chunk_bytes);
      }
    }
  }
  if (pool != nullptr) {
    pool->run(tasks.size(), [&](size_t i) { run_copy(tasks[i]); });
  } else {
    // Reverse order: no task may depend on an earlier one having run.
    for (size_t i = tasks.size(); i-- > 0;) run_copy(tasks[i]);
  }

  for (size_t i = 0; i < guard; ++i) {
    ASSERT_EQ(out[i], kSentinel) << "write before the buffer at -" << guard - i;
    ASSERT_EQ(out[guard + total + i], kSentinel) << "write past the end at +" << i;
  }
  for (size_t i = 0; i < total; ++i) {
    ASSERT_EQ(out[guard + i], expected[i]) << "byte " << i << " of " << total;
  }
}

LeafPlan leaf_of(std::vector<HostTensor> pieces) {
  LeafPlan leaf;
  leaf.pieces = std::move(pieces);
  return leaf;
}

// ---------------------------------------------------------------------------------------------
// is_contiguous and nbytes

TEST(HostTensor, IsContiguous) {
  Storage s(64, 1);
  struct Case {
    std::vector<int64_t> sizes, strides;
    bool contiguous;
  };
  const std::vector<Case> cases = {
      {{}, {}, true},                            // a scalar
      {{5}, {1}, true},
      {{5}, {2}, false},
      {{1}, {7}, true},                          // size 1: its stride means nothing
      {{2, 3}, {3, 1}, true},
      {{2, 3}, {1, 2}, false},                   // transposed
      {{3, 2}, {1, 3}, false},
      {{2, 3}, {6, 1}, false},                   // rows of a wider tensor
      {{2, 3}, {3, 2}, false},
      {{1, 6}, {999, 1}, true},                  // leading size-1 dim, odd stride
      {{6, 1}, {1, 5}, true},                    // trailing size-1 dim, odd stride
      {{2, 1, 3}, {3, 17, 1}, true},             // middle size-1 dim, odd stride
      {{2, 1, 3}, {1, 17, 2}, false},
      {{1, 1, 1}, {5, 9, 3}, true},
      {{2, 3, 4}, {12, 4, 1}, true},
      {{2, 3, 4}, {1, 2, 6}, false},             // fully permuted
      {{2, 3, 4}, {24, 8, 2}, false},            // stride-2 slice of the last dim
      {{3, 4}, {0, 1}, false},                   // expanded (broadcast) dim
  };
  for (const auto& c : cases) {
    HostTensor t = view(s, 4, c.sizes, c.strides);
    EXPECT_EQ(t.is_contiguous(), c.contiguous)
        << "sizes=" << ::testing::PrintToString(c.sizes) << " strides=" << ::testing::PrintToString(c.strides);
  }
}

TEST(HostTensor, NumelAndNbytes) {
  Storage s(8, 1);
  EXPECT_EQ(view(s, 8, {}, {}).numel(), 1);
  EXPECT_EQ(view(s, 8, {}, {}).nbytes(), 8u);
  EXPECT_EQ(view(s, 2, {3, 4, 5}, {20, 5, 1}).nbytes(), 120u);
  EXPECT_EQ(view(s, 4, {3, 0, 5}, {0, 5, 1}).nbytes(), 0u);
  LeafPlan leaf = leaf_of({view(s, 2, {3}, {1}), view(s, 2, {4}, {1})});
  EXPECT_EQ(leaf.nbytes(), 14u);
}

// ---------------------------------------------------------------------------------------------
// pack_layout

TEST(PackLayout, OffsetsAlignedAndDisjoint) {
  Storage s(1 << 16, 2);
  std::mt19937 rng(3);
  for (int round = 0; round < 50; ++round) {
    std::vector<LeafPlan> leaves;
    int n = 1 + static_cast<int>(rng() % 8);
    for (int l = 0; l < n; ++l) {
      std::vector<HostTensor> pieces;
      int np = static_cast<int>(rng() % 4);  // 0 pieces: an empty leaf
      for (int p = 0; p < np; ++p) {
        int64_t len = static_cast<int64_t>(rng() % 1000);  // 0 elements sometimes
        pieces.push_back(view(s, size_t{1} << (rng() % 4), {len}, {1}));
      }
      // All pieces of a leaf share an itemsize in practice; the core does not care.
      leaves.push_back(leaf_of(pieces));
    }
    size_t total = 0;
    auto layout = pack_layout(leaves, &total);
    ASSERT_EQ(layout.size(), leaves.size());
    size_t end = 0;
    for (size_t l = 0; l < layout.size(); ++l) {
      EXPECT_EQ(layout[l].offset % kLeafAlignment, 0u);
      EXPECT_EQ(layout[l].nbytes, leaves[l].nbytes());
      EXPECT_GE(layout[l].offset, end) << "leaf " << l << " overlaps the previous one";
      // Packed tightly: no more than the alignment padding between leaves.
      EXPECT_LT(layout[l].offset - end, kLeafAlignment);
      end = layout[l].offset + layout[l].nbytes;
    }
    EXPECT_EQ(total, end);
  }
}

TEST(PackLayout, ZeroSizeLeaves) {
  Storage s(4096, 4);
  std::vector<LeafPlan> leaves;
  leaves.push_back(leaf_of({}));                                // no pieces at all
  leaves.push_back(leaf_of({view(s, 4, {3}, {1})}));            // 12 bytes
  leaves.push_back(leaf_of({view(s, 4, {0, 7}, {7, 1})}));      // zero elements
  leaves.push_back(leaf_of({view(s, 8, {0}, {1}), view(s, 8, {0}, {1})}));
  leaves.push_back(leaf_of({view(s, 1, {5}, {1})}));            // 5 bytes
  size_t total = 0;
  auto layout = pack_layout(leaves, &total);
  ASSERT_EQ(layout.size(), 5u);
  EXPECT_EQ(layout[0].offset, 0u);
  EXPECT_EQ(layout[0].nbytes, 0u);
  EXPECT_EQ(layout[1].offset, 0u);
  EXPECT_EQ(layout[1].nbytes, 12u);
  EXPECT_EQ(layout[2].offset, 256u);
  EXPECT_EQ(layout[2].nbytes, 0u);
  EXPECT_EQ(layout[3].offset, 256u);
  EXPECT_EQ(layout[3].nbytes, 0u);
  EXPECT_EQ(layout[4].offset, 256u);
  EXPECT_EQ(layout[4].nbytes, 5u);
  EXPECT_EQ(total, 261u);
  check_pack(leaves, 4096);

  size_t empty_total = 99;
  EXPECT_TRUE(pack_layout({}, &empty_total).empty());
  EXPECT_EQ(empty_total, 0u);
  std::vector<LeafPlan> only_empty(3);
  EXPECT_EQ(pack_layout(only_empty, &empty_total).size(), 3u);
  EXPECT_EQ(empty_total, 0u);
  EXPECT_TRUE(plan_copies(only_empty, pack_layout(only_empty, &empty_total), nullptr, 4096).empty());
}

// ---------------------------------------------------------------------------------------------
// plan_copies + run_copy against the reference

class CollateItemsize : public ::testing::TestWithParam<size_t> {};

TEST_P(CollateItemsize, Contiguous) {
  const size_t is = GetParam();
  Storage s(200000 * is, 10 + is);
  // 1-D and 3-D, one large enough to be split into many 4 KiB chunks, one not a chunk multiple.
  std::vector<LeafPlan> leaves = {
      leaf_of({view(s, is, {100003}, {1})}),
      leaf_of({view(s, is, {7, 11, 13}, {143, 13, 1}, 17)}),
      leaf_of({view(s, is, {}, {}, 5)}),  // a scalar
  };
  check_pack(leaves, 4096, nullptr, 100003 * is / 4096);
  check_pack(leaves, size_t{1} << 20);
  check_pack(leaves, 1);  // below the 4096 floor
}

TEST_P(CollateItemsize, Transposed2D) {
  const size_t is = GetParam();
  const int64_t R = 301, C = 67;
  Storage s(R * C * is, 20 + is);
  // A (C, R) view of a row-major (R, C) array.
  std::vector<LeafPlan> leaves = {leaf_of({view(s, is, {C, R}, {1, C})})};
  ASSERT_FALSE(leaves[0].pieces[0].is_contiguous());
  check_pack(leaves, 4096, nullptr, 2);
  check_pack(leaves, size_t{1} << 20);
}

TEST_P(CollateItemsize, Permuted3D) {
  const size_t is = GetParam();
  const int64_t A = 9, B = 31, C = 23;  // base (A, B, C) row-major: strides (B*C, C, 1)
  Storage s(A * B * C * is, 30 + is);
  std::vector<LeafPlan> leaves = {
      leaf_of({view(s, is, {C, A, B}, {1, B * C, C})}),  // permute(2, 0, 1)
      leaf_of({view(s, is, {B, C, A}, {C, 1, B * C})}),  // permute(1, 2, 0)
      leaf_of({view(s, is, {A, C, B}, {B * C, 1, C})}),  // transpose(1, 2)
  };
  for (const auto& l : leaves) ASSERT_FALSE(l.pieces[0].is_contiguous());
  check_pack(leaves, 4096);
  check_pack(leaves, size_t{1} << 20);
}

TEST_P(CollateItemsize, StrideTwoSlices) {
  const size_t is = GetParam();
  const int64_t R = 120, C = 90;
  Storage s(R * C * is, 40 + is);
  std::vector<LeafPlan> leaves = {
      leaf_of({view(s, is, {R, C / 2}, {C, 2})}),           // x[:, ::2]
      leaf_of({view(s, is, {R / 2, C}, {2 * C, 1}, C)}),    // x[1::2, :]: rows not adjacent
      leaf_of({view(s, is, {R / 2, C / 3}, {2 * C, 3}, 1)}), // x[::2, 1::3]
      leaf_of({view(s, is, {C / 2, R / 2}, {2, 2 * C})}),   // x[::2, ::2].t()
      leaf_of({view(s, is, {3, C}, {0, 1}, 5)}),            // x[0].expand(3, C)
      leaf_of({view(s, is, {R / 4, 3}, {C, 0})}),           // x[:R/4, :1].expand(-1, 3)
  };
  check_pack(leaves, 4096, nullptr, 4);
}

TEST_P(CollateItemsize, OneDimensionalStrided) {
  const size_t is = GetParam();
  Storage s(40000 * is, 50 + is);
  std::vector<LeafPlan> leaves = {
      leaf_of({view(s, is, {13000}, {3})}),
      leaf_of({view(s, is, {7}, {5}, 11)}),
      leaf_of({view(s, is, {1}, {1000})}),
      leaf_of({view(s, is, {4000}, {0}, 3)}),  // an expanded scalar
  };
  check_pack(leaves, 4096, nullptr, 13000 * is / 4096);
}

TEST_P(CollateItemsize, SizeOneDimsWithOddStrides) {
  const size_t is = GetParam();
  Storage s(20000 * is, 60 + is);
  std::vector<LeafPlan> leaves = {
      leaf_of({view(s, is, {1, 500}, {12345, 1})}),          // contiguous despite the stride
      leaf_of({view(s, is, {500, 1}, {1, 7})}),
      leaf_of({view(s, is, {4, 1, 5}, {5, 999, 1}, 3)}),
      leaf_of({view(s, is, {4, 1, 5}, {1, 3, 4})}),          // permuted with a size-1 dim
      leaf_of({view(s, is, {1, 40, 1, 3}, {77, 1, 5, 40})}), // non-contiguous inside
      leaf_of({view(s, is, {1, 1, 1}, {3, 5, 7}, 9)}),
      leaf_of({view(s, is, {1, 300}, {1, 2})}),               // size-1 first dim, strided
  };
  EXPECT_TRUE(leaves[0].pieces[0].is_contiguous());
  EXPECT_TRUE(leaves[1].pieces[0].is_contiguous());
  EXPECT_TRUE(leaves[2].pieces[0].is_contiguous());
  EXPECT_FALSE(leaves[3].pieces[0].is_contiguous());
  EXPECT_FALSE(leaves[4].pieces[0].is_contiguous());
  EXPECT_TRUE(leaves[5].pieces[0].is_contiguous());
  EXPECT_FALSE(leaves[6].pieces[0].is_contiguous());
  check_pack(leaves, 4096);
}

TEST_P(CollateItemsize, ManySamplesPerLeaf) {
  const size_t is = GetParam();
  const int64_t H = 24, W = 40;
  const int samples = 16;
  std::vector<std::unique_ptr<Storage>> storages;
  std::vector<HostTensor> contiguous, transposed, mixed;
  for (int i = 0; i < samples; ++i) {
    storages.push_back(std::make_unique<Storage>(H * W * is, 70 + is * 100 + i));
    const Storage& s = *storages.back();
    contiguous.push_back(view(s, is, {H, W}, {W, 1}));
    transposed.push_back(view(s, is, {W, H}, {1, W}));
    mixed.push_back(i % 2 ? view(s, is, {H, W}, {W, 1}) : view(s, is, {W, H}, {1, W}));
  }
  std::vector<LeafPlan> leaves = {leaf_of(contiguous), leaf_of(transposed), leaf_of(mixed)};
  leaves[0].dtype_code = 6;
  leaves[0].shape = {samples, H, W};
  check_pack(leaves, 4096, nullptr, static_cast<size_t>(samples) * 3);
}

INSTANTIATE_TEST_SUITE_P(Itemsizes, CollateItemsize, ::testing::Values(1, 2, 4, 8),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return "itemsize" + std::to_string(info.param);
                         });

// Tasks of a large transposed tensor split along the first dimension and run on a pool.
TEST(Collate, LargeStridedSplitsAndRunsInParallel) {
  const int64_t R = 1000, C = 257;
  Storage s(R * C * 4, 90);
  std::vector<LeafPlan> leaves = {leaf_of({view(s, 4, {C, R}, {1, C})}),
                                  leaf_of({view(s, 4, {R * C}, {1})})};
  ThreadPool pool(4);
  // Each row of the (C, R) view is 4000 bytes: one per 4 KiB task, so at least C tasks.
  check_pack(leaves, 4096, &pool, static_cast<size_t>(C));
  check_pack(leaves, 64 * 1024, &pool, 2);
}

// Random views: slices with steps, permutations, inserted size-1 dims, every itemsize.
TEST(Collate, RandomViewsMatchReference) {
  std::mt19937_64 rng(1234);
  ThreadPool pool(3);
  for (int round = 0; round < 150; ++round) {
    std::vector<std::unique_ptr<Storage>> storages;
    std::vector<LeafPlan> leaves;
    const int n_leaves = 1 + static_cast<int>(rng() % 4);
    for (int l = 0; l < n_leaves; ++l) {
      const size_t is = size_t{1} << (rng() % 4);
      const int dims = 1 + static_cast<int>(rng() % 4);
      // One view shape per leaf; every piece of the leaf has it (samples of equal size).
      std::vector<int64_t> base(dims), step(dims), vsize(dims);
      for (int d = 0; d < dims; ++d) {
        step[d] = 1 + static_cast<int64_t>(rng() % 3);
        static const int64_t kMaxSize[] = {0, 400, 60, 12, 6};  // keeps the storages small
        vsize[d] = static_cast<int64_t>(rng() % kMaxSize[dims]);  // sometimes 0 or 1
        base[d] = std::max<int64_t>(1, vsize[d] * step[d] + static_cast<int64_t>(rng() % 3));
      }
      std::vector<int> perm(dims);
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      const bool insert_unit = rng() % 2;
      const int64_t odd_stride = 1 + static_cast<int64_t>(rng() % 1000);
      const int n_pieces = 1 + static_cast<int>(rng() % 4);

      std::vector<HostTensor> pieces;
      for (int p = 0; p < n_pieces; ++p) {
        int64_t numel = 1;
        for (int64_t b : base) numel *= b;
        storages.push_back(std::make_unique<Storage>(static_cast<size_t>(numel) * is, rng()));
        std::vector<int64_t> bstride(dims);
        int64_t acc = 1;
        for (int d = dims; d-- > 0;) {
          bstride[d] = acc;
          acc *= base[d];
        }
        std::vector<int64_t> sizes, strides;
        for (int d = 0; d < dims; ++d) {
          sizes.push_back(vsize[perm[d]]);
          strides.push_back(bstride[perm[d]] * step[perm[d]]);
        }
        if (insert_unit) {
          size_t at = rng() % (sizes.size() + 1);
          sizes.insert(sizes.begin() + at, 1);
          strides.insert(strides.begin() + at, odd_stride);
        }
        pieces.push_back(view(*storages.back(), is, sizes, strides));
      }
      leaves.push_back(leaf_of(pieces));
    }
    SCOPED_TRACE("round " + std::to_string(round));
    check_pack(leaves, 4096, round % 2 ? &pool : nullptr);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace prefetch

namespace prefetch {
namespace {

LeafPlan gather_of(HostTensor source, std::vector<int64_t> rows) {
  LeafPlan leaf;
  leaf.gather = true;
  leaf.pieces.push_back(std::move(source));
  leaf.rows = std::move(rows);
  return leaf;
}

// Rows picked out of a dataset: any order, repeats, first and last row; dense rows, rows whose
// elements are strided (a transposed dataset), 1-D datasets (labels: one element per row).
TEST(CollateGather, RowsOfDenseStridedAndOneDimensionalSources) {
  Storage s(1 << 16, 41);
  const std::vector<int64_t> rows = {7, 0, 3, 3, 9, 1, 7};
  std::vector<LeafPlan> leaves;
  leaves.push_back(gather_of(view(s, 1, {10, 6, 5, 3}, {90, 15, 3, 1}), rows));  // NHWC images
  leaves.push_back(gather_of(view(s, 4, {10, 5, 6}, {30, 1, 5}), rows));        // rows transposed
  leaves.push_back(gather_of(view(s, 8, {10}, {1}), rows));                      // labels
  leaves.push_back(gather_of(view(s, 2, {10, 4}, {1, 10}), rows));               // column-major
  leaves.push_back(gather_of(view(s, 1, {10, 6}, {6, 1}), {}));                  // no rows
  check_pack(leaves, 4096);
  EXPECT_EQ(leaves[0].nbytes(), rows.size() * 90);
  EXPECT_EQ(leaves[4].nbytes(), 0u);
}

// A batch of many rows is split into tasks of about a chunk that the pool runs in parallel.
TEST(CollateGather, LargeGatherSplitsIntoTasksAndRunsOnThePool) {
  Storage s(3000 * 300, 43);
  std::mt19937_64 rng(5);
  std::vector<int64_t> rows(1000);
  for (auto& r : rows) r = static_cast<int64_t>(rng() % 3000);
  std::vector<LeafPlan> leaves;
  leaves.push_back(gather_of(view(s, 1, {3000, 300}, {300, 1}), rows));
  leaves.push_back(gather_of(view(s, 4, {3000 * 300 / 4}, {1}), rows));
  ThreadPool pool(4);
  check_pack(leaves, 4096, &pool, /*min_tasks=*/1000 * 300 / 4096);
}


LeafPlan ranges_of(HostTensor source, std::vector<int64_t> spans) {
  LeafPlan leaf;
  leaf.ranges = true;
  leaf.pieces.push_back(std::move(source));
  leaf.spans = std::move(spans);
  return leaf;
}

// A ragged field's samples read out of one 1-D array (a store's encoded bytes): any order,
// repeats, empty ranges, the first and the last element, 1- and 4-byte items, next to
// ordinary leaves.
TEST(CollateRanges, SpansOfOneDimensionalSourcesInAnyOrder) {
  Storage s(1 << 16, 47);
  std::vector<LeafPlan> leaves;
  leaves.push_back(ranges_of(view(s, 1, {5000}, {1}), {4990, 10, 0, 7, 100, 0, 0, 7, 2500, 1}));
  leaves.push_back(gather_of(view(s, 8, {10}, {1}), {3, 1}));  // the batch's labels beside it
  leaves.push_back(ranges_of(view(s, 4, {1000}, {1}), {999, 1, 10, 300}));
  leaves.push_back(ranges_of(view(s, 1, {100}, {1}), {}));       // no samples
  check_pack(leaves, 4096);
  EXPECT_EQ(leaves[0].nbytes(), 25u);
  EXPECT_EQ(leaves[2].nbytes(), 301u * 4);
  EXPECT_EQ(leaves[3].nbytes(), 0u);
}

// Many small spans share a task; a span longer than a chunk is split so the pool shares it.
TEST(CollateRanges, SmallSpansGroupAndLargeSpansSplitOnThePool) {
  Storage s(1 << 20, 53);
  std::mt19937_64 rng(9);
  std::vector<int64_t> spans;
  for (int k = 0; k < 2000; ++k) {  // 2,000 samples of 0-99 bytes
    const int64_t count = static_cast<int64_t>(rng() % 100);
    spans.push_back(static_cast<int64_t>(rng() % ((1 << 20) - 100)));
    spans.push_back(count);
  }
  spans.insert(spans.begin() + 500, {1000, 300000});  // one sample of 300 kB among them
  std::vector<LeafPlan> leaves;
  leaves.push_back(ranges_of(view(s, 1, {1 << 20}, {1}), spans));
  ThreadPool pool(4);
  // ~100 kB of small spans in ~25 runs of 4 kB, the large one in 74 chunks: neither one task
  // per span (2,001) nor one in all.
  check_pack(leaves, 4096, &pool, /*min_tasks=*/300000 / 4096 + 20);
  std::vector<uint8_t> out(1 << 21);
  size_t total = 0;
  const std::vector<LeafLayout> layout = pack_layout(leaves, &total);
  const size_t tasks = plan_copies(leaves, layout, reinterpret_cast<std::byte*>(out.data()), 4096).size();
  EXPECT_LT(tasks, 300000u / 4096 + 100) << "small spans were not grouped";
}

// Ranges outside the source, negative counts, odd pairs and sources that are not 1-D and dense
// are refused before any copy reads them.
TEST(CollateRanges, BadSpansAndSourcesAreRefused) {
  Storage s(4096, 59);
  size_t total = 0;
  auto refused = [&](LeafPlan leaf, const std::string& needle) {
    std::vector<LeafPlan> leaves;
    leaves.push_back(std::move(leaf));
    try {
      pack_layout(leaves, &total);
      ADD_FAILURE() << "not refused: " << needle;
    } catch (const CollateError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  refused(ranges_of(view(s, 1, {100}, {1}), {95, 6}), "range 95 + 6 (position 0 of the batch) is out of range for 100");
  refused(ranges_of(view(s, 1, {100}, {1}), {0, 1, -1, 1}), "position 1");
  refused(ranges_of(view(s, 1, {100}, {1}), {0, -1}), "out of range");
  refused(ranges_of(view(s, 1, {100}, {1}), {INT64_MAX, INT64_MAX}), "out of range");
  refused(ranges_of(view(s, 1, {100}, {1}), {0, 1, 2}), "(start, count) pairs");
  refused(ranges_of(view(s, 1, {10, 10}, {10, 1}), {0, 1}), "1-D and dense");
  refused(ranges_of(view(s, 1, {50}, {2}), {0, 1}), "1-D and dense");
  LeafPlan two = ranges_of(view(s, 1, {100}, {1}), {0, 1});
  two.pieces.push_back(two.pieces[0]);
  refused(two, "one source tensor");
}

}  // namespace
}  // namespace prefetch

// libFuzzer target for the collation core (csrc/core/collate): the shapes, strides and gather
// rows of a batch come from whatever a Dataset returns. The input describes up to four leaves
// (a tensor copied as it is, samples stacked, rows gathered, or element ranges of a ragged
// field; any sizes, strides, item sizes, rows and ranges in or out of range) over one source
// buffer; the core must either refuse the batch with a
// CollateError or pack exactly what an element-by-element reference copy packs.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "collate.h"
#include "errors.h"

using namespace prefetch;

namespace {

struct Reader {
  const uint8_t* p;
  size_t n;
  uint8_t byte() {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
};

// Large enough for any tensor the input can describe (3 dims of at most 6 elements, strides of
// at most 3 x 7 x 7 elements of 8 bytes) to start anywhere in its first half.
constexpr size_t kSourceBytes = 32768;

// The last element a tensor reaches, plus one, in elements from its start.
int64_t extent(const HostTensor& t) {
  int64_t e = 1;
  for (size_t d = 0; d < t.sizes.size(); ++d) e += std::max<int64_t>(0, t.sizes[d] - 1) * t.strides[d];
  return e;
}

// A start for `t` inside the source, from the input (the harness never describes a tensor that
// reaches outside its buffer: that is the binding's check, not the core's).
const std::byte* start(Reader& r, const std::byte* source, const HostTensor& t) {
  const int64_t room = static_cast<int64_t>(kSourceBytes / t.itemsize) - extent(t);
  const int64_t first = room > 0 ? (r.byte() * 131 + r.byte()) % (room + 1) : 0;
  return source + static_cast<size_t>(first) * t.itemsize;
}

// A tensor over the source: up to 3 dims of 0..6, positive strides (in elements), possibly
// overlapping or with gaps; negative strides are not made here (the binding refuses them).
HostTensor tensor(Reader& r, const std::byte* source, size_t itemsize) {
  HostTensor t;
  t.itemsize = itemsize;
  const int dims = r.byte() % 4;
  for (int d = 0; d < dims; ++d) t.sizes.push_back(r.byte() % 7);
  t.strides.assign(t.sizes.size(), 0);
  int64_t stride = 1 + r.byte() % 3;
  for (int d = dims - 1; d >= 0; --d) {
    t.strides[d] = stride;
    stride *= std::max<int64_t>(1, t.sizes[d]) + r.byte() % 2;
  }
  t.data = start(r, source, t);
  return t;
}

// The element `index` (row-major over sizes) of t, copied byte by byte: the reference.
void element(const HostTensor& t, int64_t index, std::byte* out) {
  int64_t offset = 0;
  for (int d = static_cast<int>(t.sizes.size()) - 1; d >= 0; --d) {
    const int64_t size = t.sizes[d];
    offset += (index % size) * t.strides[d];
    index /= size;
  }
  std::memcpy(out, t.data + offset * static_cast<int64_t>(t.itemsize), t.itemsize);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Reader r{data, size};
  std::vector<std::byte> source(kSourceBytes);
  for (size_t i = 0; i < kSourceBytes; ++i) source[i] = static_cast<std::byte>((i * 131 + 7) & 0xFF);
  std::vector<LeafPlan> leaves(1 + r.byte() % 4);
  for (LeafPlan& leaf : leaves) {
    const size_t itemsize = size_t{1} << (r.byte() % 4);
    const int kind = r.byte() % 4;
    if (kind == 0) {
      leaf.pieces.push_back(tensor(r, source.data(), itemsize));
    } else if (kind == 1) {  // samples of one shape
      const HostTensor first = tensor(r, source.data(), itemsize);
      const int n = 1 + r.byte() % 4;
      for (int k = 0; k < n; ++k) {
        HostTensor t = first;
        t.data = start(r, source.data(), t);
        leaf.pieces.push_back(t);
      }
    } else if (kind == 2) {  // rows gathered from one piece (rows may be out of range: check_rows refuses)
      HostTensor t = tensor(r, source.data(), itemsize);
      if (t.sizes.empty()) t.sizes = {0}, t.strides = {1};
      leaf.pieces.push_back(t);
      leaf.gather = true;
      const int n = r.byte() % 6;
      for (int k = 0; k < n; ++k) leaf.rows.push_back(static_cast<int8_t>(r.byte()) % 9);
    } else {  // element ranges (any source: check_rows refuses all but 1-D dense ones)
      HostTensor t = tensor(r, source.data(), itemsize);
      leaf.pieces.push_back(t);
      leaf.ranges = true;
      const int n = r.byte() % 7;  // an odd count of numbers is refused too
      for (int k = 0; k < n; ++k) leaf.spans.push_back(static_cast<int8_t>(r.byte()) % 12);
    }
  }
  size_t total = 0;
  std::vector<LeafLayout> layout;
  try {
    layout = pack_layout(leaves, &total);
  } catch (const CollateError&) {
    return 0;
  }
  std::vector<std::byte> packed(total + 1), expected(total + 1);
  for (const CopyTask& task : plan_copies(leaves, layout, packed.data(), 1 + r.byte() * 3)) run_copy(task);
  // The reference: every leaf's elements, in row-major order, at its offset.
  for (size_t l = 0; l < leaves.size(); ++l) {
    std::byte* out = expected.data() + layout[l].offset;
    const LeafPlan& leaf = leaves[l];
    if (leaf.ranges) {
      const HostTensor& t = leaf.pieces[0];
      for (size_t k = 0; k + 1 < leaf.spans.size(); k += 2) {
        for (int64_t e = 0; e < leaf.spans[k + 1]; ++e, out += t.itemsize) element(t, leaf.spans[k] + e, out);
      }
    } else if (leaf.gather) {
      const HostTensor& t = leaf.pieces[0];
      const int64_t row_elems = t.numel() / std::max<int64_t>(1, t.sizes[0]);
      for (int64_t row : leaf.rows) {
        for (int64_t e = 0; e < row_elems; ++e, out += t.itemsize) element(t, row * row_elems + e, out);
      }
    } else {
      for (const HostTensor& t : leaf.pieces) {
        for (int64_t e = 0; e < t.numel(); ++e, out += t.itemsize) element(t, e, out);
      }
    }
  }
  for (size_t l = 0; l < leaves.size(); ++l) {
    if (std::memcmp(packed.data() + layout[l].offset, expected.data() + layout[l].offset, layout[l].nbytes) != 0) {
      __builtin_trap();  // packed bytes differ from the reference copy
    }
  }
  return 0;
}

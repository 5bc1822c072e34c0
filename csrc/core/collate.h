// What a batch is to the core: leaves made of host tensors described by raw pointers, sizes and
// strides, packed one after another (each aligned) into a slot's host buffer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace prefetch {

// Every leaf starts on this boundary in the packed buffer: wide vector loads in kernels and
// any dtype view of the bytes stay aligned.
constexpr size_t kLeafAlignment = 256;

// One host tensor to copy. Strides are in elements, as in torch.
struct HostTensor {
  const std::byte* data = nullptr;
  size_t itemsize = 1;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;

  // Both checked: a CollateError when the count or the byte size does not fit (see checked_math.h).
  int64_t numel() const;
  size_t nbytes() const;
  // True when the elements are laid out densely in row-major order (dims of size 1 ignored).
  bool is_contiguous() const;
};

// One output tensor: a single tensor copied as it is, several samples of equal size stacked
// along a new first dimension (collated here, once), or — when `rows` is set — rows `rows[k]` of
// the single piece (a whole dataset) stacked, which is a gather with no per-row description;
// or — when `spans` is set — the element ranges it names of the single 1-D dense piece, one
// after another (a ragged field's samples, e.g. the encoded images of a packed store: the
// ranges are read straight out of its memmap, by the pool's threads).
// `dtype_code` and `shape` are carried through for the binding; the core never interprets them.
struct LeafPlan {
  std::vector<HostTensor> pieces;
  std::vector<int64_t> rows;  // gather: indices into pieces[0]'s first dimension (check_rows)
  bool gather = false;
  // Ranges: pairs (start, count) in elements of pieces[0]; range k is elements
  // [start, start + count). Checked by check_rows like a gather's rows.
  std::vector<int64_t> spans;
  bool ranges = false;
  int64_t dtype_code = 0;
  std::vector<int64_t> shape;
  // The file pieces[0] maps, when it is a mapping (a store's values.bin): its open descriptor
  // (owned by the caller, open while the mapping lives), the size it was mapped with and its
  // path for messages. -1: not a mapped file. See check_mapped.
  int mapped_fd = -1;
  int64_t mapped_size = 0;
  std::string mapped_path;
  size_t nbytes() const;  // checked, like every size below: never wraps, at most kMaxBatchBytes
};

// For every leaf reading a mapped file: the file's size now (fstat of its descriptor) must be
// the size it was mapped with, else MappedFileChanged naming the path and both sizes — pages
// past a truncated end fault (SIGBUS) when read. The engine calls it once it has room for the
// batch, right before the copies read the sources: a truncation later than that, while the
// copies run, still faults (docs/reliability.md, "Stores").
void check_mapped(const std::vector<LeafPlan>& leaves);

// The largest byte size of a leaf or a batch: offsets are int64 in torch and in the copy tasks.
constexpr size_t kMaxBatchBytes = static_cast<size_t>(INT64_MAX);

// Bytes of one step along the first dimension of `t`, once packed (checked).
size_t row_bytes(const HostTensor& t);

struct LeafLayout {
  size_t offset = 0;
  size_t nbytes = 0;
};

// A gather leaf's precondition: one source of at least one dimension, and every row in
// [0, rows of the source). The copy tasks index the source with `rows` unchecked, so a row out
// of range would read outside it. Throws a CollateError naming the first bad row's position, its
// value and the row count. A ranges leaf's: one 1-D dense source, an even-length `spans`, and
// every range's start and count >= 0 with start + count <= the source's length (the error names
// the range's position, its start, count and the length). Does nothing for other leaves.
void check_rows(const LeafPlan& leaf);

// Offsets of every leaf in the packed buffer, and the total size (checked: the true size, or a
// CollateError when it would pass kMaxBatchBytes). Checks every leaf's rows (check_rows) too:
// every batch the engine collates is laid out here first.
std::vector<LeafLayout> pack_layout(const std::vector<LeafPlan>& leaves, size_t* total_bytes);

// A unit of copying that a thread can run on its own.
struct CopyTask {
  const HostTensor* source = nullptr;
  std::byte* dest = nullptr;   // where element [begin of the range] goes
  int64_t begin = 0;           // contiguous: byte range; strided or gather: range of rows;
  int64_t end = 0;             // spans: range of spans
  const int64_t* rows = nullptr;  // gather: row k of the range is source row rows[k]
  const int64_t* spans = nullptr;  // ranges: span k is (spans[2k], spans[2k+1]) in elements
};

// Splits the copies of every leaf into tasks of roughly `chunk_bytes` so a pool can balance them.
std::vector<CopyTask> plan_copies(const std::vector<LeafPlan>& leaves,
                                  const std::vector<LeafLayout>& layout, std::byte* base,
                                  size_t chunk_bytes);

void run_copy(const CopyTask& task);

}  // namespace prefetch

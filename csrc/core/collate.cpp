#include "collate.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "checked_math.h"
#include "errors.h"
#include "streaming_copy.h"

namespace prefetch {

namespace {
size_t checked_bytes(size_t n) {
  if (n > kMaxBatchBytes) {
    throw CollateError("prefetch: a size of " + std::to_string(n) + " bytes is past the largest " +
                       std::to_string(kMaxBatchBytes) + " a batch can have");
  }
  return n;
}
}  // namespace

void check_mapped(const std::vector<LeafPlan>& leaves) {
  for (const LeafPlan& leaf : leaves) {
    if (leaf.mapped_fd < 0) continue;
    struct stat st;
    if (fstat(leaf.mapped_fd, &st) != 0) {
      const int error = errno;
      throw MappedFileChanged("prefetch: store file " + leaf.mapped_path +
                              " cannot be checked before reading it: " + std::strerror(error));
    }
    const int64_t now = static_cast<int64_t>(st.st_size);
    if (now != leaf.mapped_size) {
      throw MappedFileChanged(
          "prefetch: store file " + leaf.mapped_path + " is " + std::to_string(now) +
          " bytes now, " + std::to_string(leaf.mapped_size) + " when it was opened: it was " +
          (now < leaf.mapped_size ? "truncated" : "rewritten") +
          " while mapped (a cp or rsync --inplace over a store in use?); reading it could kill "
          "the process (SIGBUS), so nothing more is read from it. Open the store again once it "
          "is whole; to replace a store in use, write the new one beside it and rename it into "
          "place (prefetch.pack does)");
    }
  }
}

int64_t HostTensor::numel() const { return checked_numel(sizes, "the element count"); }

size_t HostTensor::nbytes() const {
  return checked_bytes(checked_mul(static_cast<size_t>(numel()), itemsize, "the byte size"));
}

bool HostTensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    if (sizes[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

size_t LeafPlan::nbytes() const {
  if (ranges) {
    if (pieces.empty()) return 0;
    size_t elements = 0;
    for (size_t k = 1; k < spans.size(); k += 2) {
      // Negative counts are check_rows's to name; here they only must not wrap.
      elements = checked_add(elements, static_cast<size_t>(std::max<int64_t>(spans[k], 0)),
                             "the ranges' element count");
    }
    return checked_bytes(checked_mul(elements, pieces[0].itemsize, "the ranges' byte size"));
  }
  if (gather) {
    return pieces.empty() ? 0
                          : checked_bytes(checked_mul(rows.size(), row_bytes(pieces[0]),
                                                      "the gathered rows' byte size"));
  }
  size_t n = 0;
  for (const auto& p : pieces) n = checked_bytes(checked_add(n, p.nbytes(), "the samples' byte size"));
  return n;
}

namespace {
void check_spans(const LeafPlan& leaf) {
  if (leaf.pieces.size() != 1) {
    throw CollateError("prefetch: a ranges leaf takes its elements from one source tensor, got " +
                       std::to_string(leaf.pieces.size()));
  }
  const HostTensor& source = leaf.pieces[0];
  if (source.sizes.size() != 1 || (source.sizes[0] > 1 && source.strides[0] != 1)) {
    throw CollateError("prefetch: a ranges leaf's source must be 1-D and dense");
  }
  if (leaf.spans.size() % 2 != 0) {
    throw CollateError("prefetch: a ranges leaf's spans must be (start, count) pairs, got " +
                       std::to_string(leaf.spans.size()) + " numbers");
  }
  const int64_t length = source.sizes[0];
  for (size_t k = 0; k < leaf.spans.size(); k += 2) {
    const int64_t start = leaf.spans[k], count = leaf.spans[k + 1];
    // start <= length - count: no sum that could overflow.
    if (start < 0 || count < 0 || count > length || start > length - count) {
      throw CollateError("prefetch: range " + std::to_string(start) + " + " +
                         std::to_string(count) + " (position " + std::to_string(k / 2) +
                         " of the batch) is out of range for " + std::to_string(length) +
                         " elements");
    }
  }
}
}  // namespace

void check_rows(const LeafPlan& leaf) {
  if (leaf.ranges) {
    check_spans(leaf);
    return;
  }
  if (!leaf.gather) return;
  if (leaf.pieces.size() > 1) {
    throw CollateError("prefetch: a gather leaf takes its rows from one source tensor, got " +
                       std::to_string(leaf.pieces.size()));
  }
  if (!leaf.pieces.empty() && leaf.pieces[0].sizes.empty()) {
    throw CollateError("prefetch: a gather leaf's source is 0-D; rows cannot be gathered");
  }
  // No source: nothing to gather from, so any row is out of range (and none is fine).
  const int64_t count = leaf.pieces.empty() ? 0 : leaf.pieces[0].sizes[0];
  for (size_t k = 0; k < leaf.rows.size(); ++k) {
    const int64_t row = leaf.rows[k];
    if (row < 0 || row >= count) {
      throw CollateError("prefetch: index " + std::to_string(row) + " (position " +
                         std::to_string(k) + " of the batch) is out of range for " +
                         std::to_string(count) + " rows");
    }
  }
}

std::vector<LeafLayout> pack_layout(const std::vector<LeafPlan>& leaves, size_t* total_bytes) {
  std::vector<LeafLayout> layout;
  layout.reserve(leaves.size());
  size_t offset = 0;
  for (const auto& leaf : leaves) {
    check_rows(leaf);
    offset = checked_bytes(checked_round_up(offset, kLeafAlignment, "the batch's byte size"));
    size_t n = leaf.nbytes();
    layout.push_back({offset, n});
    offset = checked_bytes(checked_add(offset, n, "the batch's byte size"));
  }
  *total_bytes = offset;
  return layout;
}

size_t row_bytes(const HostTensor& t) {
  if (t.sizes.size() <= 1) return t.itemsize;
  const int64_t per_row = checked_numel(t.sizes.begin() + 1, t.sizes.end(), "the row's byte size");
  return checked_bytes(checked_mul(static_cast<size_t>(per_row), t.itemsize, "the row's byte size"));
}

namespace {

// Whether one row (dims 1..) of `t` is dense, so a gathered row is one memcpy.
bool rows_are_contiguous(const HostTensor& t) {
  int64_t expected = 1;
  for (size_t d = t.sizes.size(); d-- > 1;) {
    if (t.sizes[d] == 1) continue;
    if (t.strides[d] != expected) return false;
    expected *= t.sizes[d];
  }
  return true;
}

// Copies a strided sub-tensor (dims from `dim` on) densely to `dst`; returns the end of dst.
std::byte* copy_strided(const HostTensor& t, size_t dim, const std::byte* src, std::byte* dst) {
  const size_t last = t.sizes.size() - 1;
  if (dim == last) {
    const int64_t n = t.sizes[dim];
    const int64_t step = t.strides[dim] * static_cast<int64_t>(t.itemsize);
    if (step == static_cast<int64_t>(t.itemsize)) {
      std::memcpy(dst, src, static_cast<size_t>(n) * t.itemsize);
      return dst + n * t.itemsize;
    }
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(dst, src + i * step, t.itemsize);
      dst += t.itemsize;
    }
    return dst;
  }
  const int64_t step = t.strides[dim] * static_cast<int64_t>(t.itemsize);
  for (int64_t i = 0; i < t.sizes[dim]; ++i) dst = copy_strided(t, dim + 1, src + i * step, dst);
  return dst;
}

// A ranges leaf's tasks: runs of consecutive spans of about a chunk together (many small
// samples make one task, not one each); a span longer than a chunk is split into contiguous
// byte tasks of its own, so one large sample is still shared by the pool.
void plan_span_copies(const LeafPlan& leaf, std::byte* dest, size_t chunk_bytes,
                      std::vector<CopyTask>* tasks) {
  const HostTensor& source = leaf.pieces[0];
  const size_t item = source.itemsize;
  const auto n = static_cast<int64_t>(leaf.spans.size() / 2);
  int64_t run_begin = 0;
  size_t run_bytes = 0;
  std::byte* run_dest = dest;
  auto close_run = [&](int64_t end) {
    if (end > run_begin && run_bytes > 0) {
      tasks->push_back({&source, run_dest, run_begin, end, nullptr, leaf.spans.data()});
    }
  };
  for (int64_t k = 0; k < n; ++k) {
    const size_t bytes = static_cast<size_t>(leaf.spans[2 * k + 1]) * item;
    if (bytes > chunk_bytes) {
      close_run(k);
      const size_t from = static_cast<size_t>(leaf.spans[2 * k]) * item;
      for (size_t b = 0; b < bytes; b += chunk_bytes) {
        tasks->push_back({&source, dest + b, static_cast<int64_t>(from + b),
                          static_cast<int64_t>(from + std::min(bytes, b + chunk_bytes))});
      }
      dest += bytes;
      run_begin = k + 1;
      run_bytes = 0;
      run_dest = dest;
      continue;
    }
    if (run_bytes + bytes > chunk_bytes) {
      close_run(k);
      run_begin = k;
      run_bytes = 0;
      run_dest = dest;
    }
    run_bytes += bytes;
    dest += bytes;
  }
  close_run(n);
}

}  // namespace

std::vector<CopyTask> plan_copies(const std::vector<LeafPlan>& leaves,
                                  const std::vector<LeafLayout>& layout, std::byte* base,
                                  size_t chunk_bytes) {
  chunk_bytes = std::max<size_t>(chunk_bytes, 4096);
  std::vector<CopyTask> tasks;
  for (size_t l = 0; l < leaves.size(); ++l) {
    std::byte* dest = base + layout[l].offset;
    if (leaves[l].ranges) {
      if (leaves[l].pieces.empty()) continue;
      plan_span_copies(leaves[l], dest, chunk_bytes, &tasks);
      continue;
    }
    if (leaves[l].gather) {
      if (leaves[l].pieces.empty()) continue;
      const HostTensor& source = leaves[l].pieces[0];
      const size_t row = row_bytes(source);
      const auto n = static_cast<int64_t>(leaves[l].rows.size());
      if (row == 0 || n == 0) continue;
      const int64_t rows_per_task = std::max<int64_t>(1, chunk_bytes / row);
      for (int64_t r = 0; r < n; r += rows_per_task) {
        tasks.push_back({&source, dest + r * row, r, std::min(n, r + rows_per_task),
                         leaves[l].rows.data()});
      }
      continue;
    }
    for (const auto& piece : leaves[l].pieces) {
      const size_t bytes = piece.nbytes();
      if (bytes == 0) continue;
      if (piece.sizes.empty() || piece.is_contiguous()) {
        for (size_t b = 0; b < bytes; b += chunk_bytes) {
          tasks.push_back({&piece, dest + b, static_cast<int64_t>(b),
                           static_cast<int64_t>(std::min(bytes, b + chunk_bytes))});
        }
      } else {
        const size_t row = row_bytes(piece);
        const int64_t rows_per_task = std::max<int64_t>(1, chunk_bytes / std::max<size_t>(row, 1));
        for (int64_t r = 0; r < piece.sizes[0]; r += rows_per_task) {
          tasks.push_back({&piece, dest + r * row, r, std::min(piece.sizes[0], r + rows_per_task)});
        }
      }
      dest += bytes;
    }
  }
  return tasks;
}

void run_copy(const CopyTask& task) {
  const HostTensor& t = *task.source;
  if (task.spans != nullptr) {
    std::byte* dst = task.dest;
    for (int64_t k = task.begin; k < task.end; ++k) {
      const size_t bytes = static_cast<size_t>(task.spans[2 * k + 1]) * t.itemsize;
      std::memcpy(dst, t.data + task.spans[2 * k] * static_cast<int64_t>(t.itemsize), bytes);
      dst += bytes;
    }
    return;
  }
  if (task.rows != nullptr) {
    const int64_t step = (t.sizes.empty() ? 0 : t.strides[0]) * static_cast<int64_t>(t.itemsize);
    const size_t row = row_bytes(t);
    const bool dense = rows_are_contiguous(t);
    std::byte* dst = task.dest;
    for (int64_t k = task.begin; k < task.end; ++k) {
      const std::byte* src = t.data + task.rows[k] * step;
      if (dense) {  // 1-D sources (labels) too: a row is one element
        std::memcpy(dst, src, row);
        dst += row;
      } else {
        dst = copy_strided(t, 1, src, dst);
      }
    }
    return;
  }
  if (t.sizes.empty() || t.is_contiguous()) {
    copy_bytes(task.dest, t.data + task.begin, static_cast<size_t>(task.end - task.begin));
    return;
  }
  const int64_t step = t.strides[0] * static_cast<int64_t>(t.itemsize);
  std::byte* dst = task.dest;
  for (int64_t r = task.begin; r < task.end; ++r) {
    if (t.sizes.size() == 1) {
      std::memcpy(dst, t.data + r * step, t.itemsize);
      dst += t.itemsize;
    } else {
      dst = copy_strided(t, 1, t.data + r * step, dst);
    }
  }
}

}  // namespace prefetch

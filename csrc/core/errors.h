// Exception types the core throws; the Python binding maps each to a Python class.
#pragma once
#include <stdexcept>
#include <string>

namespace prefetch {

// The epoch this call belonged to was cancelled (close(), break, a new epoch).
class Cancelled : public std::runtime_error {
 public:
  Cancelled() : std::runtime_error("prefetch: the epoch was cancelled") {}
};

// A batch cannot be collated: ragged samples, mixed dtypes, a size cap exceeded.
class CollateError : public std::invalid_argument {
 public:
  explicit CollateError(const std::string& what) : std::invalid_argument(what) {}
};

// A file a leaf reads through a mapping changed size since the leaf was planned (a store's
// values.bin truncated or rewritten under a reader): reading it could fault with SIGBUS, so
// nothing is read. Python sees prefetch.store.StoreError (a ValueError).
class MappedFileChanged : public std::invalid_argument {
 public:
  explicit MappedFileChanged(const std::string& what) : std::invalid_argument(what) {}
};

// A backend call failed (a CUDA error, or CUDA asked of a build without it). Work that throws on
// the host stream is not wrapped: Event::wait() rethrows its own exception, original type kept.
class BackendError : public std::runtime_error {
 public:
  explicit BackendError(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace prefetch

// What the binding needs from a device: a backend for its copy stream, an allocator for the
// memory batches land in, the consumer's stream, and the protection of outputs for that stream.
// CPU support lives in engine_binding.cpp; CUDA support is compiled only against a CUDA torch.
#pragma once
#include <ATen/core/Tensor.h>

#include "engine.h"

namespace prefetch {

bool cuda_support_built();
// The engine's copy stream on `device`: one of torch's pool streams, which live as long as the
// process. The caching allocator ties the blocks allocated on a stream to its handle, and with
// expandable segments empty_cache() synchronises those handles later: a stream the engine created
// and destroyed would leave a dangling one there (docs/engine.md, Backends).
void* cuda_copy_stream(int device);
// Memory for packed batches on `device`, from torch's caching allocator, allocated on the copy
// stream so that its reuse is ordered after the copy.
DestinationAllocator cuda_destination_allocator(int device, void* copy_stream);
void* cuda_current_stream(int device);
// Tells the caching allocator that `packed` is used on `stream` (record_stream), so its memory
// is reused only after the consumer's work on it completes.
void cuda_protect_for_stream(const at::Tensor& packed, int device, void* stream);

}  // namespace prefetch

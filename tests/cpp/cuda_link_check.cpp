// Built only when nvcc is found: links the CUDA backend into an executable so that a missing
// symbol or a CUDA compile error fails CI on a machine without a GPU. Running it is optional;
// without a GPU it reports that and exits 0.
#include <cstdio>
#include <exception>

#include "backend.h"

int main() {
  if (!prefetch::built_with_cuda()) return 1;
  try {
    auto backend = prefetch::make_cuda_backend(0);
    auto memory = backend->alloc_host(1 << 20);
    backend->record()->wait();
    std::printf("cuda backend ok: %s\n", backend->name().c_str());
  } catch (const std::exception& e) {
    std::printf("cuda backend linked; not run here: %s\n", e.what());
  }
  return 0;
}

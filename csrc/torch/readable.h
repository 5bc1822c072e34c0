// Which tensors the engine, and a worker writing into the worker ring, may read raw; and the
// pieces of the messages that name a leaf.
#pragma once
#include <torch/csrc/utils/pybind.h>

#include <cstdint>
#include <string>

namespace prefetch {

std::string shape_str(at::IntArrayRef sizes);
std::string dtype_str(at::ScalarType type);
// The Python class of a leaf (a tensor subclass's own name), for messages.
std::string class_name(pybind11::handle obj);

// A CPU tensor whose elements the core can read raw, or a CollateError naming the leaf. The test
// is positive: a dense strided CPU tensor with a real data pointer into CPU memory and a storage
// that covers every element its sizes, strides and offset reach. That refuses, without listing
// them, wrapper subclasses (MaskedTensor, DTensor-style `_make_wrapper_subclass`), FakeTensors,
// functional tensors and storages resized after the fact, all of which would be read through an
// invalid pointer. Efficient zero tensors are materialised (the dense zeros clone() gives) and lazy
// conjugate/negative views resolved.
// `sample` >= 0 names sample `sample` of leaf `name`; that name is built only for a message, not
// for every sample of every batch.
at::Tensor readable(const at::Tensor& t, const std::string& name,
                    pybind11::handle obj = pybind11::handle(), int64_t sample = -1);

}  // namespace prefetch

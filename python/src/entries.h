// Python values <-> State entries, without copying tensor bytes.
//
// The Python half of the package (python/ckpt) flattens the user's nested
// dicts and converts PyTorch tensors to NumPy views; it hands this layer a
// flat list of (name, kind, value, dtype) tuples:
//
//   kind "tensor":   value is a C-contiguous, little-endian NumPy array; the
//                    State borrows its buffer. dtype is None (the array's own
//                    dtype) or a safetensors name of the same width that
//                    overrides it: how BF16 travels in int16 arrays, which
//                    NumPy cannot type.
//   kind "blob":     value is bytes (borrowed), or None when loading.
//   kind "metadata": value is a JSON object's text, or None when loading.
//
// An optional fifth element places the entry across ranks: None (the whole
// entry; replicated when several ranks add it), ("local",) (this rank's own
// tensor or blob), or ("piece", global_shape, offsets) (this rank's box of a
// tensor sharded across ranks).
//
// Every function here runs with the GIL held.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <vector>

#include "ckpt/state.h"

namespace ckpt::python {

// A State whose tensors and blobs borrow the memory of Python objects, and the
// references that keep that memory alive while the State is in use. The
// references must be dropped with the GIL held.
struct BorrowedState {
  State state;
  std::vector<pybind11::object> owners;
};

// Builds a State from the entry list. With `for_load`, tensors must be
// writable (Load fills them) and blobs and metadata are placeholders that
// Load replaces. Throws StatusError (InvalidArgument) on a bad entry.
BorrowedState BuildState(const pybind11::list& entries, bool for_load);

// An uninitialized NumPy array that can hold a tensor of `dtype`: NumPy's own
// dtype, or an unsigned integer of the same width for BF16 and the F8 types.
pybind11::array NewArrayFor(DType dtype, const std::vector<int64_t>& shape);

// The Python value of a blob (bytes) or metadata entry (JSON text).
pybind11::object ValueOf(const Entry& entry);

}  // namespace ckpt::python

#include "entries.h"

#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "errors.h"

namespace ckpt::python {
namespace {

namespace py = pybind11;

std::optional<DType> DTypeOfArray(const py::dtype& dt) {
  const size_t size = static_cast<size_t>(dt.itemsize());
  switch (dt.kind()) {
    case 'b':
      return DType::kBool;
    case 'u':
      if (size == 1) return DType::kU8;
      if (size == 2) return DType::kU16;
      if (size == 4) return DType::kU32;
      if (size == 8) return DType::kU64;
      break;
    case 'i':
      if (size == 1) return DType::kI8;
      if (size == 2) return DType::kI16;
      if (size == 4) return DType::kI32;
      if (size == 8) return DType::kI64;
      break;
    case 'f':
      if (size == 2) return DType::kF16;
      if (size == 4) return DType::kF32;
      if (size == 8) return DType::kF64;
      break;
  }
  return std::nullopt;
}

const char* NumpyName(DType dtype) {
  switch (dtype) {
    case DType::kBool:
      return "bool";
    case DType::kU8:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return "uint8";
    case DType::kI8:
      return "int8";
    case DType::kU16:
    case DType::kBF16:
      return "uint16";
    case DType::kI16:
      return "int16";
    case DType::kF16:
      return "float16";
    case DType::kU32:
      return "uint32";
    case DType::kI32:
      return "int32";
    case DType::kF32:
      return "float32";
    case DType::kU64:
      return "uint64";
    case DType::kI64:
      return "int64";
    case DType::kF64:
      return "float64";
  }
  return "uint8";
}

[[noreturn]] void Bad(const std::string& name, const std::string& why) {
  throw StatusError(InvalidArgumentError("entry \"" + name + "\": " + why));
}

TensorView ViewOf(const std::string& name, const py::handle& value,
                  const py::handle& dtype_override, bool for_load) {
  if (!py::isinstance<py::array>(value)) {
    Bad(name, "a tensor must be a NumPy array");
  }
  auto array = py::reinterpret_borrow<py::array>(value);
  if (!(array.flags() & py::array::c_style)) {
    Bad(name, "the array is not C-contiguous");
  }
  if (array.dtype().byteorder() == '>') {
    Bad(name, "the array is big-endian; safetensors data is little-endian");
  }
  std::optional<DType> dtype = DTypeOfArray(array.dtype());
  if (!dtype) {
    Bad(name, "NumPy dtype " + py::str(array.dtype()).cast<std::string>() +
                  " has no safetensors dtype");
  }
  if (!dtype_override.is_none()) {
    const auto text = dtype_override.cast<std::string>();
    std::optional<DType> named = ParseDType(text);
    if (!named) Bad(name, "unknown dtype " + text);
    if (DTypeSize(*named) != DTypeSize(*dtype)) {
      Bad(name, "dtype " + text + " is not as wide as the array's elements");
    }
    dtype = named;
  }
  if (for_load && !array.writeable()) Bad(name, "the array is read-only");
  TensorView view;
  view.dtype = *dtype;
  view.shape.assign(array.shape(), array.shape() + array.ndim());
  view.data = static_cast<std::byte*>(const_cast<void*>(array.data()));
  view.writable = for_load;
  return view;
}

// Where an entry lives across ranks: the fifth element of an entry tuple.
struct Placement {
  bool rank_local = false;
  bool piece = false;
  std::vector<int64_t> global_shape;
  std::vector<int64_t> offsets;
};

// None: the whole entry (replicated when many ranks add it); ("local",):
// this rank's own value; ("piece", global_shape, offsets): this rank's box
// of a sharded tensor.
Placement PlacementOf(const std::string& name, const py::handle& p) {
  Placement out;
  if (p.is_none()) return out;
  auto t = p.cast<py::tuple>();
  const auto what = t.size() > 0 ? t[0].cast<std::string>() : std::string();
  if (what == "local" && t.size() == 1) {
    out.rank_local = true;
  } else if (what == "piece" && t.size() == 3) {
    out.piece = true;
    out.global_shape = t[1].cast<std::vector<int64_t>>();
    out.offsets = t[2].cast<std::vector<int64_t>>();
  } else {
    Bad(name, "unknown placement " + py::repr(p).cast<std::string>());
  }
  return out;
}

}  // namespace

BorrowedState BuildState(const py::list& entries, bool for_load) {
  BorrowedState out;
  out.owners.reserve(entries.size());
  for (const py::handle item : entries) {
    auto t = item.cast<py::tuple>();
    if (t.size() != 4 && t.size() != 5) {
      throw StatusError(InvalidArgumentError(
          "an entry must be a (name, kind, value, dtype[, placement]) tuple"));
    }
    auto name = t[0].cast<std::string>();
    const auto kind = t[1].cast<std::string>();
    const py::handle value = t[2];
    const Placement where =
        t.size() == 5 ? PlacementOf(name, t[4]) : Placement{};
    if (kind == "tensor") {
      TensorView view = ViewOf(name, value, t[3], for_load);
      if (where.rank_local) {
        out.state.AddRankLocalTensor(std::move(name), std::move(view));
      } else if (where.piece) {
        out.state.AddTensorPiece(std::move(name), where.global_shape,
                                 where.offsets, std::move(view));
      } else {
        out.state.AddTensor(std::move(name), std::move(view));
      }
      out.owners.push_back(py::reinterpret_borrow<py::object>(value));
    } else if (kind == "blob") {
      if (where.piece) Bad(name, "only a tensor can be a shard");
      if (for_load) {
        if (where.rank_local) {
          out.state.AddRankLocalBlob(std::move(name), std::string());
        } else {
          out.state.AddBlob(std::move(name), std::string());
        }
        continue;
      }
      if (!py::isinstance<py::bytes>(value)) Bad(name, "a blob must be bytes");
      char* data = nullptr;
      Py_ssize_t size = 0;
      if (PyBytes_AsStringAndSize(value.ptr(), &data, &size) != 0) {
        throw py::error_already_set();
      }
      if (where.rank_local) {
        // The State keeps its own copy of a rank-local blob.
        out.state.AddRankLocalBlob(
            std::move(name), std::string(data, static_cast<size_t>(size)));
        continue;
      }
      out.state.AddBlob(std::move(name), std::span<const std::byte>(
                                             reinterpret_cast<std::byte*>(data),
                                             static_cast<size_t>(size)));
      out.owners.push_back(py::reinterpret_borrow<py::object>(value));
    } else if (kind == "metadata") {
      if (where.piece || where.rank_local) {
        Bad(name, "only a tensor or bytes can be a shard or rank-local");
      }
      out.state.AddMetadataJson(std::move(name),
                                for_load ? "{}" : value.cast<std::string>());
    } else {
      Bad(name, "unknown entry kind " + kind);
    }
  }
  ThrowIfError(out.state.status());
  return out;
}

py::array NewArrayFor(DType dtype, const std::vector<int64_t>& shape) {
  std::vector<py::ssize_t> dims(shape.begin(), shape.end());
  return py::array(py::dtype(NumpyName(dtype)), dims);
}

py::object ValueOf(const Entry& entry) {
  if (entry.kind == EntryKind::kMetadata) return py::str(entry.json);
  const TensorView& t = entry.tensor;
  const size_t size = t.shape.empty() ? 0 : static_cast<size_t>(t.shape[0]);
  return py::bytes(reinterpret_cast<const char*>(t.data), size);
}

}  // namespace ckpt::python

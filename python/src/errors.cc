#include "errors.h"

#include <array>
#include <string>

namespace ckpt::python {
namespace {

namespace py = pybind11;

constexpr ErrorCode kCodes[] = {
    ErrorCode::kInvalidArgument, ErrorCode::kNotFound,
    ErrorCode::kAlreadyExists,   ErrorCode::kDataLoss,
    ErrorCode::kIOError,         ErrorCode::kUnavailable,
    ErrorCode::kAborted,         ErrorCode::kFailedPrecondition,
};

// The classes live as long as the interpreter: the translator may run at any
// time, and module attributes alone would not keep them reachable from C++.
PyObject* error_base = nullptr;
std::array<PyObject*, std::size(kCodes) + 1> error_classes = {};

PyObject* ClassFor(ErrorCode code) {
  const auto i = static_cast<size_t>(code);
  if (i < error_classes.size() && error_classes[i] != nullptr) {
    return error_classes[i];
  }
  return error_base;
}

}  // namespace

void RegisterErrors(py::module_& m) {
  error_base = PyErr_NewExceptionWithDoc(
      "ckpt.Error",
      "Base class of every error ckpt raises; the message names the object "
      "and the operation.",
      PyExc_Exception, nullptr);
  if (error_base == nullptr) throw py::error_already_set();
  m.attr("Error") = py::handle(error_base);
  for (ErrorCode code : kCodes) {
    const std::string name(ErrorCodeName(code));
    py::object bases =
        code == ErrorCode::kInvalidArgument
            ? py::object(py::make_tuple(py::handle(error_base),
                                        py::handle(PyExc_ValueError)))
            : py::object(py::reinterpret_borrow<py::object>(error_base));
    PyObject* cls =
        PyErr_NewException(("ckpt." + name).c_str(), bases.ptr(), nullptr);
    if (cls == nullptr) throw py::error_already_set();
    error_classes[static_cast<size_t>(code)] = cls;
    m.attr(name.c_str()) = py::handle(cls);
  }
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      PyErr_SetString(ClassFor(e.status().code()),
                      e.status().message().c_str());
    }
  });
}

}  // namespace ckpt::python

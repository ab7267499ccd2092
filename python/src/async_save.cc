#include "async_save.h"

#include <pybind11/pybind11.h>

#include "errors.h"

namespace ckpt::python {

SaveResult AsyncSave::Wait() const {
  Result<SaveResult> result = [&] {
    pybind11::gil_scoped_release release;
    return handle_.Wait();
  }();
  return ValueOrThrow(std::move(result));
}

}  // namespace ckpt::python

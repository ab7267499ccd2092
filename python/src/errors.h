// Status -> Python exception. Every ckpt::ErrorCode has a class in the module
// (ckpt.DataLoss, ckpt.NotFound, ...), each a subclass of ckpt.Error; the
// exception's message is the Status message, which names the object and the
// operation. InvalidArgument is also a ValueError, so code that guards
// against bad values the usual way catches it.
#pragma once

#include <pybind11/pybind11.h>

#include <exception>
#include <string>
#include <utility>

#include "ckpt/status.h"

namespace ckpt::python {

// Carries a non-ok Status out of a bound function; the translator that
// RegisterErrors installs turns it into the matching Python exception.
class StatusError : public std::exception {
 public:
  explicit StatusError(Status status) : status_(std::move(status)) {}
  const Status& status() const { return status_; }
  const char* what() const noexcept override {
    return status_.message().c_str();
  }

 private:
  Status status_;
};

inline void ThrowIfError(const Status& status) {
  if (!status.ok()) throw StatusError(status);
}

template <typename T>
T ValueOrThrow(Result<T> result) {
  if (!result.ok()) throw StatusError(result.status());
  return std::move(result).value();
}

// Creates ckpt.Error and its subclasses in `m` and installs the translator.
void RegisterErrors(pybind11::module_& m);

}  // namespace ckpt::python

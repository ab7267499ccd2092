// Errors as values. Every fallible call in ckpt returns a `Status` or a
// `Result<T>`; no exception crosses the library boundary. A message names the
// object and the operation ("read step-000000000042/MANIFEST.json: ..."), so a
// user can act on it without a debugger.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace ckpt {

enum class ErrorCode {
  kOk = 0,
  kInvalidArgument,     // the caller asked for something malformed
  kNotFound,            // the object, step or entry does not exist
  kAlreadyExists,       // create-if-absent lost, or the step is committed
  kDataLoss,            // stored bytes are corrupt, truncated or inconsistent
  kIOError,             // the operating system or the store failed
  kUnavailable,         // a transient failure; retrying may help
  kAborted,             // the operation was stopped (another rank failed, ...)
  kFailedPrecondition,  // the operation is refused in the current state
};

// The name of a code as it appears in messages ("DataLoss").
std::string_view ErrorCodeName(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message)
      : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "DataLoss: read step-.../r00000-....safetensors: checksum mismatch"
  std::string ToString() const;

  // Returns a copy whose message is prefixed with `context` (an operation and
  // the object it acted on). Ok stays Ok.
  Status WithContext(std::string_view context) const;

  // Marks a status as deliberately ignored.
  void IgnoreError() const {}

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

Status InvalidArgumentError(std::string message);
Status NotFoundError(std::string message);
Status AlreadyExistsError(std::string message);
Status DataLossError(std::string message);
Status IOError(std::string message);
Status UnavailableError(std::string message);
Status AbortedError(std::string message);
Status FailedPreconditionError(std::string message);

// Status from an errno value: ENOENT becomes NotFound, EEXIST AlreadyExists,
// ENOTDIR/EISDIR/ELOOP/ENAMETOOLONG/EINVAL InvalidArgument, EINTR/EAGAIN
// Unavailable, everything else (EACCES, ENOSPC, EIO, ...) IOError. The
// message is "<what>: <strerror>".
Status ErrnoError(int err, std::string_view what);

// A value or the error that prevented it.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    assert(!std::get<Status>(v_).ok() && "Result built from an Ok status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }

  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }

  // The value, or `fallback` when this holds an error.
  template <typename U>
  T value_or(U&& fallback) const& {
    return ok() ? value() : static_cast<T>(std::forward<U>(fallback));
  }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<Status, T> v_;
};

}  // namespace ckpt

#define CKPT_CONCAT_INNER_(a, b) a##b
#define CKPT_CONCAT_(a, b) CKPT_CONCAT_INNER_(a, b)

// Returns the status from the enclosing function when it is an error.
#define CKPT_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::ckpt::Status ckpt_status_ = (expr);        \
    if (!ckpt_status_.ok()) return ckpt_status_; \
  } while (0)

// Like CKPT_RETURN_IF_ERROR, with `context` prefixed to the message.
#define CKPT_RETURN_IF_ERROR_CTX(expr, context)                       \
  do {                                                                \
    ::ckpt::Status ckpt_status_ = (expr);                             \
    if (!ckpt_status_.ok()) return ckpt_status_.WithContext(context); \
  } while (0)

// `CKPT_ASSIGN_OR_RETURN(auto x, F())` declares x from F()'s value, or returns
// F()'s error.
#define CKPT_ASSIGN_OR_RETURN(lhs, expr) \
  CKPT_ASSIGN_OR_RETURN_IMPL_(CKPT_CONCAT_(ckpt_result_, __LINE__), lhs, expr)
#define CKPT_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()

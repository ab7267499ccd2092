#include "ckpt/status.h"

#include <cerrno>
#include <cstring>

namespace ckpt {

std::string_view ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk:
      return "OK";
    case ErrorCode::kInvalidArgument:
      return "InvalidArgument";
    case ErrorCode::kNotFound:
      return "NotFound";
    case ErrorCode::kAlreadyExists:
      return "AlreadyExists";
    case ErrorCode::kDataLoss:
      return "DataLoss";
    case ErrorCode::kIOError:
      return "IOError";
    case ErrorCode::kUnavailable:
      return "Unavailable";
    case ErrorCode::kAborted:
      return "Aborted";
    case ErrorCode::kFailedPrecondition:
      return "FailedPrecondition";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s(ErrorCodeName(code_));
  s += ": ";
  s += message_;
  return s;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  m += ": ";
  m += message_;
  return Status(code_, std::move(m));
}

Status InvalidArgumentError(std::string m) {
  return Status(ErrorCode::kInvalidArgument, std::move(m));
}
Status NotFoundError(std::string m) {
  return Status(ErrorCode::kNotFound, std::move(m));
}
Status AlreadyExistsError(std::string m) {
  return Status(ErrorCode::kAlreadyExists, std::move(m));
}
Status DataLossError(std::string m) {
  return Status(ErrorCode::kDataLoss, std::move(m));
}
Status IOError(std::string m) {
  return Status(ErrorCode::kIOError, std::move(m));
}
Status UnavailableError(std::string m) {
  return Status(ErrorCode::kUnavailable, std::move(m));
}
Status AbortedError(std::string m) {
  return Status(ErrorCode::kAborted, std::move(m));
}
Status FailedPreconditionError(std::string m) {
  return Status(ErrorCode::kFailedPrecondition, std::move(m));
}

Status ErrnoError(int err, std::string_view what) {
  std::string m(what);
  m += ": ";
  m += std::strerror(err);
  switch (err) {
    case ENOENT:
      return NotFoundError(std::move(m));
    case EEXIST:
      return AlreadyExistsError(std::move(m));
    case ENOTDIR:
    case EISDIR:
    case ELOOP:
    case ENAMETOOLONG:
    case EINVAL:
      return InvalidArgumentError(std::move(m));
    case EINTR:
    case EAGAIN:
      return UnavailableError(std::move(m));
    default:
      // EACCES, ENOSPC, EDQUOT, EIO, EROFS...: the OS refused or failed.
      return IOError(std::move(m));
  }
}

}  // namespace ckpt

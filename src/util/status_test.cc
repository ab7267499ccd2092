#include "ckpt/status.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <memory>
#include <string>
#include <vector>

namespace ckpt {
namespace {

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_PRED_FORMAT2(::testing::IsSubstring, needle, haystack)

TEST(StatusTest, DefaultIsOk) {
  const Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), ErrorCode::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_TRUE(Status::Ok().ok());
}

TEST(StatusTest, ErrorCarriesCodeAndMessage) {
  const Status s = DataLossError("read x: checksum mismatch");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ErrorCode::kDataLoss);
  EXPECT_EQ(s.message(), "read x: checksum mismatch");
  EXPECT_EQ(s.ToString(), "DataLoss: read x: checksum mismatch");
}

TEST(StatusTest, EveryConstructorHasItsCode) {
  struct Case {
    Status status;
    ErrorCode code;
    std::string_view name;
  };
  const std::vector<Case> cases = {
      {InvalidArgumentError("m"), ErrorCode::kInvalidArgument,
       "InvalidArgument"},
      {NotFoundError("m"), ErrorCode::kNotFound, "NotFound"},
      {AlreadyExistsError("m"), ErrorCode::kAlreadyExists, "AlreadyExists"},
      {DataLossError("m"), ErrorCode::kDataLoss, "DataLoss"},
      {IOError("m"), ErrorCode::kIOError, "IOError"},
      {UnavailableError("m"), ErrorCode::kUnavailable, "Unavailable"},
      {AbortedError("m"), ErrorCode::kAborted, "Aborted"},
      {FailedPreconditionError("m"), ErrorCode::kFailedPrecondition,
       "FailedPrecondition"},
  };
  for (const Case& c : cases) {
    EXPECT_FALSE(c.status.ok());
    EXPECT_EQ(c.status.code(), c.code);
    EXPECT_EQ(c.status.message(), "m");
    EXPECT_EQ(ErrorCodeName(c.code), c.name);
    EXPECT_EQ(c.status.ToString(), std::string(c.name) + ": m");
  }
  EXPECT_EQ(ErrorCodeName(ErrorCode::kOk), "OK");
}

TEST(StatusTest, WithContextPrefixesAndKeepsCode) {
  const Status s = NotFoundError("no such object");
  const Status c = s.WithContext("read step-000000000042/MANIFEST.json");
  EXPECT_EQ(c.code(), ErrorCode::kNotFound);
  EXPECT_EQ(c.message(),
            "read step-000000000042/MANIFEST.json: no such object");
  // The original is unchanged.
  EXPECT_EQ(s.message(), "no such object");
  // Contexts nest outermost first.
  EXPECT_EQ(c.WithContext("load").message(),
            "load: read step-000000000042/MANIFEST.json: no such object");
  EXPECT_EQ(c.WithContext("load").code(), ErrorCode::kNotFound);
}

TEST(StatusTest, WithContextOnOkStaysOk) {
  const Status c = Status().WithContext("anything");
  EXPECT_TRUE(c.ok());
  EXPECT_EQ(c.message(), "");
}

TEST(StatusTest, ErrnoMapping) {
  const Status enoent = ErrnoError(ENOENT, "open a/b");
  EXPECT_EQ(enoent.code(), ErrorCode::kNotFound);
  EXPECT_CONTAINS(enoent.message(), "open a/b: ");
  EXPECT_CONTAINS(enoent.message(), "No such file");

  const Status eexist = ErrnoError(EEXIST, "link x");
  EXPECT_EQ(eexist.code(), ErrorCode::kAlreadyExists);
  EXPECT_CONTAINS(eexist.message(), "link x");

  const Status enospc = ErrnoError(ENOSPC, "write r00000.safetensors");
  EXPECT_EQ(enospc.code(), ErrorCode::kIOError);
  EXPECT_CONTAINS(enospc.message(), "No space left");
  EXPECT_CONTAINS(enospc.message(), "write r00000.safetensors");

  EXPECT_EQ(ErrnoError(EIO, "fsync").code(), ErrorCode::kIOError);
  EXPECT_EQ(ErrnoError(EACCES, "open").code(), ErrorCode::kIOError);
  EXPECT_EQ(ErrnoError(EROFS, "open").code(), ErrorCode::kIOError);
  EXPECT_EQ(ErrnoError(ENOTDIR, "open").code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ErrnoError(EISDIR, "open").code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ErrnoError(ELOOP, "open").code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ErrnoError(EINTR, "read").code(), ErrorCode::kUnavailable);
  EXPECT_EQ(ErrnoError(EAGAIN, "read").code(), ErrorCode::kUnavailable);
}

TEST(ResultTest, HoldsValue) {
  Result<int> r = 42;
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.status().ok());
  EXPECT_EQ(r.value(), 42);
  EXPECT_EQ(*r, 42);
  *r = 7;
  EXPECT_EQ(r.value(), 7);
}

TEST(ResultTest, HoldsError) {
  Result<int> r = NotFoundError("gone");
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(r.status().message(), "gone");
}

TEST(ResultTest, ArrowAndMoveOnlyValues) {
  Result<std::string> s = std::string("abc");
  EXPECT_EQ(s->size(), 3u);
  Result<std::unique_ptr<int>> p = std::make_unique<int>(5);
  ASSERT_TRUE(p.ok());
  std::unique_ptr<int> taken = std::move(p).value();
  EXPECT_EQ(*taken, 5);
  Result<std::unique_ptr<int>> q = std::make_unique<int>(6);
  std::unique_ptr<int> taken2 = *std::move(q);
  EXPECT_EQ(*taken2, 6);
}

TEST(ResultTest, ResultOfStatusLikeValue) {
  // A Result whose value type is a string must still tell value from error.
  Result<std::string> r = InvalidArgumentError("bad");
  EXPECT_FALSE(r.ok());
  Result<std::string> v = std::string("bad");
  EXPECT_TRUE(v.ok());
}

Result<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgumentError(std::to_string(x) + " is odd");
  return x / 2;
}

Result<int> Quarter(int x, int* reached) {
  CKPT_ASSIGN_OR_RETURN(int h, Half(x));
  ++*reached;
  CKPT_ASSIGN_OR_RETURN(h, Half(h));  // assigns to an existing variable
  ++*reached;
  return h;
}

TEST(MacroTest, AssignOrReturnPropagates) {
  int reached = 0;
  Result<int> r = Quarter(8, &reached);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 2);
  EXPECT_EQ(reached, 2);

  reached = 0;
  r = Quarter(7, &reached);
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "7 is odd");
  EXPECT_EQ(reached, 0);

  reached = 0;
  r = Quarter(6, &reached);
  EXPECT_EQ(r.status().message(), "3 is odd");
  EXPECT_EQ(reached, 1);
}

Status AssignIntoStatusFunction(int x, int* out) {
  CKPT_ASSIGN_OR_RETURN(*out, Half(x));
  return Status();
}

TEST(MacroTest, AssignOrReturnInStatusFunction) {
  int out = 0;
  EXPECT_TRUE(AssignIntoStatusFunction(10, &out).ok());
  EXPECT_EQ(out, 5);
  out = -1;
  EXPECT_EQ(AssignIntoStatusFunction(3, &out).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(out, -1);
}

Status Step(Status s, int* calls) {
  ++*calls;
  return s;
}

Status TwoSteps(Status first, Status second, int* calls) {
  CKPT_RETURN_IF_ERROR(Step(first, calls));
  CKPT_RETURN_IF_ERROR(Step(second, calls));
  return Status();
}

TEST(MacroTest, ReturnIfErrorPropagates) {
  int calls = 0;
  EXPECT_TRUE(TwoSteps(Status(), Status(), &calls).ok());
  EXPECT_EQ(calls, 2);

  calls = 0;
  Status s = TwoSteps(IOError("disk"), Status(), &calls);
  EXPECT_EQ(s.code(), ErrorCode::kIOError);
  EXPECT_EQ(s.message(), "disk");
  EXPECT_EQ(calls, 1);

  calls = 0;
  s = TwoSteps(Status(), AbortedError("rank 3 failed"), &calls);
  EXPECT_EQ(s.code(), ErrorCode::kAborted);
  EXPECT_EQ(calls, 2);
}

Result<int> ReturnIfErrorInResultFunction(Status s) {
  CKPT_RETURN_IF_ERROR(s);
  return 1;
}

TEST(MacroTest, ReturnIfErrorInResultFunction) {
  EXPECT_EQ(*ReturnIfErrorInResultFunction(Status()), 1);
  EXPECT_EQ(ReturnIfErrorInResultFunction(NotFoundError("x")).status().code(),
            ErrorCode::kNotFound);
}

Status WithCtx(Status s) {
  CKPT_RETURN_IF_ERROR_CTX(s, "write obj");
  return Status();
}

TEST(MacroTest, ReturnIfErrorCtxAddsContext) {
  EXPECT_TRUE(WithCtx(Status()).ok());
  const Status s = WithCtx(UnavailableError("timeout"));
  EXPECT_EQ(s.code(), ErrorCode::kUnavailable);
  EXPECT_EQ(s.message(), "write obj: timeout");
}

TEST(MacroTest, UsableWithoutBracesInIfElse) {
  auto f = [](bool fail) -> Status {
    if (fail)
      CKPT_RETURN_IF_ERROR(IOError("x"));
    else
      CKPT_RETURN_IF_ERROR(Status());
    return Status();
  };
  EXPECT_FALSE(f(true).ok());
  EXPECT_TRUE(f(false).ok());
}

}  // namespace
}  // namespace ckpt

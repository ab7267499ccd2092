#include "testing/fault_storage.h"

#include <string>

namespace ckpt::testing {

void FaultStorage::CrashAt(uint64_t op, Mode mode) {
  MutexLock lock(&mu_);
  crash_at_ = op;
  mode_ = mode;
}

void FaultStorage::FailOnce(uint64_t op, Status status) {
  MutexLock lock(&mu_);
  fail_at_ = op;
  fail_later_ = false;
  fail_status_ = std::move(status);
}

void FaultStorage::FailFrom(uint64_t op, Status status) {
  MutexLock lock(&mu_);
  fail_at_ = op;
  fail_later_ = true;
  fail_status_ = std::move(status);
}

std::vector<std::string> FaultStorage::log() const {
  MutexLock lock(&mu_);
  return log_;
}

template <typename F>
Status FaultStorage::Step(std::string_view what, F&& op,
                          const std::function<void()>& partial) {
  uint64_t n;
  {
    MutexLock lock(&mu_);
    n = ops_.fetch_add(1);
    log_.emplace_back(what);
  }
  auto crash = [&] {
    return IOError("simulated crash at operation " + std::to_string(n) + " (" +
                   std::string(what) + ")");
  };
  if (crashed_.load()) return crash();
  bool before = false, after = false;
  Status injected;
  {
    MutexLock lock(&mu_);
    if (crash_at_ && n >= *crash_at_) {
      before = mode_ == Mode::kCrashBefore;
      after = !before;
    }
    if (fail_at_ && (n == *fail_at_ || (fail_later_ && n > *fail_at_))) {
      injected = fail_status_;
    }
  }
  if (!injected.ok()) {
    if (partial && short_writes_) partial();
    return injected;
  }
  if (before) {
    crashed_ = true;
    return crash();
  }
  Status s = op();
  if (after) {
    crashed_ = true;
    return crash();
  }
  return s;
}

namespace {

class FaultWritable : public WritableObject {
 public:
  FaultWritable(FaultStorage* owner, std::unique_ptr<WritableObject> target,
                std::string key)
      : owner_(owner), target_(std::move(target)), key_(std::move(key)) {}

  Status Append(std::span<const std::byte> data) override {
    return owner_->Step(
        "append " + key_, [&] { return target_->Append(data); },
        [&] { (void)target_->Append(data.first(data.size() / 2)); });
  }
  Status Close() override {
    return owner_->Step("close " + key_, [&] { return target_->Close(); });
  }
  uint64_t size() const override { return target_->size(); }

 private:
  FaultStorage* owner_;
  std::unique_ptr<WritableObject> target_;
  std::string key_;
};

}  // namespace

Result<std::unique_ptr<WritableObject>> FaultStorage::NewWritable(
    std::string_view key) {
  std::unique_ptr<WritableObject> inner;
  Status s = Step("create " + std::string(key), [&]() -> Status {
    Result<std::unique_ptr<WritableObject>> r = target()->NewWritable(key);
    if (!r.ok()) return r.status();
    inner = std::move(r).value();
    return Status();
  });
  if (!s.ok()) return s;
  return std::unique_ptr<WritableObject>(
      new FaultWritable(this, std::move(inner), std::string(key)));
}

Status FaultStorage::Put(std::string_view key, std::span<const std::byte> data,
                         PutMode mode) {
  return Step("put " + std::string(key),
              [&] { return target()->Put(key, data, mode); });
}

Status FaultStorage::Delete(std::string_view key) {
  return Step("delete " + std::string(key),
              [&] { return target()->Delete(key); });
}

}  // namespace ckpt::testing

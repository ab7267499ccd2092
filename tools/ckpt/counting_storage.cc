#include "counting_storage.h"

#include "util/mutex.h"

namespace ckpt::cli {
namespace {

// Thread-safe, as every Storage: the counts are summed under a lock, so
// progress_ sees one call at a time.
class CountingStorage : public StorageWrapper {
 public:
  CountingStorage(std::unique_ptr<Storage> target, ByteProgressFn progress)
      : StorageWrapper(std::move(target)), progress_(std::move(progress)) {}

  Result<std::unique_ptr<WritableObject>> NewWritable(
      std::string_view key) override;

  Status ReadRange(std::string_view key, uint64_t offset,
                   std::span<std::byte> out) override {
    Status s = StorageWrapper::ReadRange(key, offset, out);
    if (s.ok()) Count(out.size(), 0);
    return s;
  }

  void Count(uint64_t read, uint64_t written) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    read_ += read;
    written_ += written;
    progress_(read_, written_);
  }

 private:
  const ByteProgressFn progress_;
  Mutex mu_;
  uint64_t read_ GUARDED_BY(mu_) = 0;
  uint64_t written_ GUARDED_BY(mu_) = 0;
};

// Forwards to the target object, AppendRetained included, so a backend that
// writes straight from retained memory still does.
class CountingWritable : public WritableObject {
 public:
  CountingWritable(std::unique_ptr<WritableObject> target,
                   CountingStorage* storage)
      : target_(std::move(target)), storage_(storage) {}

  Status Append(std::span<const std::byte> data) override {
    Status s = target_->Append(data);
    if (s.ok()) storage_->Count(0, data.size());
    return s;
  }
  Status AppendRetained(std::span<const std::byte> data) override {
    Status s = target_->AppendRetained(data);
    if (s.ok()) storage_->Count(0, data.size());
    return s;
  }
  Status Close() override { return target_->Close(); }
  uint64_t size() const override { return target_->size(); }

 private:
  const std::unique_ptr<WritableObject> target_;
  CountingStorage* const storage_;
};

Result<std::unique_ptr<WritableObject>> CountingStorage::NewWritable(
    std::string_view key) {
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<WritableObject> target,
                        StorageWrapper::NewWritable(key));
  return std::unique_ptr<WritableObject>(
      std::make_unique<CountingWritable>(std::move(target), this));
}

}  // namespace

std::unique_ptr<Storage> NewCountingStorage(std::unique_ptr<Storage> target,
                                            ByteProgressFn progress) {
  return std::make_unique<CountingStorage>(std::move(target),
                                           std::move(progress));
}

}  // namespace ckpt::cli

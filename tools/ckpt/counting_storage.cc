#include "counting_storage.h"

#include <map>
#include <string>

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
    if (s.ok()) Count({.read = out.size()});
    return s;
  }

  Result<ObjectInfo> Stat(std::string_view key) override EXCLUDES(mu_) {
    Result<ObjectInfo> info = StorageWrapper::Stat(key);
    if (info.ok()) {
      MutexLock lock(&mu_);
      sizes_[info->key] = info->size;
    }
    return info;
  }

  Result<std::vector<ObjectInfo>> List(std::string_view prefix) override
      EXCLUDES(mu_) {
    Result<std::vector<ObjectInfo>> listed = StorageWrapper::List(prefix);
    if (listed.ok()) {
      MutexLock lock(&mu_);
      for (const ObjectInfo& o : *listed) sizes_[o.key] = o.size;
    }
    return listed;
  }

  Status Delete(std::string_view key) override EXCLUDES(mu_) {
    Status s = StorageWrapper::Delete(key);
    if (!s.ok()) return s;
    uint64_t size = 0;
    {
      MutexLock lock(&mu_);
      if (auto it = sizes_.find(key); it != sizes_.end()) {
        size = it->second;
        sizes_.erase(it);
      }
    }
    Count({.deleted = size});
    return s;
  }

  void Count(const ByteCounts& more) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    counts_.read += more.read;
    counts_.written += more.written;
    counts_.deleted += more.deleted;
    progress_(counts_);
  }

 private:
  const ByteProgressFn progress_;
  Mutex mu_;
  ByteCounts counts_ GUARDED_BY(mu_);
  // The sizes listings gave, for Delete to count.
  std::map<std::string, uint64_t, std::less<>> sizes_ GUARDED_BY(mu_);
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
    if (s.ok()) storage_->Count({.written = data.size()});
    return s;
  }
  Status AppendRetained(std::span<const std::byte> data) override {
    Status s = target_->AppendRetained(data);
    if (s.ok()) storage_->Count({.written = data.size()});
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

// NewRateLimitedStorage: a wrapper that paces writes to a byte rate.
//
// The pacing itself is util/pacer.h.
#include "ckpt/storage.h"
#include "util/pacer.h"

namespace ckpt {
namespace {

class PacedWritable : public WritableObject {
 public:
  PacedWritable(std::unique_ptr<WritableObject> target, Pacer* pacer)
      : target_(std::move(target)), pacer_(pacer) {}
  Status Append(std::span<const std::byte> data) override {
    pacer_->Wait(data.size());
    return target_->Append(data);
  }
  Status AppendRetained(std::span<const std::byte> data) override {
    pacer_->Wait(data.size());
    return target_->AppendRetained(data);
  }
  // Durable once the link has carried every byte, as with a slow store.
  Status Close() override {
    pacer_->WaitDrained();
    return target_->Close();
  }
  uint64_t size() const override { return target_->size(); }
  bool CanRewritePrefix() const override { return target_->CanRewritePrefix(); }
  Status RewritePrefix(std::span<const std::byte> bytes) override {
    pacer_->Wait(bytes.size());
    return target_->RewritePrefix(bytes);
  }

 private:
  std::unique_ptr<WritableObject> target_;
  Pacer* pacer_;
};

class RateLimitedStorage : public StorageWrapper {
 public:
  RateLimitedStorage(std::unique_ptr<Storage> target, double bytes_per_second)
      : StorageWrapper(std::move(target)), pacer_(bytes_per_second) {}

  Result<std::unique_ptr<WritableObject>> NewWritable(
      std::string_view key) override {
    CKPT_ASSIGN_OR_RETURN(std::unique_ptr<WritableObject> w,
                          StorageWrapper::NewWritable(key));
    return std::unique_ptr<WritableObject>(
        new PacedWritable(std::move(w), &pacer_));
  }
  Status Put(std::string_view key, std::span<const std::byte> data,
             PutMode mode) override {
    pacer_.Wait(data.size());
    pacer_.WaitDrained();
    return StorageWrapper::Put(key, data, mode);
  }

 private:
  Pacer pacer_;
};

}  // namespace

std::unique_ptr<Storage> NewRateLimitedStorage(std::unique_ptr<Storage> target,
                                               double bytes_per_second) {
  if (!(bytes_per_second > 0)) return target;  // no limit
  return std::make_unique<RateLimitedStorage>(std::move(target),
                                              bytes_per_second);
}

}  // namespace ckpt

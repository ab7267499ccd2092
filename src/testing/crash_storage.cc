#include "testing/crash_storage.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "storage/file/file_storage.h"

namespace ckpt::testing {
namespace {

std::string AsString(std::span<const std::byte> data) {
  return std::string(reinterpret_cast<const char*>(data.data()), data.size());
}

class CrashWritable : public WritableObject {
 public:
  CrashWritable(CrashStorage* owner, std::unique_ptr<WritableObject> target,
                std::string key)
      : owner_(owner), target_(std::move(target)), key_(std::move(key)) {}

  ~CrashWritable() override {
    if (!closed_) owner_->Unfinished(key_, bytes_);
  }

  Status Append(std::span<const std::byte> data) override {
    CKPT_RETURN_IF_ERROR(owner_->Begin("append " + key_).status());
    Status s = target_->Append(data);
    if (s.ok()) bytes_ += AsString(data);
    return owner_->Alive(key_, std::move(s));
  }

  Status Close() override {
    CKPT_RETURN_IF_ERROR(owner_->Begin("close " + key_).status());
    closed_ = true;
    return owner_->End(key_, bytes_, target_->Close());
  }

  uint64_t size() const override { return target_->size(); }

 private:
  CrashStorage* owner_;
  std::unique_ptr<WritableObject> target_;
  std::string key_;
  std::string bytes_;  // appended so far
  bool closed_ = false;
};

}  // namespace

Result<std::unique_ptr<CrashStorage>> CrashStorage::Wrap(Storage* target) {
  std::unique_ptr<CrashStorage> s(new CrashStorage(target));
  CKPT_ASSIGN_OR_RETURN(std::vector<ObjectInfo> objects, target->List(""));
  MutexLock lock(&s->mu_);
  for (const ObjectInfo& o : objects) {
    CKPT_ASSIGN_OR_RETURN(std::string bytes, target->ReadAll(o.key));
    s->start_[o.key] = std::move(bytes);
  }
  return s;
}

void CrashStorage::CrashAt(uint64_t op) {
  MutexLock lock(&mu_);
  crash_at_ = op;
}

void CrashStorage::Crash() { crashed_ = true; }

Status CrashStorage::Dead(std::string_view what) const {
  return IOError("simulated power loss: " + std::string(what));
}

Result<uint64_t> CrashStorage::Begin(std::string_view what) {
  MutexLock lock(&mu_);
  const uint64_t n = ops_.fetch_add(1);
  if (crash_at_ && n >= *crash_at_) crashed_ = true;
  if (crashed_) return Dead(what);
  return n;
}

Status CrashStorage::End(std::string_view key, std::optional<std::string> value,
                         Status status) {
  MutexLock lock(&mu_);
  const bool durable = status.ok() && !crashed_;
  events_.push_back(Event{durable, std::string(key), std::move(value)});
  if (crashed_) return Dead(key);
  return status;
}

Status CrashStorage::Alive(std::string_view what, Status status) const {
  if (crashed_) return Dead(what);
  return status;
}

void CrashStorage::Unfinished(std::string key, std::string prefix) {
  MutexLock lock(&mu_);
  unfinished_.emplace_back(std::move(key), std::move(prefix));
}

Result<std::unique_ptr<WritableObject>> CrashStorage::NewWritable(
    std::string_view key) {
  CKPT_RETURN_IF_ERROR(Begin("create " + std::string(key)).status());
  Result<std::unique_ptr<WritableObject>> inner = target()->NewWritable(key);
  CKPT_RETURN_IF_ERROR(Alive(key, inner.status()));
  return std::unique_ptr<WritableObject>(
      new CrashWritable(this, std::move(inner).value(), std::string(key)));
}

Status CrashStorage::Put(std::string_view key, std::span<const std::byte> data,
                         PutMode mode) {
  CKPT_RETURN_IF_ERROR(Begin("put " + std::string(key)).status());
  Status s = target()->Put(key, data, mode);
  // A create-if-absent that found the key taken changed nothing.
  if (s.code() == ErrorCode::kAlreadyExists) return Alive(key, std::move(s));
  return End(key, AsString(data), std::move(s));
}

Status CrashStorage::Delete(std::string_view key) {
  CKPT_RETURN_IF_ERROR(Begin("delete " + std::string(key)).status());
  return End(key, std::nullopt, target()->Delete(key));
}

Status CrashStorage::ReadRange(std::string_view key, uint64_t offset,
                               std::span<std::byte> out) {
  return Alive(key, target()->ReadRange(key, offset, out));
}

Result<std::string> CrashStorage::ReadAll(std::string_view key) {
  CKPT_RETURN_IF_ERROR(Alive(key, Status()));
  return target()->ReadAll(key);
}

Result<ObjectInfo> CrashStorage::Stat(std::string_view key) {
  CKPT_RETURN_IF_ERROR(Alive(key, Status()));
  return target()->Stat(key);
}

Result<std::vector<ObjectInfo>> CrashStorage::List(std::string_view prefix) {
  CKPT_RETURN_IF_ERROR(Alive(prefix, Status()));
  return target()->List(prefix);
}

Result<int> CrashStorage::PowerLoss(const Damage& damage) {
  MutexLock lock(&mu_);
  crashed_ = true;
  std::mt19937_64 gen(damage.seed);
  auto coin = [&] { return (gen() & 1) != 0; };
  // Replay, on what was durable at the start, every call in the order it
  // returned: the durable ones, and the uncertain ones the damage applies.
  std::map<std::string, std::string> image = start_;
  int applied = 0;
  for (const Event& e : events_) {
    if (!e.durable) {
      const bool apply =
          damage.uncertain == Damage::Uncertain::kApply ||
          (damage.uncertain == Damage::Uncertain::kRandom && coin());
      if (!apply) continue;
      ++applied;
    }
    if (!e.value) {
      image.erase(e.key);
      continue;
    }
    std::string bytes = *e.value;
    if (!e.durable && damage.torn && !bytes.empty()) {
      const size_t from = gen() % bytes.size();
      switch (gen() % 3) {
        case 0:
          std::fill(bytes.begin() + from, bytes.end(), '\0');
          break;
        case 1:
          for (size_t i = from; i < bytes.size(); ++i) {
            bytes[i] = static_cast<char>(gen());
          }
          break;
        default:
          bytes.resize(from);
      }
    }
    image[e.key] = std::move(bytes);
  }
  if (damage.strays) {
    for (const auto& [key, prefix] : unfinished_) {
      char hex[17];
      std::snprintf(hex, sizeof(hex), "%016llx",
                    static_cast<unsigned long long>(gen()));
      std::string stray = key + std::string(kTempMarker) + hex;
      // Only a backend whose unfinished writes leave temporaries (file://)
      // can have strays; on any other an unfinished write leaves nothing.
      if (target()->TemporaryOf(stray) != key) continue;
      image[std::move(stray)] =
          prefix.substr(0, prefix.empty() ? 0 : gen() % (prefix.size() + 1));
    }
  }
  // Make the target hold exactly the image.
  CKPT_ASSIGN_OR_RETURN(std::vector<ObjectInfo> present, target()->List(""));
  for (const ObjectInfo& o : present) {
    if (!image.count(o.key)) CKPT_RETURN_IF_ERROR(target()->Delete(o.key));
  }
  std::set<std::string> keys;
  for (const ObjectInfo& o : present) keys.insert(o.key);
  for (const auto& [key, bytes] : image) {
    if (keys.count(key)) {
      Result<std::string> now = target()->ReadAll(key);
      if (now.ok() && *now == bytes) continue;
    }
    CKPT_RETURN_IF_ERROR(target()->PutString(key, bytes));
  }
  start_ = std::move(image);
  events_.clear();
  unfinished_.clear();
  return applied;
}

}  // namespace ckpt::testing

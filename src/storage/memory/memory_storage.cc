#include "storage/memory/memory_storage.h"

#include <chrono>
#include <cstring>
#include <map>

#include "util/mutex.h"
#include "util/names.h"

namespace ckpt {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct Object {
  std::shared_ptr<const std::string> bytes;
  int64_t mtime_ms = 0;
};

// The objects of one named store; shared by every handle on it.
struct Store {
  Mutex mu;
  std::map<std::string, Object, std::less<>> objects GUARDED_BY(mu);
};

// The named stores of the process.
struct Table {
  Mutex mu;
  std::map<std::string, std::shared_ptr<Store>> stores GUARDED_BY(mu);
};
Table& NamedStores() {
  static auto* table = new Table();
  return *table;
}

class MemoryStorage;

class BytesView : public ObjectView {
 public:
  explicit BytesView(std::shared_ptr<const std::string> bytes)
      : bytes_(std::move(bytes)) {}
  std::span<const std::byte> bytes() const override {
    return {reinterpret_cast<const std::byte*>(bytes_->data()), bytes_->size()};
  }

 private:
  std::shared_ptr<const std::string> bytes_;
};

class MemoryWritable : public WritableObject {
 public:
  MemoryWritable(std::shared_ptr<Store> store, std::string key)
      : store_(std::move(store)), key_(std::move(key)) {}

  Status Append(std::span<const std::byte> data) override {
    if (closed_) return FailedPreconditionError("append to closed " + key_);
    buf_.append(reinterpret_cast<const char*>(data.data()), data.size());
    return Status();
  }
  Status Close() override {
    if (closed_) return FailedPreconditionError("close of closed " + key_);
    closed_ = true;
    MutexLock lock(&store_->mu);
    store_->objects[key_] =
        Object{std::make_shared<const std::string>(std::move(buf_)), NowMs()};
    return Status();
  }
  uint64_t size() const override { return buf_.size(); }
  bool KeepPrefix(uint64_t) override { return true; }
  Status RewritePrefix(std::span<const std::byte> bytes) override {
    if (closed_) return FailedPreconditionError("rewrite of closed " + key_);
    if (bytes.size() > buf_.size()) {
      return InvalidArgumentError(
          "rewrite of " + key_ + ": " + std::to_string(bytes.size()) +
          " bytes, past the " + std::to_string(buf_.size()) + " written");
    }
    std::memcpy(buf_.data(), bytes.data(), bytes.size());
    return Status();
  }

 private:
  std::shared_ptr<Store> store_;
  std::string key_;
  std::string buf_;
  bool closed_ = false;
};

class MemoryStorage : public Storage {
 public:
  MemoryStorage(std::string url, std::shared_ptr<Store> store)
      : url_(std::move(url)), store_(std::move(store)) {}

  const std::string& url() const override { return url_; }

  StorageCapabilities capabilities() const override {
    StorageCapabilities caps;
    caps.atomic_create_if_absent = true;
    caps.range_reads = true;
    caps.object_views = true;
    caps.local_reads = true;  // this process's memory
    return caps;
  }

  Result<std::unique_ptr<WritableObject>> NewWritable(
      std::string_view key) override {
    CKPT_RETURN_IF_ERROR(ValidateKey(key));
    return std::unique_ptr<WritableObject>(
        new MemoryWritable(store_, std::string(key)));
  }

  Status Put(std::string_view key, std::span<const std::byte> data,
             PutMode mode) override {
    CKPT_RETURN_IF_ERROR(ValidateKey(key));
    auto bytes = std::make_shared<const std::string>(
        reinterpret_cast<const char*>(data.data()), data.size());
    MutexLock lock(&store_->mu);
    auto it = store_->objects.find(key);
    if (mode == PutMode::kCreateIfAbsent && it != store_->objects.end()) {
      return AlreadyExistsError("put " + Quote(key) + " in " + url_ +
                                ": object already exists");
    }
    store_->objects[std::string(key)] = Object{std::move(bytes), NowMs()};
    return Status();
  }

  Status ReadRange(std::string_view key, uint64_t offset,
                   std::span<std::byte> out) override {
    CKPT_RETURN_IF_ERROR(ValidateKey(key));
    std::shared_ptr<const std::string> bytes;
    {
      MutexLock lock(&store_->mu);
      auto it = store_->objects.find(key);
      if (it == store_->objects.end()) {
        return NotFoundError("read " + Quote(key) + " in " + url_ +
                             ": no such object");
      }
      bytes = it->second.bytes;
    }
    if (offset > bytes->size() || out.size() > bytes->size() - offset) {
      return DataLossError("read " + Quote(key) + " in " + url_ + ": range [" +
                           std::to_string(offset) + ", " +
                           std::to_string(offset + out.size()) +
                           ") runs past the end of the object (" +
                           std::to_string(bytes->size()) + " bytes)");
    }
    if (!out.empty())
      std::memcpy(out.data(), bytes->data() + offset, out.size());
    return Status();
  }

  // One lookup under the lock, so a concurrent overwrite cannot make the
  // size and the bytes disagree.
  Result<std::string> ReadAll(std::string_view key) override {
    CKPT_RETURN_IF_ERROR(ValidateKey(key));
    MutexLock lock(&store_->mu);
    auto it = store_->objects.find(key);
    if (it == store_->objects.end()) {
      return NotFoundError("read " + Quote(key) + " in " + url_ +
                           ": no such object");
    }
    return *it->second.bytes;
  }

  // The object's own bytes, shared: a later Put replaces the pointer in
  // the table and leaves these as they are.
  Result<std::shared_ptr<const ObjectView>> ViewObject(
      std::string_view key) override {
    CKPT_RETURN_IF_ERROR(ValidateKey(key));
    MutexLock lock(&store_->mu);
    auto it = store_->objects.find(key);
    if (it == store_->objects.end()) {
      return NotFoundError("view " + Quote(key) + " in " + url_ +
                           ": no such object");
    }
    return std::shared_ptr<const ObjectView>(
        std::make_shared<const BytesView>(it->second.bytes));
  }

  Result<ObjectInfo> Stat(std::string_view key) override {
    CKPT_RETURN_IF_ERROR(ValidateKey(key));
    MutexLock lock(&store_->mu);
    auto it = store_->objects.find(key);
    if (it == store_->objects.end()) {
      return NotFoundError("stat " + Quote(key) + " in " + url_ +
                           ": no such object");
    }
    return ObjectInfo{std::string(key), it->second.bytes->size(),
                      it->second.mtime_ms};
  }

  Result<std::vector<ObjectInfo>> List(std::string_view prefix) override {
    std::vector<ObjectInfo> out;
    MutexLock lock(&store_->mu);
    for (auto it = store_->objects.lower_bound(prefix);
         it != store_->objects.end() && it->first.starts_with(prefix); ++it) {
      out.push_back(
          ObjectInfo{it->first, it->second.bytes->size(), it->second.mtime_ms});
    }
    return out;
  }

  Status Delete(std::string_view key) override {
    CKPT_RETURN_IF_ERROR(ValidateKey(key));
    MutexLock lock(&store_->mu);
    auto it = store_->objects.find(key);
    if (it == store_->objects.end()) {
      return NotFoundError("delete " + Quote(key) + " in " + url_ +
                           ": no such object");
    }
    store_->objects.erase(it);
    return Status();
  }

 private:
  const std::string url_;
  const std::shared_ptr<Store> store_;
};

}  // namespace

Result<std::unique_ptr<Storage>> OpenMemoryStorage(
    const ParsedUrl& url, const StorageOptions& options) {
  // mem://NAME or mem://NAME/sub/dir: the whole string after the scheme names
  // the store, so distinct paths are distinct stores.
  std::string name = url.host + url.path;
  while (!name.empty() && name.back() == '/') name.pop_back();
  if (name.empty()) {
    return InvalidArgumentError("URL " + Quote(url.url) +
                                ": a mem:// URL needs a name (mem://NAME)");
  }
  Table& table = NamedStores();
  MutexLock lock(&table.mu);
  auto it = table.stores.find(name);
  if (it == table.stores.end()) {
    if (!options.create) {
      return NotFoundError("open " + Quote(url.url) + ": no such memory store");
    }
    it = table.stores.emplace(name, std::make_shared<Store>()).first;
  }
  return std::unique_ptr<Storage>(new MemoryStorage(url.url, it->second));
}

std::unique_ptr<Storage> NewMemoryStorage(std::string url) {
  return std::unique_ptr<Storage>(
      new MemoryStorage(std::move(url), std::make_shared<Store>()));
}

void DropMemoryStore(const std::string& name) {
  Table& table = NamedStores();
  MutexLock lock(&table.mu);
  table.stores.erase(name);
}

}  // namespace ckpt

#include "checkpoint/held_chunks.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

namespace ckpt {

namespace {

constexpr uint64_t kPage = 4096;

uint64_t PageUp(uint64_t n) { return (n + kPage - 1) / kPage * kPage; }

}  // namespace

struct HeldChunks::Mapping {
  Mapping(std::byte* b, uint64_t n) : base(b), size(n) {}
  ~Mapping() {
    if (size > 0) ::munmap(base, size);
  }
  std::byte* base;
  uint64_t size;
};

namespace {

// An object's held bytes; keeps the mapping they lie in.
class HeldView : public ObjectView {
 public:
  HeldView(std::shared_ptr<const void> keep, std::span<const std::byte> bytes)
      : keep_(std::move(keep)), bytes_(bytes) {}
  std::span<const std::byte> bytes() const override { return bytes_; }

 private:
  std::shared_ptr<const void> keep_;
  std::span<const std::byte> bytes_;
};

}  // namespace

uint64_t HeldChunks::SizeOf(
    const std::map<std::string, uint64_t, std::less<>>& ends) {
  uint64_t size = 0;
  for (const auto& [key, end] : ends) size += PageUp(end);
  return size;
}

Result<std::unique_ptr<HeldChunks>> HeldChunks::Make(
    Storage* target, const std::map<std::string, uint64_t, std::less<>>& ends,
    int shared_fd) {
  std::map<std::string, Part, std::less<>> parts;
  uint64_t size = 0;
  for (const auto& [key, end] : ends) {
    parts[key] = {end, size};
    size += PageUp(end);
  }
  std::byte* base = nullptr;
  if (size > 0) {
    void* p = shared_fd >= 0
                  ? ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED,
                           shared_fd, 0)
                  : ::mmap(nullptr, size, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      return IOError("read once: no memory for the " + std::to_string(size) +
                     " bytes of the chunks this rank needs (" +
                     std::strerror(errno) + ")");
    }
    base = static_cast<std::byte*>(p);
  }
  return std::unique_ptr<HeldChunks>(new HeldChunks(
      target, std::make_shared<Mapping>(base, size), std::move(parts)));
}

HeldChunks::HeldChunks(Storage* target, std::shared_ptr<Mapping> memory,
                       std::map<std::string, Part, std::less<>> parts)
    : StorageWrapper(target),
      memory_(std::move(memory)),
      parts_(std::move(parts)) {}

HeldChunks::~HeldChunks() = default;

std::byte* HeldChunks::At(std::string_view key, uint64_t offset) const {
  auto part = parts_.find(key);
  if (part == parts_.end() || offset > part->second.end) return nullptr;
  return memory_->base + part->second.at + offset;
}

uint64_t HeldChunks::OffsetOf(const std::byte* at) const {
  return static_cast<uint64_t>(at - memory_->base);
}

void HeldChunks::Hold(std::string_view key, uint64_t offset, uint64_t length) {
  auto object = places_.find(key);
  if (object == places_.end()) {
    object =
        places_.emplace(std::string(key), std::map<uint64_t, uint64_t>()).first;
  }
  object->second[offset] = length;
}

StorageCapabilities HeldChunks::capabilities() const {
  StorageCapabilities caps = StorageWrapper::capabilities();
  // Views of memory: no disk under them, and no fresh memory to map.
  caps.object_views = complete_;
  caps.direct_reads = false;
  return caps;
}

Status HeldChunks::ReadRange(std::string_view key, uint64_t offset,
                             std::span<std::byte> out) {
  auto object = places_.find(key);
  if (object == places_.end()) return target()->ReadRange(key, offset, out);
  const auto& chunks = object->second;
  const uint64_t end = offset + out.size();
  uint64_t at = offset;
  // The first chunk that ends after `at`.
  auto c = chunks.upper_bound(at);
  if (c != chunks.begin() && std::prev(c)->first + std::prev(c)->second > at) {
    --c;
  }
  while (at < end) {
    if (c != chunks.end() && c->first <= at) {
      const uint64_t stop = std::min(end, c->first + c->second);
      std::memcpy(out.data() + (at - offset), At(key, at), stop - at);
      at = stop;
      ++c;
      continue;
    }
    const uint64_t stop = c == chunks.end() ? end : std::min(end, c->first);
    CKPT_RETURN_IF_ERROR(
        target()->ReadRange(key, at, out.subspan(at - offset, stop - at)));
    at = stop;
  }
  return Status();
}

Status HeldChunks::ReadRangeFilling(std::string_view key, uint64_t offset,
                                    std::span<std::byte> out,
                                    const FilledFn& filled) {
  if (places_.find(key) == places_.end()) {
    return target()->ReadRangeFilling(key, offset, out, filled);
  }
  CKPT_RETURN_IF_ERROR(ReadRange(key, offset, out));
  filled(out);
  return Status();
}

Result<std::shared_ptr<const ObjectView>> HeldChunks::ViewObject(
    std::string_view key) {
  // As any wrapper, none of the target's: its bytes would bypass the held
  // ones (and a storage reached through a link offers none).
  auto part = parts_.find(key);
  if (!complete_ || part == parts_.end()) {
    return std::shared_ptr<const ObjectView>();
  }
  // The object's bytes up to the end of the last chunk the rank needs;
  // before the first, and between chunks, nothing the load reads.
  return std::shared_ptr<const ObjectView>(std::make_shared<HeldView>(
      memory_, std::span<const std::byte>(memory_->base + part->second.at,
                                          part->second.end)));
}

}  // namespace ckpt

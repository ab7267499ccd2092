// The memory a read-once load (read_once.h) keeps the chunks it needs in:
// one mapping, laid out as the step's objects are, so that a chunk lies at
// its own offset within its object's part. Reads through it take the held
// chunks from memory and the rest from the root's storage; once it holds
// every chunk the rank needs, it also hands over its objects as views
// (Storage::ViewObject), and an all-or-nothing load checks the chunks
// where they lie and copies them once into the caller's buffers, instead
// of copying them into staging memory first (docs/design.md, "Every byte
// read once").
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/storage.h"

namespace ckpt {

class HeldChunks : public StorageWrapper {
 public:
  // Maps the memory for the objects in `ends` (key -> the end of the last
  // byte the rank needs of it): address space for bytes [0, end) of each,
  // of which only the pages written cost memory; or, with `shared_fd`, the
  // first SizeOf(ends) bytes of that file, which the ranks of a node map
  // alike (SharedMemoryFile), each writing only the chunks it takes.
  // `target` outlives this.
  static Result<std::unique_ptr<HeldChunks>> Make(
      Storage* target, const std::map<std::string, uint64_t, std::less<>>& ends,
      int shared_fd = -1);
  // The bytes Make maps for `ends`.
  static uint64_t SizeOf(
      const std::map<std::string, uint64_t, std::less<>>& ends);
  ~HeldChunks() override;

  // Where the object `key`'s byte at `offset` is kept (up to its end).
  std::byte* At(std::string_view key, uint64_t offset) const;
  // The offset of `at` (from At) in the memory: in the shared file's bytes,
  // where Make was given one.
  uint64_t OffsetOf(const std::byte* at) const;
  // The `length` bytes at At(key, offset) are the object's from `offset`:
  // reads take them from memory.
  void Hold(std::string_view key, uint64_t offset, uint64_t length);
  // Every chunk the rank needs is held: views from now on.
  void SetComplete() { complete_ = true; }
  bool empty() const { return places_.empty(); }

  StorageCapabilities capabilities() const override;
  Status ReadRange(std::string_view key, uint64_t offset,
                   std::span<std::byte> out) override;
  Status ReadRangeFilling(std::string_view key, uint64_t offset,
                          std::span<std::byte> out,
                          const FilledFn& filled) override;
  Result<std::shared_ptr<const ObjectView>> ViewObject(
      std::string_view key) override;

 private:
  struct Mapping;
  struct Part {
    uint64_t end = 0;
    uint64_t at = 0;  // of the object's byte 0 in the mapping
  };
  HeldChunks(Storage* target, std::shared_ptr<Mapping> memory,
             std::map<std::string, Part, std::less<>> parts);

  std::shared_ptr<Mapping> memory_;
  std::map<std::string, Part, std::less<>> parts_;
  std::map<std::string, std::map<uint64_t, uint64_t>, std::less<>>
      places_;  // key -> offset -> length held
  bool complete_ = false;
};

}  // namespace ckpt

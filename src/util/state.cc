#include "ckpt/state.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "util/names.h"

namespace ckpt {

Result<uint64_t> TensorView::NumElements() const {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) {
      return InvalidArgumentError("negative dimension " + std::to_string(d));
    }
  }
  // A zero anywhere makes the tensor empty, whatever the other dimensions.
  if (std::find(shape.begin(), shape.end(), 0) != shape.end())
    return uint64_t{0};
  for (int64_t d : shape) {
    if (d != 0 && n > UINT64_MAX / static_cast<uint64_t>(d)) {
      return InvalidArgumentError("shape element count overflows 64 bits");
    }
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

Result<uint64_t> TensorView::ByteSize() const {
  CKPT_ASSIGN_OR_RETURN(uint64_t n, NumElements());
  const uint64_t size = DTypeSize(dtype);
  if (n > UINT64_MAX / size) {
    return InvalidArgumentError("shape byte count overflows 64 bits");
  }
  return n * size;
}

std::string_view EntryKindName(EntryKind kind) {
  switch (kind) {
    case EntryKind::kTensor:
      return "tensor";
    case EntryKind::kBlob:
      return "blob";
    case EntryKind::kMetadata:
      return "metadata";
  }
  return "unknown";
}

void State::SetError(Status error) {
  if (status_.ok() && !error.ok()) status_ = std::move(error);
}

Entry* State::Add(std::string name, EntryKind kind) {
  if (!status_.ok()) return nullptr;
  if (Status s = ValidateEntryName(name); !s.ok()) {
    status_ = s;
    return nullptr;
  }
  if (index_.count(name)) {
    status_ = AlreadyExistsError("duplicate entry name " + Quote(name));
    return nullptr;
  }
  index_.emplace(name, entries_.size());
  Entry& e = entries_.emplace_back();
  e.name = std::move(name);
  e.kind = kind;
  return &e;
}

bool State::HasDeviceTensors() const {
  for (const Entry& e : entries_) {
    if (!e.tensor.location.is_host()) return true;
  }
  return false;
}

std::span<std::byte> State::Own(size_t bytes) {
  // make_unique_for_overwrite: no zeroing, the bytes are written right away.
  owned_.push_back(
      std::make_unique_for_overwrite<std::byte[]>(bytes ? bytes : 1));
  return {owned_.back().get(), bytes};
}

State& State::AddTensor(std::string name, TensorView view) {
  Result<uint64_t> size = view.ByteSize();
  if (!size.ok()) {
    if (status_.ok()) {
      status_ = size.status().WithContext("tensor " + Quote(name));
    }
    return *this;
  }
  if (*size > 0 && view.data == nullptr) {
    if (status_.ok()) {
      status_ = InvalidArgumentError("tensor " + Quote(name) +
                                     " has bytes but a null data pointer");
    }
    return *this;
  }
  if (!view.location.is_host() && view.location.device() < 0) {
    if (status_.ok()) {
      status_ = InvalidArgumentError(
          "tensor " + Quote(name) + " is on a CUDA device with ordinal " +
          std::to_string(view.location.device()) + "; ordinals start at 0");
    }
    return *this;
  }
  if (Entry* e = Add(std::move(name), EntryKind::kTensor)) {
    e->tensor = std::move(view);
  }
  return *this;
}

State& State::AddTensorPiece(std::string name,
                             std::vector<int64_t> global_shape,
                             std::vector<int64_t> offsets, TensorView view) {
  if (!status_.ok()) return *this;
  const std::string quoted = Quote(name);
  auto fail = [&](const std::string& why) -> State& {
    status_ = InvalidArgumentError("tensor piece " + quoted + ": " + why);
    return *this;
  };
  if (global_shape.size() != view.shape.size() ||
      offsets.size() != view.shape.size()) {
    return fail("global shape, offsets and the view's shape differ in rank");
  }
  if (global_shape.empty()) return fail("a 0-d tensor cannot be split");
  TensorView whole{view.dtype, global_shape, nullptr, false};
  if (Result<uint64_t> n = whole.ByteSize(); !n.ok()) {
    return fail(n.status().message());
  }
  for (size_t d = 0; d < offsets.size(); ++d) {
    if (offsets[d] < 0 || view.shape[d] < 0 || offsets[d] > global_shape[d] ||
        view.shape[d] > global_shape[d] - offsets[d]) {
      return fail("the box lies outside the global shape");
    }
  }
  const size_t index = entries_.size();
  AddTensor(std::move(name), std::move(view));
  if (status_.ok() && entries_.size() == index + 1) {
    entries_[index].global_shape = std::move(global_shape);
    entries_[index].offsets = std::move(offsets);
  }
  return *this;
}

State& State::AddRankLocalTensor(std::string name, TensorView view) {
  const size_t index = entries_.size();
  AddTensor(std::move(name), std::move(view));
  if (status_.ok() && entries_.size() == index + 1) {
    entries_[index].rank_local = true;
  }
  return *this;
}

State& State::AddRankLocalBlob(std::string name, std::string bytes) {
  const size_t index = entries_.size();
  AddBlob(std::move(name), std::move(bytes));
  if (status_.ok() && entries_.size() == index + 1) {
    entries_[index].rank_local = true;
  }
  return *this;
}

State& State::AddBlob(std::string name, std::span<const std::byte> bytes) {
  if (Entry* e = Add(std::move(name), EntryKind::kBlob)) {
    e->tensor = TensorView{DType::kU8,
                           {static_cast<int64_t>(bytes.size())},
                           const_cast<std::byte*>(bytes.data()),
                           false};
  }
  return *this;
}

State& State::AddBlob(std::string name, std::string bytes) {
  if (Entry* e = Add(std::move(name), EntryKind::kBlob)) {
    std::span<std::byte> buf = Own(bytes.size());
    std::memcpy(buf.data(), bytes.data(), bytes.size());
    e->tensor = TensorView{
        DType::kU8, {static_cast<int64_t>(bytes.size())}, buf.data(), true};
  }
  return *this;
}

State& State::AddMetadata(std::string name,
                          const std::map<std::string, std::string>& values) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : values) j[k] = v;
  std::string text;
  try {
    text = j.dump();
  } catch (const nlohmann::json::exception&) {
    // dump() throws on a key or value that is not UTF-8; JSON cannot hold it
    // and no exception may leave the library.
    if (status_.ok()) {
      status_ = InvalidArgumentError("metadata " + Quote(name) +
                                     " holds a key or value that is not UTF-8");
    }
    return *this;
  }
  return AddMetadataJson(std::move(name), std::move(text));
}

namespace {

// How deep JSON text nests, as the manifest's parser counts: each array or
// object a level, and a value inside one a level more (an empty container
// counts its own). Counted without parsing (strings skipped), so that text
// nested too deep is refused before a recursive walk of it could exhaust
// the stack.
size_t JsonDepth(std::string_view text) {
  size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
    } else if (c == '}' || c == ']') {
      if (depth > 0) --depth;
    } else if (c != ',' && c != ':' && c != ' ' && c != '\t' && c != '\n' &&
               c != '\r') {
      in_string = c == '"';
      deepest = std::max(deepest, depth + 1);  // a value, or a key
    }
  }
  return deepest;
}

}  // namespace

State& State::AddMetadataJson(std::string name, std::string json_object) {
  if (const size_t depth = JsonDepth(json_object); depth > kMaxMetadataDepth) {
    if (status_.ok()) {
      status_ = InvalidArgumentError(
          "metadata " + Quote(name) + " nests " + std::to_string(depth) +
          " levels deep (its arrays and objects, and a value inside them); a "
          "checkpoint holds at most " +
          std::to_string(kMaxMetadataDepth));
    }
    return *this;
  }
  nlohmann::json j = nlohmann::json::parse(json_object, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    if (status_.ok()) {
      status_ = InvalidArgumentError("metadata " + Quote(name) +
                                     " is not a JSON object");
    }
    return *this;
  }
  if (Entry* e = Add(std::move(name), EntryKind::kMetadata)) {
    e->json = j.dump();  // canonical form: stable bytes for diff and checksums
  }
  return *this;
}

Result<TensorView> State::AllocateTensor(std::string name, DType dtype,
                                         std::vector<int64_t> shape) {
  TensorView view{dtype, std::move(shape), nullptr, true};
  CKPT_ASSIGN_OR_RETURN(uint64_t size, view.ByteSize());
  if (size > SIZE_MAX) return InvalidArgumentError("tensor too large");
  CKPT_RETURN_IF_ERROR(status_);
  Entry* e = Add(std::move(name), EntryKind::kTensor);
  if (e == nullptr) return status_;
  view.data = Own(size).data();
  e->tensor = view;
  return view;
}

const Entry* State::Find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &entries_[it->second];
}

Entry* State::Find(std::string_view name) {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &entries_[it->second];
}

Result<std::span<const std::byte>> State::Blob(std::string_view name) const {
  const Entry* e = Find(name);
  if (e == nullptr || e->kind != EntryKind::kBlob) {
    return NotFoundError("no blob named " + Quote(name));
  }
  return std::span<const std::byte>(e->tensor.data,
                                    static_cast<size_t>(e->tensor.shape[0]));
}

Result<std::string> State::BlobString(std::string_view name) const {
  CKPT_ASSIGN_OR_RETURN(auto bytes, Blob(name));
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

Result<std::map<std::string, std::string>> State::Metadata(
    std::string_view name) const {
  const Entry* e = Find(name);
  if (e == nullptr || e->kind != EntryKind::kMetadata) {
    return NotFoundError("no metadata named " + Quote(name));
  }
  nlohmann::json j = nlohmann::json::parse(e->json, nullptr, false);
  std::map<std::string, std::string> out;
  if (j.is_discarded() || !j.is_object()) {
    return DataLossError("metadata " + Quote(name) + " is not a JSON object");
  }
  for (auto& [k, v] : j.items()) {
    out[k] = v.is_string() ? v.get<std::string>() : v.dump();
  }
  return out;
}

Status State::SetBlob(std::string_view name, std::string bytes) {
  Entry* e = Find(name);
  if (e == nullptr || e->kind != EntryKind::kBlob) {
    return NotFoundError("no blob named " + Quote(name));
  }
  std::span<std::byte> buf = Own(bytes.size());
  std::memcpy(buf.data(), bytes.data(), bytes.size());
  e->tensor = TensorView{
      DType::kU8, {static_cast<int64_t>(bytes.size())}, buf.data(), true};
  return Status();
}

Status State::SetMetadataJson(std::string_view name, std::string json) {
  Entry* e = Find(name);
  if (e == nullptr || e->kind != EntryKind::kMetadata) {
    return NotFoundError("no metadata named " + Quote(name));
  }
  e->json = std::move(json);
  return Status();
}

}  // namespace ckpt

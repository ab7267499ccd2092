#include "tiers/tier_share.h"

#include <cstdio>
#include <map>
#include <sstream>

#include "format/layout.h"
#include "format/tier_layout.h"
#include "util/names.h"

namespace ckpt {

using format::ShareDirName;
using format::StepDirName;
namespace {

std::string JoinInts(const std::vector<int64_t>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(v[i]);
  }
  return out;
}

// Keys under a prefix of another storage. Every call maps the key; List
// strips the prefix again.
class PrefixStorage : public StorageWrapper {
 public:
  PrefixStorage(std::shared_ptr<Storage> node, std::string prefix)
      : StorageWrapper(node.get()),
        node_(std::move(node)),
        prefix_(std::move(prefix)),
        url_(node_->url() + "/" + prefix_.substr(0, prefix_.size() - 1)) {}

  const std::string& url() const override { return url_; }
  Result<std::unique_ptr<WritableObject>> NewWritable(
      std::string_view key) override {
    return node_->NewWritable(Key(key));
  }
  Status Put(std::string_view key, std::span<const std::byte> data,
             PutMode mode) override {
    return node_->Put(Key(key), data, mode);
  }
  Status ReadRange(std::string_view key, uint64_t offset,
                   std::span<std::byte> out) override {
    return node_->ReadRange(Key(key), offset, out);
  }
  Status ReadRangeFilling(std::string_view key, uint64_t offset,
                          std::span<std::byte> out,
                          const FilledFn& filled) override {
    return node_->ReadRangeFilling(Key(key), offset, out, filled);
  }
  Result<std::string> ReadAll(std::string_view key) override {
    return node_->ReadAll(Key(key));
  }
  Result<ObjectInfo> Stat(std::string_view key) override {
    CKPT_ASSIGN_OR_RETURN(ObjectInfo info, node_->Stat(Key(key)));
    info.key = std::string(key);
    return info;
  }
  Result<std::vector<ObjectInfo>> List(std::string_view prefix) override {
    CKPT_ASSIGN_OR_RETURN(std::vector<ObjectInfo> all,
                          node_->List(Key(prefix)));
    for (ObjectInfo& o : all) o.key.erase(0, prefix_.size());
    return all;
  }
  Status Delete(std::string_view key) override {
    return node_->Delete(Key(key));
  }
  Result<std::vector<std::string>> AbortIncompleteWrites(
      std::string_view prefix,
      const std::function<bool(const ObjectInfo&)>& dead) override {
    CKPT_ASSIGN_OR_RETURN(
        std::vector<std::string> keys,
        node_->AbortIncompleteWrites(Key(prefix), [&](const ObjectInfo& o) {
          ObjectInfo mine = o;
          mine.key.erase(0, prefix_.size());
          return dead(mine);
        }));
    for (std::string& k : keys) k.erase(0, prefix_.size());
    return keys;
  }
  std::optional<std::string> TemporaryOf(std::string_view key) const override {
    std::optional<std::string> of = node_->TemporaryOf(Key(key));
    if (of && of->compare(0, prefix_.size(), prefix_) == 0) {
      return of->substr(prefix_.size());
    }
    return std::nullopt;
  }

 private:
  std::string Key(std::string_view key) const {
    return prefix_ + std::string(key);
  }

  std::shared_ptr<Storage> node_;
  const std::string prefix_;  // "r00003/"
  const std::string url_;
};

}  // namespace

std::unique_ptr<Storage> NewShareStorage(std::shared_ptr<Storage> node,
                                         int rank) {
  return std::make_unique<PrefixStorage>(std::move(node),
                                         ShareDirName(rank) + "/");
}

std::string NodeRootUrl(const std::string& pattern, int node) {
  std::string out = pattern;
  const std::string n = std::to_string(node);
  for (size_t at = out.find("{node}"); at != std::string::npos;
       at = out.find("{node}", at + n.size())) {
    out.replace(at, 6, n);
  }
  return out;
}

std::string ShareRootUrl(const std::string& node_url, int rank) {
  std::string base = node_url;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  return base + "/" + ShareDirName(rank);
}

std::string ShareDescription(const State& state, int rank, int world_size) {
  // One line per piece: its name, offsets and global shape. Only pieces
  // depend on the split; whole tensors fit any rank of any world size.
  std::string boxes;
  for (const Entry& e : state.entries()) {
    if (e.kind != EntryKind::kTensor || !e.is_piece()) continue;
    boxes += e.name + "@" + JoinInts(e.offsets) + "/" +
             JoinInts(e.global_shape) + "\n";
  }
  std::map<std::string, std::string> values = {
      {"rank", std::to_string(rank)},
      {"world_size", std::to_string(world_size)},
      {"boxes", boxes}};
  State tmp;
  tmp.AddMetadata("d", values);
  return tmp.entries().empty() ? std::string() : tmp.entries()[0].json;
}

std::map<std::string, std::string> ShareDescriptionFields(
    const std::string& json) {
  State tmp;
  tmp.AddMetadataJson("d", json);
  Result<std::map<std::string, std::string>> m = tmp.Metadata("d");
  return m.ok() ? *m : std::map<std::string, std::string>{};
}

namespace {

std::vector<int64_t> ParseInts(std::string_view text) {
  std::vector<int64_t> out;
  std::istringstream in{std::string(text)};
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(std::stoll(item));
  }
  return out;
}

}  // namespace

Result<std::map<std::string, ShareBox>> ParseShareBoxes(
    const std::string& boxes, int rank) {
  std::map<std::string, ShareBox> out;
  std::istringstream in(boxes);
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.rfind('@'), slash = line.rfind('/');
    if (at == std::string::npos || slash == std::string::npos || slash < at) {
      return DataLossError("share of rank " + std::to_string(rank) +
                           ": a bad box line");
    }
    out[line.substr(0, at)] = {
        ParseInts(std::string_view(line).substr(at + 1, slash - at - 1)),
        ParseInts(std::string_view(line).substr(slash + 1))};
  }
  return out;
}

Status BuildShareState(const State& state, int rank, int world_size,
                       State& out) {
  CKPT_RETURN_IF_ERROR(state.status());
  for (const Entry& e : state.entries()) {
    if (e.name == kShareEntry || e.name == kShareJobEntry) {
      return InvalidArgumentError("entry " + Quote(e.name) +
                                  ": the name is the local tier's own");
    }
    switch (e.kind) {
      case EntryKind::kTensor:
        if (e.rank_local) {
          out.AddRankLocalTensor(e.name, e.tensor);
        } else {
          out.AddTensor(e.name, e.tensor);  // a piece: its box, whole
        }
        break;
      case EntryKind::kBlob: {
        const auto bytes = std::span<const std::byte>(
            e.tensor.data, static_cast<size_t>(e.tensor.shape.at(0)));
        if (e.rank_local) {
          out.AddRankLocalBlob(
              e.name, std::string(reinterpret_cast<const char*>(bytes.data()),
                                  bytes.size()));
        } else {
          out.AddBlob(e.name, bytes);
        }
        break;
      }
      case EntryKind::kMetadata:
        out.AddMetadataJson(e.name, e.json);
        break;
    }
  }
  out.AddMetadataJson(kShareEntry, ShareDescription(state, rank, world_size));
  out.SetCudaStream(state.cuda_stream());
  return out.status();
}

Status BuildShareLoadView(State& state, State& view) {
  CKPT_RETURN_IF_ERROR(state.status());
  for (const Entry& e : state.entries()) {
    switch (e.kind) {
      case EntryKind::kTensor:
        if (e.rank_local) {
          view.AddRankLocalTensor(e.name, e.tensor);
        } else {
          view.AddTensor(e.name, e.tensor);
        }
        break;
      case EntryKind::kBlob:
        if (e.rank_local) {
          view.AddRankLocalBlob(e.name, "");
        } else {
          view.AddBlob(e.name, std::string());
        }
        break;
      case EntryKind::kMetadata:
        view.AddMetadataJson(e.name, "{}");
        break;
    }
  }
  view.SetCudaStream(state.cuda_stream());
  return view.status();
}

Status CopyBackLoaded(const State& view, State& state) {
  for (const Entry& e : view.entries()) {
    if (e.name == kShareEntry || e.name == kShareJobEntry) continue;
    if (e.kind == EntryKind::kBlob) {
      CKPT_ASSIGN_OR_RETURN(std::string bytes, view.BlobString(e.name));
      CKPT_RETURN_IF_ERROR(state.SetBlob(e.name, std::move(bytes)));
    } else if (e.kind == EntryKind::kMetadata) {
      CKPT_RETURN_IF_ERROR(state.SetMetadataJson(e.name, e.json));
    }
  }
  return Status();
}

}  // namespace ckpt

#include "ckpt/storage.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <memory>

#include "util/mutex.h"
#include "util/names.h"

namespace ckpt {

Status Storage::ReadRangeFilling(std::string_view key, uint64_t offset,
                                 std::span<std::byte> out,
                                 const FilledFn& filled) {
  CKPT_RETURN_IF_ERROR(ReadRange(key, offset, out));
  filled(out);
  return Status();
}

Result<std::shared_ptr<const ObjectView>> Storage::ViewObject(
    std::string_view key) {
  return std::shared_ptr<const ObjectView>();
}

Result<std::string> Storage::ReadAll(std::string_view key) {
  CKPT_ASSIGN_OR_RETURN(ObjectInfo info, Stat(key));
  std::string out(info.size, '\0');
  CKPT_RETURN_IF_ERROR(
      ReadRange(key, 0,
                std::span<std::byte>(reinterpret_cast<std::byte*>(out.data()),
                                     out.size())));
  return out;
}

Result<ParsedUrl> ParseUrl(std::string_view url) {
  auto bad = [&](std::string_view why) {
    return InvalidArgumentError("URL " + Quote(url) + ": " + std::string(why));
  };
  if (url.empty()) return bad("is empty");
  for (unsigned char c : url) {
    if (c < 0x20 || c == 0x7f) return bad("contains a control character");
  }
  ParsedUrl out;
  out.url = std::string(url);
  const size_t sep = url.find("://");
  if (sep == std::string_view::npos) {
    // A plain local path.
    std::error_code ec;
    std::filesystem::path p = std::filesystem::absolute(std::string(url), ec);
    if (ec) return bad("cannot be made absolute: " + ec.message());
    out.scheme = "file";
    out.path = p.lexically_normal().string();
    if (out.path.size() > 1 && out.path.back() == '/') out.path.pop_back();
    return out;
  }
  std::string_view scheme = url.substr(0, sep);
  if (scheme.empty()) return bad("has an empty scheme");
  for (char c : scheme) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' &&
        c != '.') {
      return bad("has a malformed scheme");
    }
    out.scheme +=
        static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  std::string_view rest = url.substr(sep + 3);
  const size_t slash = rest.find('/');
  out.host = std::string(rest.substr(0, slash));
  out.path =
      slash == std::string_view::npos ? "" : std::string(rest.substr(slash));
  if (rest.find_first_of("?#") != std::string_view::npos) {
    return bad("query strings and fragments are not supported");
  }
  return out;
}

struct StorageRegistry::Backends {
  mutable Mutex mu;
  std::map<std::string, StorageFactory> factories GUARDED_BY(mu);
};

StorageRegistry::StorageRegistry() : backends_(std::make_unique<Backends>()) {}
StorageRegistry::~StorageRegistry() = default;

StorageRegistry& StorageRegistry::Default() {
  static StorageRegistry* registry = [] {
    auto* r = new StorageRegistry();
    RegisterBuiltinBackends(*r);
    return r;
  }();
  return *registry;
}

void StorageRegistry::Register(std::string scheme, StorageFactory factory) {
  MutexLock lock(&backends_->mu);
  backends_->factories[std::move(scheme)] = std::move(factory);
}

std::vector<std::string> StorageRegistry::Schemes() const {
  MutexLock lock(&backends_->mu);
  std::vector<std::string> out;
  for (const auto& [k, v] : backends_->factories) out.push_back(k);
  return out;
}

Result<std::unique_ptr<Storage>> StorageRegistry::Open(
    std::string_view url, const StorageOptions& options) {
  CKPT_ASSIGN_OR_RETURN(ParsedUrl parsed, ParseUrl(url));
  StorageFactory factory;
  {
    Backends& b = *backends_;
    MutexLock lock(&b.mu);
    auto it = b.factories.find(parsed.scheme);
    if (it == b.factories.end()) {
      std::string known;
      for (const auto& [k, v] : b.factories) {
        known += known.empty() ? "" : ", ";
        known += k + "://";
      }
      return InvalidArgumentError("URL " + Quote(url) + ": unknown scheme \"" +
                                  parsed.scheme + "\" (known: " + known + ")");
    }
    factory = it->second;
  }
  // Outside the lock: opening may take long (an S3 round trip), and a
  // factory may itself consult the registry.
  return factory(parsed, options);
}

Result<std::unique_ptr<Storage>> OpenStorage(std::string_view url,
                                             const StorageOptions& options) {
  return StorageRegistry::Default().Open(url, options);
}

}  // namespace ckpt

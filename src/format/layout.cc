#include "format/layout.h"

#include <charconv>
#include <chrono>
#include <cstdio>
#include <random>

#include "format/constants.h"

namespace ckpt::format {

namespace {

constexpr std::string_view kLeasePrefix = "LEASE-";
constexpr size_t kLeaseDigits = 12;

// `prefix` followed by exactly `digits` decimal digits: their value;
// otherwise -1.
int64_t ParseNumbered(std::string_view name, std::string_view prefix,
                      size_t digits) {
  if (name.size() != prefix.size() + digits || !name.starts_with(prefix)) {
    return -1;
  }
  int64_t v = 0;
  for (char c : name.substr(prefix.size())) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v;
}

}  // namespace

std::string StepDirName(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step-%012lld", static_cast<long long>(step));
  return buf;
}

int64_t ParseStepDirName(std::string_view name) {
  return ParseNumbered(name, kStepPrefix, kStepDigits);
}

std::string LeaseKey(int64_t generation) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%012lld",
                static_cast<long long>(generation));
  return std::string(kLeasePrefix) + buf;
}

std::string_view LeasePrefix() { return kLeasePrefix; }

int64_t ParseLeaseKey(std::string_view key) {
  return ParseNumbered(key, kLeasePrefix, kLeaseDigits);
}

std::string ManifestKey(int64_t step) {
  return StepDirName(step) + "/" + std::string(kManifestName);
}

std::string DataObjectKey(int64_t step, int rank, std::string_view attempt) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "/r%05d-", rank);
  return StepDirName(step) + buf + std::string(attempt) +
         std::string(kDataSuffix);
}

namespace {

// "r<5 digits>-<16 hex><suffix>" in a step directory.
bool ParseRankObjectKey(std::string_view key, std::string_view suffix,
                        int64_t* step, int* rank, std::string* attempt) {
  const size_t slash = key.find('/');
  if (slash == std::string_view::npos) return false;
  const int64_t s = ParseStepDirName(key.substr(0, slash));
  if (s < 0) return false;
  std::string_view file = key.substr(slash + 1);
  if (file.size() != 1 + kRankDigits + 1 + kAttemptHexDigits + suffix.size() ||
      file[0] != 'r' || file[1 + kRankDigits] != '-' ||
      !file.ends_with(suffix)) {
    return false;
  }
  int r = 0;
  for (char c : file.substr(1, kRankDigits)) {
    if (c < '0' || c > '9') return false;
    r = r * 10 + (c - '0');
  }
  std::string_view a = file.substr(2 + kRankDigits, kAttemptHexDigits);
  for (char c : a) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  if (step) *step = s;
  if (rank) *rank = r;
  if (attempt) *attempt = std::string(a);
  return true;
}

bool IsAttempt(std::string_view a) {
  if (a.size() != static_cast<size_t>(kAttemptHexDigits)) return false;
  for (char c : a) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

bool ParseDataObjectKey(std::string_view key, int64_t* step, int* rank,
                        std::string* attempt) {
  return ParseRankObjectKey(key, kDataSuffix, step, rank, attempt);
}

std::string IndexObjectKey(int64_t step, int rank, std::string_view attempt) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "/r%05d-", rank);
  return StepDirName(step) + buf + std::string(attempt) +
         std::string(kIndexSuffix);
}

bool ParseIndexObjectKey(std::string_view key, int64_t* step, int* rank,
                         std::string* attempt) {
  return ParseRankObjectKey(key, kIndexSuffix, step, rank, attempt);
}

std::string DirectoryKey(int64_t step, std::string_view attempt) {
  return StepDirName(step) + "/" + std::string(kDirectoryPrefix) +
         std::string(attempt) + std::string(kDirectorySuffix);
}

bool ParseDirectoryKey(std::string_view key, int64_t* step,
                       std::string* attempt) {
  int64_t s;
  std::string_view file;
  if (!SplitStepKey(key, &s, &file) || !file.starts_with(kDirectoryPrefix) ||
      !file.ends_with(kDirectorySuffix)) {
    return false;
  }
  const std::string_view a = file.substr(
      kDirectoryPrefix.size(),
      file.size() - kDirectoryPrefix.size() - kDirectorySuffix.size());
  if (!IsAttempt(a)) return false;
  if (step) *step = s;
  if (attempt) *attempt = std::string(a);
  return true;
}

bool IsCkptObjectKey(std::string_view key) {
  return ParseDataObjectKey(key, nullptr, nullptr, nullptr) ||
         ParseIndexObjectKey(key, nullptr, nullptr, nullptr) ||
         ParseDirectoryKey(key, nullptr, nullptr);
}

std::string LatestKey() { return std::string(kLatestName); }

bool SplitStepKey(std::string_view key, int64_t* step, std::string_view* file) {
  const size_t slash = key.find('/');
  if (slash == std::string_view::npos) return false;
  const int64_t s = ParseStepDirName(key.substr(0, slash));
  const std::string_view f = key.substr(slash + 1);
  if (s < 0 || f.empty() || f.find('/') != std::string_view::npos) {
    return false;
  }
  if (step) *step = s;
  if (file) *file = f;
  return true;
}

int64_t StepOfKey(std::string_view key) {
  const size_t slash = key.find('/');
  if (slash == std::string_view::npos) return -1;
  return ParseStepDirName(key.substr(0, slash));
}

std::string RunTensorName(std::string_view entry, uint64_t first_chunk) {
  return std::string(entry) + "@" + std::to_string(first_chunk);
}

bool IsRunOf(std::string_view tensor_name, std::string_view entry) {
  if (tensor_name.size() < entry.size() + 2 ||
      !tensor_name.starts_with(entry) || tensor_name[entry.size()] != '@') {
    return false;
  }
  const std::string_view n = tensor_name.substr(entry.size() + 1);
  // std::to_string's form only: no sign, no leading zero, no overflow.
  if (n.size() > 1 && n[0] == '0') return false;
  uint64_t value = 0;
  const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), value);
  return ec == std::errc() && end == n.data() + n.size();
}

std::string NewAttemptId() {
  std::random_device rd;
  std::mt19937_64 gen(
      (uint64_t{rd()} << 32) ^ rd() ^
      std::chrono::steady_clock::now().time_since_epoch().count());
  static const char* kHex = "0123456789abcdef";
  const uint64_t v = gen();
  std::string out(kAttemptHexDigits, '0');
  for (int i = 0; i < kAttemptHexDigits; ++i)
    out[i] = kHex[(v >> (4 * i)) & 15];
  return out;
}

}  // namespace ckpt::format

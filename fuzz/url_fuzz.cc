// libFuzzer target: hostile root URLs and keys. ParseUrl, the s3:// bucket
// and configuration checks, and the key and entry-name validators must
// return a value or InvalidArgument, never crash; an accepted key never
// climbs out of its root.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ckpt/storage.h"
#include "storage/s3/s3_client.h"
#include "util/names.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto url = ckpt::ParseUrl(text);
  if (url.ok() && url->scheme == "s3") {
    (void)ckpt::s3::ValidateBucketName(url->host, url->url);
    (void)ckpt::s3::ResolveS3Config(
        *url, ckpt::S3Options{},
        [](const char*) -> const char* { return nullptr; });
  }
  if (ckpt::ValidateKey(text).ok()) {
    if (text.empty() || text.front() == '/' ||
        text.find('\0') != std::string_view::npos) {
      std::abort();
    }
    size_t start = 0;
    while (start <= text.size()) {
      size_t end = text.find('/', start);
      if (end == std::string_view::npos) end = text.size();
      const std::string_view part = text.substr(start, end - start);
      if (part.empty() || part == "." || part == "..") std::abort();
      start = end + 1;
    }
  }
  (void)ckpt::ValidateEntryName(text);
  return 0;
}

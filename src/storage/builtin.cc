#include "ckpt/storage.h"
#include "storage/file/file_storage.h"
#include "storage/memory/memory_storage.h"
#include "storage/s3/s3_storage.h"

namespace ckpt {

void RegisterBuiltinBackends(StorageRegistry& registry) {
  registry.Register("mem", OpenMemoryStorage);
  registry.Register("file", OpenFileStorage);
  registry.Register("s3",
                    [](const ParsedUrl& url, const StorageOptions& options) {
                      return OpenS3Storage(url, options);
                    });
}

}  // namespace ckpt

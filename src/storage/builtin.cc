#include "ckpt/storage.h"
#include "storage/file/file_storage.h"
#include "storage/memory/memory_storage.h"

namespace ckpt {

void RegisterBuiltinBackends(StorageRegistry& registry) {
  registry.Register("mem", OpenMemoryStorage);
  registry.Register("file", OpenFileStorage);
}

}  // namespace ckpt

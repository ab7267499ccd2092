#include "testing/backends.h"

#include <unistd.h>

#include <atomic>
#include <stdexcept>

#include "storage/memory/memory_storage.h"
#include "testing/moto_s3.h"
#include "testing/rgw.h"

namespace ckpt::testing {

std::string BackendName(Backend backend) {
  switch (backend) {
    case Backend::kMemory:
      return "Memory";
    case Backend::kFile:
      return "File";
    case Backend::kS3:
      return "S3";
    case Backend::kRgw:
      return "Rgw";
  }
  return "Backend" + std::to_string(static_cast<int>(backend));
}

void PrintTo(Backend backend, std::ostream* os) { *os << BackendName(backend); }

std::string BackendTestName(const ::testing::TestParamInfo<Backend>& info) {
  return BackendName(info.param);
}

TestRoot::TestRoot(Backend backend, std::string_view name,
                   const std::filesystem::path& file_parent)
    : backend_(backend) {
  switch (backend) {
    case Backend::kMemory: {
      static std::atomic<int> counter{0};
      memory_name_ = std::string(name) + "-" + std::to_string(::getpid()) +
                     "-" + std::to_string(counter.fetch_add(1));
      url_ = "mem://" + memory_name_;
      break;
    }
    case Backend::kFile:
      dir_.emplace(name, file_parent);
      url_ = dir_->url();
      break;
    case Backend::kS3:
      UseSharedServer(MotoS3::Shared(), "S3", name);
      break;
    case Backend::kRgw:
      UseSharedServer(Rgw::Shared(), "radosgw", name);
      break;
  }
}

template <typename Server>
void TestRoot::UseSharedServer(Result<Server*> server, const char* what,
                               std::string_view name) {
  if (!server.ok()) {
    throw std::runtime_error(std::string("no ") + what +
                             " test server: " + server.status().ToString());
  }
  (*server)->ExportEnvironment();
  options_ = (*server)->MakeStorageOptions();
  url_ = (*server)->NewRoot(name);
}

TestRoot::~TestRoot() {
  if (!memory_name_.empty()) DropMemoryStore(memory_name_);
}

StorageOptions TestRoot::storage_options(bool create) const {
  StorageOptions options = options_;
  options.create = create;
  return options;
}

Result<std::unique_ptr<Storage>> TestRoot::Open(bool create) const {
  return OpenStorage(url_, storage_options(create));
}

}  // namespace ckpt::testing

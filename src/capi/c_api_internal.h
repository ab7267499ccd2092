// What the C API's handles hold, and the helpers its functions share
// (include/ckpt/c.h is the contract).
#pragma once

#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include "ckpt/c.h"
#include "ckpt/catalog.h"
#include "ckpt/checkpoint_manager.h"
#include "ckpt/communicator.h"
#include "ckpt/state.h"
#include "ckpt/status.h"

struct ckpt_options_t {
  ckpt::Options options;
  std::string catalog_url;  // opened by ckpt_manager_open; "" none
  bool catalog_required = false;
  std::shared_ptr<ckpt::Communicator> communicator;
};

struct ckpt_state_t {
  ckpt::State state;
};

struct ckpt_communicator_t {
  std::shared_ptr<ckpt::Communicator> comm;
};

struct ckpt_catalog_t {
  std::shared_ptr<ckpt::Catalog> catalog;
  std::string url;
};

struct ckpt_save_options_t {
  ckpt::SaveOptions options;
};

struct ckpt_save_t {
  ckpt::SaveHandle handle;
};

struct ckpt_manager_t {
  std::shared_ptr<ckpt::Communicator> comm;  // outlives manager
  std::unique_ptr<ckpt::CheckpointManager> manager;
  std::string url;
};

namespace ckpt::capi {

// A malloc'd copy of `s`, for the caller to free with ckpt_free.
inline char* CopyOut(const std::string& s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (p != nullptr) std::memcpy(p, s.data(), s.size() + 1);
  return p;
}

// Returns `status`'s code, and its message through errptr when it failed.
inline int Report(const Status& status, char** errptr) {
  if (status.ok()) return CKPT_OK;
  if (errptr != nullptr) {
    std::free(*errptr);  // leveldb's convention: a message left from before
    *errptr = CopyOut(status.message());
  }
  return static_cast<int>(status.code());
}

inline void SetOut(char** out, const std::string& text) {
  if (out != nullptr) *out = CopyOut(text);
}

// Runs `f` (returning Status) so that no C++ exception crosses the boundary:
// std::bad_alloc and anything else become an error code.
template <typename F>
int Guard(char** errptr, F&& f) {
  try {
    return Report(f(), errptr);
  } catch (const std::bad_alloc&) {
    return Report(UnavailableError("out of memory"), errptr);
  } catch (const std::exception& e) {
    return Report(
        InvalidArgumentError(std::string("internal error: ") + e.what()),
        errptr);
  }
}

Status NullArgument(const char* function, const char* what);

}  // namespace ckpt::capi

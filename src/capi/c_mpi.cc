// libckpt_mpi.so: MPI_COMM_WORLD as a C API communicator
// (include/ckpt/c_mpi.h). It holds its own copy of the MPI communicator and
// hands libckpt.so a table of C functions over it, so that no C++ object
// crosses from one shared library to the other.
#include "ckpt/c_mpi.h"

#include <mpi.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "ckpt/mpi_communicator.h"

namespace {

// True when this library called MPI_Init_thread, so that it (and not, say,
// mpi4py, which finalizes what it initialized) finalizes MPI.
bool initialized_mpi = false;

ckpt::Communicator* Comm(void* ctx) {
  return static_cast<ckpt::Communicator*>(ctx);
}

int Fail(const ckpt::Status& s, char* errbuf, size_t errlen) {
  if (errlen > 0) {
    std::strncpy(errbuf, s.message().c_str(), errlen - 1);
    errbuf[errlen - 1] = '\0';
  }
  return static_cast<int>(s.code());
}

const ckpt_communicator_ops_t kOps = {
    .rank = [](void* ctx) -> int { return Comm(ctx)->rank(); },
    .size = [](void* ctx) -> int { return Comm(ctx)->size(); },
    .host_name = [](void* ctx, char* buf, size_t len) -> int {
      const std::string name = Comm(ctx)->host_name();
      if (len == 0 || name.size() >= len) return CKPT_INVALID_ARGUMENT;
      std::memcpy(buf, name.c_str(), name.size() + 1);
      return CKPT_OK;
    },
    .barrier = [](void* ctx, char* errbuf, size_t errlen) -> int {
      ckpt::Status s = Comm(ctx)->Barrier();
      return s.ok() ? CKPT_OK : Fail(s, errbuf, errlen);
    },
    .all_gather = [](void* ctx, const void* mine, size_t size,
                     ckpt_bytes_list_t* out, char* errbuf,
                     size_t errlen) -> int {
      auto r = Comm(ctx)->AllGather(
          std::string_view(static_cast<const char*>(mine), size));
      if (!r.ok()) return Fail(r.status(), errbuf, errlen);
      for (const std::string& part : *r) {
        ckpt_bytes_list_push(out, part.data(), part.size());
      }
      return CKPT_OK;
    },
    .broadcast = [](void* ctx, const void* data, size_t size, int root,
                    ckpt_bytes_list_t* out, char* errbuf,
                    size_t errlen) -> int {
      auto r = Comm(ctx)->Broadcast(
          std::string_view(static_cast<const char*>(data), size), root);
      if (!r.ok()) return Fail(r.status(), errbuf, errlen);
      ckpt_bytes_list_push(out, r->data(), r->size());
      return CKPT_OK;
    },
    .abort = [](void* ctx,
                const char* why) { Comm(ctx)->Abort(ckpt::AbortedError(why)); },
    .destroy = [](void* ctx) { delete Comm(ctx); },
};

int SetError(char** errptr, int code, const std::string& message) {
  if (errptr == nullptr) return code;
  std::free(*errptr);
  *errptr = static_cast<char*>(std::malloc(message.size() + 1));
  if (*errptr != nullptr) {
    std::memcpy(*errptr, message.c_str(), message.size() + 1);
  }
  return code;
}

}  // namespace

extern "C" {

int ckpt_mpi_communicator_create(ckpt_communicator_t** out, char** errptr) {
  return ckpt_mpi_communicator_create_with_timeout(0, out, errptr);
}

int ckpt_mpi_communicator_create_with_timeout(double timeout_seconds,
                                              ckpt_communicator_t** out,
                                              char** errptr) {
  if (out == nullptr) {
    return SetError(errptr, CKPT_INVALID_ARGUMENT,
                    "ckpt_mpi_communicator_create: out is NULL");
  }
  if (!(timeout_seconds >= 0) || std::isinf(timeout_seconds)) {
    return SetError(errptr, CKPT_INVALID_ARGUMENT,
                    "ckpt_mpi_communicator_create: timeout_seconds " +
                        std::to_string(timeout_seconds) +
                        " is not a number of seconds >= 0");
  }
  int ready = 0;
  MPI_Initialized(&ready);
  if (!ready) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) {
      return SetError(
          errptr, CKPT_FAILED_PRECONDITION,
          "ckpt_mpi_communicator_create: MPI has already been finalized");
    }
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) !=
        MPI_SUCCESS) {
      return SetError(errptr, CKPT_UNAVAILABLE,
                      "ckpt_mpi_communicator_create: MPI_Init_thread failed");
    }
    initialized_mpi = true;
  }
  std::unique_ptr<ckpt::Communicator> comm;
  try {
    comm = ckpt::NewMpiCommunicator(MPI_COMM_WORLD,
                                    {.timeout_seconds = timeout_seconds});
  } catch (...) {
    return SetError(errptr, CKPT_UNAVAILABLE,
                    "ckpt_mpi_communicator_create: out of memory");
  }
  *out = ckpt_communicator_create(&kOps, comm.get());
  if (*out == nullptr) {
    return SetError(errptr, CKPT_UNAVAILABLE,
                    "ckpt_mpi_communicator_create: out of memory");
  }
  comm.release();  // owned by `*out` now (kOps.destroy)
  return CKPT_OK;
}

void ckpt_mpi_finalize(void) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (initialized_mpi && !finalized) MPI_Finalize();
}

}  // extern "C"

// The C API's catalog and communicators (include/ckpt/c.h).
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "c_api_internal.h"
#include "capi/records.h"
#include "ckpt/catalog_sync.h"

using ckpt::capi::Guard;
using ckpt::capi::NullArgument;
using ckpt::capi::SetOut;
using ckpt::records::Dump;

struct ckpt_bytes_list_t {
  std::vector<std::string> items;
};

namespace {

// A Communicator over a table of C functions: how a communicator written
// outside this library (libckpt_mpi.so's, or one in Python) serves a
// manager.
class TableCommunicator final : public ckpt::Communicator {
 public:
  TableCommunicator(const ckpt_communicator_ops_t& ops, void* ctx)
      : ops_(ops), ctx_(ctx) {}
  ~TableCommunicator() override {
    if (ops_.destroy != nullptr) ops_.destroy(ctx_);
  }

  int rank() const override { return ops_.rank(ctx_); }
  int size() const override { return ops_.size(ctx_); }

  std::string host_name() const override {
    if (ops_.host_name == nullptr) return Communicator::host_name();
    char buf[256] = {};
    if (ops_.host_name(ctx_, buf, sizeof buf) != CKPT_OK) {
      return Communicator::host_name();
    }
    buf[sizeof buf - 1] = '\0';
    return buf;
  }

  ckpt::Status Barrier() override {
    char err[512] = {};
    return Check("barrier", ops_.barrier(ctx_, err, sizeof err), err);
  }

  ckpt::Result<std::vector<std::string>> AllGather(
      std::string_view mine) override {
    ckpt_bytes_list_t out;
    char err[512] = {};
    ckpt::Status s = Check(
        "all_gather",
        ops_.all_gather(ctx_, mine.data(), mine.size(), &out, err, sizeof err),
        err);
    if (!s.ok()) return s;
    if (out.items.size() != static_cast<size_t>(size())) {
      return ckpt::AbortedError("communicator all_gather returned " +
                                std::to_string(out.items.size()) +
                                " parts for " + std::to_string(size()) +
                                " ranks");
    }
    return std::move(out.items);
  }

  ckpt::Result<std::string> Broadcast(std::string_view data,
                                      int root) override {
    ckpt_bytes_list_t out;
    char err[512] = {};
    ckpt::Status s = Check("broadcast",
                           ops_.broadcast(ctx_, data.data(), data.size(), root,
                                          &out, err, sizeof err),
                           err);
    if (!s.ok()) return s;
    if (out.items.size() != 1) {
      return ckpt::AbortedError("communicator broadcast returned " +
                                std::to_string(out.items.size()) +
                                " parts, not 1");
    }
    return std::move(out.items[0]);
  }

  ckpt::Result<std::string> SendRecv(std::string_view data, int dest,
                                     int source) override {
    if (send_recv_ == nullptr)
      return Communicator::SendRecv(data, dest, source);
    ckpt_bytes_list_t out;
    char err[512] = {};
    ckpt::Status s = Check("send_recv",
                           send_recv_(ctx_, data.data(), data.size(), dest,
                                      source, &out, err, sizeof err),
                           err);
    if (!s.ok()) return s;
    const size_t want = source < 0 ? 0 : 1;
    if (out.items.size() != want) {
      return ckpt::AbortedError(
          "communicator send_recv returned " +
          std::to_string(out.items.size()) + " messages from source " +
          std::to_string(source) + ", not " + std::to_string(want));
    }
    return source < 0 ? std::string() : std::move(out.items[0]);
  }

  void Abort(ckpt::Status why) override {
    if (ops_.abort != nullptr) ops_.abort(ctx_, why.message().c_str());
  }

  // Set once, before the communicator serves a manager (the C API's
  // contract), so read without a lock.
  void set_send_recv(ckpt_send_recv_fn fn) { send_recv_ = fn; }

 private:
  static ckpt::Status Check(const char* what, int code, char* err) {
    if (code == CKPT_OK) return ckpt::Status();
    err[511] = '\0';
    if (code < CKPT_INVALID_ARGUMENT || code > CKPT_FAILED_PRECONDITION) {
      code = CKPT_ABORTED;
    }
    return ckpt::Status(static_cast<ckpt::ErrorCode>(code),
                        std::string("communicator ") + what + ": " +
                            (err[0] != '\0' ? err : "failed"));
  }

  ckpt_communicator_ops_t ops_;
  void* ctx_;
  ckpt_send_recv_fn send_recv_ = nullptr;
};

std::string CatalogTarget(const char* url) {
  const std::string_view u = url == nullptr ? "" : url;
  return u.empty() || u == "default" ? ckpt::DefaultCatalogUrl()
                                     : std::string(u);
}

template <typename T>
nlohmann::json RowOrNull(const std::optional<T>& row) {
  return row ? ckpt::records::CatalogRowJson(*row) : nlohmann::json(nullptr);
}

}  // namespace

extern "C" {

void ckpt_bytes_list_push(ckpt_bytes_list_t* list, const void* data,
                          size_t size) {
  if (list == nullptr) return;
  try {
    list->items.emplace_back(static_cast<const char*>(data), size);
  } catch (...) {
    // Out of memory: the count check after the callback reports it.
  }
}

ckpt_communicator_t* ckpt_communicator_create(
    const ckpt_communicator_ops_t* ops, void* ctx) {
  if (ops == nullptr || ops->rank == nullptr || ops->size == nullptr ||
      ops->barrier == nullptr || ops->all_gather == nullptr ||
      ops->broadcast == nullptr) {
    return nullptr;
  }
  try {
    return new ckpt_communicator_t{
        std::make_shared<TableCommunicator>(*ops, ctx)};
  } catch (...) {
    return nullptr;
  }
}

void ckpt_communicator_destroy(ckpt_communicator_t* comm) { delete comm; }

int ckpt_communicator_set_send_recv(ckpt_communicator_t* comm,
                                    ckpt_send_recv_fn fn, char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (comm == nullptr) {
      return NullArgument("ckpt_communicator_set_send_recv", "comm");
    }
    auto* table = dynamic_cast<TableCommunicator*>(comm->comm.get());
    if (table == nullptr) {
      return ckpt::InvalidArgumentError(
          "ckpt_communicator_set_send_recv: this communicator is not one of "
          "ckpt_communicator_create's; it sends point to point on its own");
    }
    table->set_send_recv(fn);
    return ckpt::Status();
  });
}

int ckpt_communicator_rank(const ckpt_communicator_t* comm) {
  return comm == nullptr ? 0 : comm->comm->rank();
}

int ckpt_communicator_size(const ckpt_communicator_t* comm) {
  return comm == nullptr ? 1 : comm->comm->size();
}

char* ckpt_communicator_host_name(const ckpt_communicator_t* comm) {
  if (comm == nullptr) return nullptr;
  try {
    return ckpt::capi::CopyOut(comm->comm->host_name());
  } catch (...) {
    return nullptr;
  }
}

int ckpt_communicator_barrier(ckpt_communicator_t* comm, char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (comm == nullptr) {
      return NullArgument("ckpt_communicator_barrier", "the communicator");
    }
    return comm->comm->Barrier();
  });
}

int ckpt_catalog_open(const char* url, ckpt_catalog_t** out, char** errptr) {
  return ckpt_catalog_open_ex(url, 1, out, errptr);
}

int ckpt_catalog_open_ex(const char* url, int create, ckpt_catalog_t** out,
                         char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (out == nullptr || url == nullptr) {
      return NullArgument("ckpt_catalog_open", "url or out");
    }
    auto opened =
        ckpt::OpenCatalog(CatalogTarget(url), {.must_exist = create == 0});
    if (!opened.ok()) return opened.status();
    if (*opened == nullptr) {
      return ckpt::InvalidArgumentError(
          "ckpt_catalog_open: \"none\" names no catalog");
    }
    auto c = std::make_unique<ckpt_catalog_t>();
    c->catalog = std::shared_ptr<ckpt::Catalog>(std::move(*opened));
    c->url = c->catalog->url();
    *out = c.release();
    return ckpt::Status();
  });
}

void ckpt_catalog_close(ckpt_catalog_t* catalog) { delete catalog; }

const char* ckpt_catalog_url(const ckpt_catalog_t* catalog) {
  return catalog == nullptr ? "" : catalog->url.c_str();
}

int ckpt_catalog_jobs(ckpt_catalog_t* catalog, char** json, char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (catalog == nullptr) {
      return NullArgument("ckpt_catalog_jobs", "the catalog");
    }
    auto r = catalog->catalog->Jobs();
    if (!r.ok()) return r.status();
    nlohmann::json out = nlohmann::json::array();
    for (const auto& j : *r) out.push_back(ckpt::records::CatalogJobJson(j));
    SetOut(json, Dump(out));
    return ckpt::Status();
  });
}

int ckpt_catalog_latest(ckpt_catalog_t* catalog, const char* job, char** json,
                        char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (catalog == nullptr || job == nullptr) {
      return NullArgument("ckpt_catalog_latest", "the catalog or job");
    }
    auto ref = ckpt::ResolveCatalogJob(*catalog->catalog, job);
    if (!ref.ok()) return ref.status();
    if (ref->root.empty()) {
      auto r = catalog->catalog->Latest(ref->job_id);
      if (!r.ok()) return r.status();
      SetOut(json, Dump(RowOrNull(*r)));
      return ckpt::Status();
    }
    // Named by its root: the newest there, not under another root.
    auto rows = catalog->catalog->List({.job_id = ref->job_id,
                                        .root = ref->root,
                                        .tier = ckpt::CatalogTier::kDurable,
                                        .limit = 1});
    if (!rows.ok()) return rows.status();
    SetOut(json,
           Dump(rows->empty() ? nlohmann::json(nullptr)
                              : ckpt::records::CatalogRowJson(rows->back())));
    return ckpt::Status();
  });
}

int ckpt_catalog_best(ckpt_catalog_t* catalog, const char* job,
                      const char* metric, int higher_is_better, char** json,
                      char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (catalog == nullptr || job == nullptr || metric == nullptr) {
      return NullArgument("ckpt_catalog_best", "the catalog, job or metric");
    }
    auto ref = ckpt::ResolveCatalogJob(*catalog->catalog, job);
    if (!ref.ok()) return ref.status();
    const ckpt::MetricGoal goal =
        higher_is_better ? ckpt::MetricGoal::kMax : ckpt::MetricGoal::kMin;
    if (ref->root.empty()) {
      auto r = catalog->catalog->Best(ref->job_id, metric, goal);
      if (!r.ok()) return r.status();
      SetOut(json, Dump(RowOrNull(*r)));
      return ckpt::Status();
    }
    auto r = ckpt::RankedRows(*catalog->catalog, *ref, metric, goal);
    if (!r.ok()) return r.status();
    SetOut(json, Dump(r->empty() ? nlohmann::json(nullptr)
                                 : ckpt::records::CatalogRowJson(r->front())));
    return ckpt::Status();
  });
}

int ckpt_catalog_ranked(ckpt_catalog_t* catalog, const char* job,
                        const char* metric, int higher_is_better, char** json,
                        char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (catalog == nullptr || job == nullptr || metric == nullptr) {
      return NullArgument("ckpt_catalog_ranked", "the catalog, job or metric");
    }
    auto ref = ckpt::ResolveCatalogJob(*catalog->catalog, job);
    if (!ref.ok()) return ref.status();
    auto r = ckpt::RankedRows(
        *catalog->catalog, *ref, metric,
        higher_is_better ? ckpt::MetricGoal::kMax : ckpt::MetricGoal::kMin);
    if (!r.ok()) return r.status();
    nlohmann::json out = nlohmann::json::array();
    for (const auto& c : *r) out.push_back(ckpt::records::CatalogRowJson(c));
    SetOut(json, Dump(out));
    return ckpt::Status();
  });
}

int ckpt_catalog_check(const char* job, const char* root, int64_t step,
                       const char* manifest_checksum, char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (job == nullptr || root == nullptr || manifest_checksum == nullptr) {
      return NullArgument("ckpt_catalog_check",
                          "the job, root or manifest checksum");
    }
    ckpt::CatalogCheckpoint row;
    row.job_id = job;
    row.root = root;
    row.step = step;
    row.manifest_checksum = manifest_checksum;
    return ckpt::CheckAgainstStorage(row);
  });
}

int ckpt_catalog_list(ckpt_catalog_t* catalog, const char* job,
                      const char* root, int include_deleted, int64_t limit,
                      char** json, char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (catalog == nullptr) {
      return NullArgument("ckpt_catalog_list", "the catalog");
    }
    ckpt::CatalogFilter filter;
    if (job != nullptr && *job != '\0') {
      auto ref = ckpt::ResolveCatalogJob(*catalog->catalog, job);
      if (!ref.ok()) return ref.status();
      filter.job_id = ref->job_id;
      filter.root = ref->root;
    }
    // A root as the catalog writes it, however it is spelled.
    if (root != nullptr && *root != '\0') {
      filter.root = ckpt::CatalogRootUrl(root);
    }
    if (include_deleted) filter.state.reset();
    filter.limit = limit;
    auto r = catalog->catalog->List(filter);
    if (!r.ok()) return r.status();
    nlohmann::json out = nlohmann::json::array();
    for (const auto& c : *r) out.push_back(ckpt::records::CatalogRowJson(c));
    SetOut(json, Dump(out));
    return ckpt::Status();
  });
}

}  // extern "C"

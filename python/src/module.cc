// ckpt._ckpt: the C++ half of the Python package `ckpt`.
//
// It binds CheckpointManager over flat entry lists (see entries.h); the
// Python half (python/ckpt) turns nested dicts, PyTorch tensors and Python
// scalars into such lists and back. Tensor bytes never pass through Python:
// Save reads the arrays' buffers and Load writes into arrays allocated here
// (or the caller's own, for load_into). The GIL is released while the
// library does I/O.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "async_save.h"
#include "ckpt/checkpoint_manager.h"
#include "cluster.h"
#include "entries.h"
#include "errors.h"

namespace ckpt::python {
namespace {

namespace py = pybind11;

using DirtyRows =
    std::map<std::string, std::vector<std::pair<int64_t, int64_t>>>;

py::str KindName(EntryKind kind) { return py::str(EntryKindName(kind)); }

class Manager {
 public:
  Manager(const std::string& url, Options options,
          std::shared_ptr<Communicator> comm)
      : comm_(std::move(comm)) {
    options.communicator = comm_.get();
    Result<std::unique_ptr<CheckpointManager>> opened =
        [&]() -> Result<std::unique_ptr<CheckpointManager>> {
      py::gil_scoped_release release;
      return CheckpointManager::Open(url, std::move(options));
    }();
    manager_ = ValueOrThrow(std::move(opened));
  }

  SaveResult Save(int64_t step, const py::list& entries,
                  const SaveOptions& options) {
    BorrowedState state = BuildState(entries, /*for_load=*/false);
    Result<SaveResult> result = [&] {
      py::gil_scoped_release release;
      return manager_->Save(step, state.state, options);
    }();
    return ValueOrThrow(std::move(result));
  }

  // Returns once the library has copied the state into its staging memory
  // (or, for a state over the staging budget, saved it): the arrays are
  // the caller's again.
  std::shared_ptr<AsyncSave> SaveAsync(int64_t step, const py::list& entries,
                                       const SaveOptions& options) {
    BorrowedState state = BuildState(entries, /*for_load=*/false);
    SaveHandle handle = [&] {
      py::gil_scoped_release release;
      return manager_->SaveAsync(step, state.state, options);
    }();
    return std::make_shared<AsyncSave>(std::move(handle));
  }

  // (info, [(name, kind, dtype, value)], {names left out}) for the entries
  // of `step`.
  py::tuple Load(std::optional<int64_t> step) {
    const CheckpointDescription desc = Describe(step);
    // Rank-local entries come back when the world size is the one that
    // saved them, each rank its own value; otherwise load_rank_local hands
    // over every rank's.
    const int rank = comm_ ? comm_->rank() : 0;
    const bool same_world = desc.info.world_size == (comm_ ? comm_->size() : 1);
    std::vector<const EntryInfo*> kept;
    py::set omitted;  // rank-local entries that are not this rank's
    for (const EntryInfo& e : desc.entries) {
      if (e.owner < 0 || (same_world && e.owner == rank)) {
        kept.push_back(&e);
      } else {
        omitted.add(py::str(e.name));
      }
    }
    State state;
    std::vector<py::object> values;
    for (const EntryInfo* ep : kept) {
      const EntryInfo& e = *ep;
      switch (e.kind) {
        case EntryKind::kTensor: {
          py::array array = NewArrayFor(e.dtype, e.shape);
          TensorView view{e.dtype, e.shape,
                          static_cast<std::byte*>(array.mutable_data()),
                          /*writable=*/true};
          if (e.owner >= 0) {
            state.AddRankLocalTensor(e.name, std::move(view));
          } else {
            state.AddTensor(e.name, std::move(view));
          }
          values.push_back(std::move(array));
          break;
        }
        case EntryKind::kBlob:
          if (e.owner >= 0) {
            state.AddRankLocalBlob(e.name, std::string());
          } else {
            state.AddBlob(e.name, std::string());
          }
          values.emplace_back();
          break;
        case EntryKind::kMetadata:
          state.AddMetadataJson(e.name, "{}");
          values.emplace_back();
          break;
      }
    }
    const CheckpointInfo info = LoadState(desc.info.step, state, {});
    py::list out;
    for (size_t i = 0; i < kept.size(); ++i) {
      const EntryInfo& e = *kept[i];
      py::object value = e.kind == EntryKind::kTensor
                             ? std::move(values[i])
                             : ValueOf(state.entries()[i]);
      out.append(py::make_tuple(e.name, KindName(e.kind),
                                py::str(DTypeName(e.dtype)), value));
    }
    return py::make_tuple(info, out, omitted);
  }

  // Fills the arrays of `entries` in place from `step`; returns (info,
  // [(name, kind, value)]) for its blobs and metadata.
  py::tuple LoadInto(int64_t step, const py::list& entries, bool strict) {
    BorrowedState state = BuildState(entries, /*for_load=*/true);
    const CheckpointInfo info =
        LoadState(step, state.state, {.strict = strict});
    py::list out;
    for (const Entry& e : state.state.entries()) {
      if (e.kind == EntryKind::kTensor) continue;
      out.append(py::make_tuple(e.name, KindName(e.kind), ValueOf(e)));
    }
    return py::make_tuple(info, out);
  }

  // (info, [(rank, kind, dtype, value)]): every saving rank's value of the
  // rank-local entry `name`.
  py::tuple LoadRankLocal(std::optional<int64_t> step,
                          const std::string& name) {
    Result<LoadedCheckpoint> loaded = [&] {
      py::gil_scoped_release release;
      return manager_->LoadRankLocal(step, name);
    }();
    LoadedCheckpoint l = ValueOrThrow(std::move(loaded));
    py::list out;
    for (const Entry& e : l.state.entries()) {
      py::object value;
      if (e.kind == EntryKind::kTensor) {
        py::array array = NewArrayFor(e.tensor.dtype, e.tensor.shape);
        std::memcpy(array.mutable_data(), e.tensor.data,
                    static_cast<size_t>(e.tensor.ByteSize().value_or(0)));
        value = std::move(array);
      } else {
        value = ValueOf(e);
      }
      out.append(py::make_tuple(std::stoi(e.name), KindName(e.kind),
                                py::str(DTypeName(e.tensor.dtype)), value));
    }
    return py::make_tuple(l.info, out);
  }

  int rank() const { return comm_ ? comm_->rank() : 0; }
  int world_size() const { return comm_ ? comm_->size() : 1; }

  CheckpointDescription Describe(std::optional<int64_t> step) {
    py::gil_scoped_release release;
    return ValueOrThrow(manager_->Describe(step));
  }

  std::optional<int64_t> Latest() {
    py::gil_scoped_release release;
    return ValueOrThrow(manager_->Latest());
  }

  std::vector<CheckpointInfo> List() {
    py::gil_scoped_release release;
    return ValueOrThrow(manager_->List());
  }

  void Delete(int64_t step) {
    py::gil_scoped_release release;
    ThrowIfError(manager_->Delete(step));
  }

  std::string url() { return manager_->storage().url(); }

 private:
  CheckpointInfo LoadState(int64_t step, State& state,
                           const LoadOptions& options) {
    Result<CheckpointInfo> info = [&] {
      py::gil_scoped_release release;
      return manager_->Load(step, state, options);
    }();
    return ValueOrThrow(std::move(info));
  }

  std::shared_ptr<Communicator> comm_;  // outlives manager_
  std::unique_ptr<CheckpointManager> manager_;
};

std::string Repr(const char* type, const std::string& fields) {
  return std::string(type) + "(" + fields + ")";
}

void InitModule(py::module_& m) {
  m.doc() =
      "The C++ half of the ckpt package; use `import ckpt`, not this module.";
  RegisterErrors(m);
  RegisterCatalog(m);
  RegisterCommunicators(m);

  py::class_<CheckpointInfo>(m, "CheckpointInfo",
                             "A committed checkpoint, as `ckpt ls` shows it.")
      .def_readonly("step", &CheckpointInfo::step)
      .def_readonly("epoch", &CheckpointInfo::epoch, "-1 when not given")
      .def_readonly("created_unix_ms", &CheckpointInfo::created_unix_ms)
      .def_readonly("job_id", &CheckpointInfo::job_id)
      .def_readonly("world_size", &CheckpointInfo::world_size)
      .def_readonly("hosts", &CheckpointInfo::hosts)
      .def_readonly("bytes", &CheckpointInfo::bytes,
                    "bytes of the data objects this checkpoint wrote")
      .def_readonly("depends_on", &CheckpointInfo::depends_on)
      .def_readonly("referenced_bytes", &CheckpointInfo::referenced_bytes,
                    "bytes of earlier checkpoints' objects it references")
      .def_readonly("parent", &CheckpointInfo::parent,
                    "the checkpoint an incremental save was compared with; "
                    "-1 for a full save")
      .def_readonly("chain", &CheckpointInfo::chain,
                    "incremental saves in a row that led to it (0: full)")
      .def_readonly("metrics", &CheckpointInfo::metrics)
      .def_readonly("metadata", &CheckpointInfo::metadata)
      .def_readonly("num_entries", &CheckpointInfo::num_entries)
      .def_readonly("incomplete", &CheckpointInfo::incomplete,
                    "empty when every data object is present; else what "
                    "is missing (loads and resumes skip the step)")
      .def("__repr__", [](const CheckpointInfo& i) {
        return Repr("CheckpointInfo",
                    "step=" + std::to_string(i.step) +
                        ", epoch=" + std::to_string(i.epoch) +
                        ", bytes=" + std::to_string(i.bytes) +
                        ", num_entries=" + std::to_string(i.num_entries));
      });

  py::class_<SaveResult>(m, "SaveResult", "What a save did.")
      .def_readonly("skipped", &SaveResult::skipped,
                    "True when min_seconds_between_saves skipped the save")
      .def_readonly("info", &SaveResult::info, "the committed checkpoint")
      .def_readonly("deleted_steps", &SaveResult::deleted_steps,
                    "steps that retention removed after the save")
      .def("__repr__", [](const SaveResult& r) {
        return Repr("SaveResult", std::string("skipped=") +
                                      (r.skipped ? "True" : "False") +
                                      ", step=" + std::to_string(r.info.step));
      });

  py::class_<EntryInfo>(m, "EntryInfo", "One entry of a checkpoint.")
      .def_readonly("name", &EntryInfo::name)
      .def_readonly("owner", &EntryInfo::owner,
                    "the saving rank of a rank-local entry; -1 for the job's")
      .def_property_readonly(
          "kind", [](const EntryInfo& e) { return KindName(e.kind); },
          "'tensor', 'blob' or 'metadata'")
      .def_property_readonly(
          "dtype",
          [](const EntryInfo& e) { return std::string(DTypeName(e.dtype)); },
          "the safetensors dtype name ('F32', 'BF16', ...)")
      .def_readonly("shape", &EntryInfo::shape)
      .def_readonly("bytes", &EntryInfo::bytes)
      .def_readonly("json", &EntryInfo::json, "metadata entries: the JSON")
      .def("__repr__", [](const EntryInfo& e) {
        std::string fields = "name='" + e.name + "', kind='" +
                             std::string(EntryKindName(e.kind)) + "'";
        if (e.kind == EntryKind::kTensor) {
          fields +=
              ", dtype='" + std::string(DTypeName(e.dtype)) +
              "', shape=" + py::repr(py::cast(e.shape)).cast<std::string>();
        }
        return Repr("EntryInfo", fields);
      });

  py::class_<CheckpointDescription>(m, "CheckpointDescription")
      .def_readonly("info", &CheckpointDescription::info)
      .def_readonly("entries", &CheckpointDescription::entries);

  py::class_<AsyncSave, std::shared_ptr<AsyncSave>>(
      m, "AsyncSave",
      "A save running in the background (see CheckpointManager.save_async).")
      .def("wait", &AsyncSave::Wait,
           "Blocks until the save has committed and returns its SaveResult, "
           "or raises its error (every call gives the same outcome).")
      .def("done", &AsyncSave::Done, "True once wait() would not block.")
      .def_property_readonly("step", &AsyncSave::step);

  py::class_<Manager>(m, "Manager")
      .def(py::init([](const std::string& url, int keep_last,
                       int64_t keep_every_n_steps, int64_t keep_every_seconds,
                       int keep_best, std::string best_metric,
                       bool best_higher_is_better,
                       double min_seconds_between_saves, std::string job_id,
                       bool gc_after_save, int64_t gc_grace_seconds,
                       bool create, uint64_t chunk_size,
                       uint64_t async_staging_bytes, int full_every,
                       int max_chain, double min_referenced_fraction,
                       const py::object& catalog, bool catalog_required,
                       double lease_seconds, double lease_wait_seconds,
                       bool break_lease, const py::object& communicator) {
             Options o;
             o.lease_seconds = lease_seconds;
             o.lease_wait_seconds = lease_wait_seconds;
             o.break_lease = break_lease;
             o.job_id = std::move(job_id);
             o.retention.keep_last = keep_last;
             o.retention.keep_every_n_steps = keep_every_n_steps;
             o.retention.keep_every_seconds = keep_every_seconds;
             o.retention.keep_best = keep_best;
             o.retention.best_metric = std::move(best_metric);
             o.retention.best_higher_is_better = best_higher_is_better;
             o.min_seconds_between_saves = min_seconds_between_saves;
             o.gc_after_save = gc_after_save;
             o.gc_grace_seconds = gc_grace_seconds;
             o.create = create;
             o.chunk_size = chunk_size;
             o.async_staging_bytes = async_staging_bytes;
             o.incremental.full_every = full_every;
             o.incremental.max_chain = max_chain;
             o.incremental.min_referenced_fraction = min_referenced_fraction;
             if (py::isinstance<PyCatalog>(catalog)) {
               o.catalog = catalog.cast<const PyCatalog&>().catalog;
             } else if (!catalog.is_none()) {
               o.catalog = OpenJobCatalogOrThrow(catalog.cast<std::string>(),
                                                 catalog_required);
             }
             std::shared_ptr<Communicator> comm;
             if (!communicator.is_none()) {
               comm = communicator.cast<const PyCommunicator&>().comm;
             }
             return std::make_unique<Manager>(url, std::move(o),
                                              std::move(comm));
           }),
           py::arg("url"), py::kw_only(), py::arg("keep_last"),
           py::arg("keep_every_n_steps"), py::arg("keep_every_seconds"),
           py::arg("keep_best"), py::arg("best_metric"),
           py::arg("best_higher_is_better"),
           py::arg("min_seconds_between_saves"), py::arg("job_id"),
           py::arg("gc_after_save"), py::arg("gc_grace_seconds"),
           py::arg("create"), py::arg("chunk_size"),
           py::arg("async_staging_bytes"), py::arg("full_every"),
           py::arg("max_chain"), py::arg("min_referenced_fraction"),
           py::arg("catalog"), py::arg("catalog_required"),
           py::arg("lease_seconds"), py::arg("lease_wait_seconds"),
           py::arg("break_lease"), py::arg("communicator"))
      .def(
          "save",
          [](Manager& self, int64_t step, const py::list& entries,
             int64_t epoch, std::map<std::string, double> metrics,
             std::map<std::string, std::string> metadata, bool incremental,
             DirtyRows dirty_rows) {
            return self.Save(step, entries,
                             {epoch, std::move(metrics), std::move(metadata),
                              incremental, std::move(dirty_rows)});
          },
          py::arg("step"), py::arg("entries"), py::arg("epoch"),
          py::arg("metrics"), py::arg("metadata"), py::arg("incremental"),
          py::arg("dirty_rows"))
      .def(
          "save_async",
          [](Manager& self, int64_t step, const py::list& entries,
             int64_t epoch, std::map<std::string, double> metrics,
             std::map<std::string, std::string> metadata, bool incremental,
             DirtyRows dirty_rows) {
            return self.SaveAsync(
                step, entries,
                {epoch, std::move(metrics), std::move(metadata), incremental,
                 std::move(dirty_rows)});
          },
          py::arg("step"), py::arg("entries"), py::arg("epoch"),
          py::arg("metrics"), py::arg("metadata"), py::arg("incremental"),
          py::arg("dirty_rows"))
      .def("load", &Manager::Load, py::arg("step"))
      .def("load_into", &Manager::LoadInto, py::arg("step"), py::arg("entries"),
           py::arg("strict"))
      .def("load_rank_local", &Manager::LoadRankLocal, py::arg("step"),
           py::arg("name"))
      .def_property_readonly("rank", &Manager::rank)
      .def_property_readonly("world_size", &Manager::world_size)
      .def("describe", &Manager::Describe, py::arg("step"))
      .def("latest", &Manager::Latest)
      .def("list", &Manager::List)
      .def("delete", &Manager::Delete, py::arg("step"))
      .def_property_readonly("url", &Manager::url);

  // Lets the tests check that every error code maps to its class.
  m.def("_raise_status", [](const std::string& code, const std::string& msg) {
    for (int c = 1; c <= static_cast<int>(ErrorCode::kFailedPrecondition);
         ++c) {
      if (ErrorCodeName(static_cast<ErrorCode>(c)) == code) {
        throw StatusError(Status(static_cast<ErrorCode>(c), msg));
      }
    }
    throw StatusError(InvalidArgumentError("unknown error code " + code));
  });
}

}  // namespace
}  // namespace ckpt::python

PYBIND11_MODULE(_ckpt, m) { ckpt::python::InitModule(m); }

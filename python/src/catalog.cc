#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "cluster.h"
#include "errors.h"

namespace ckpt::python {

namespace py = pybind11;

namespace {

std::string CatalogTarget(const std::string& url) {
  return url.empty() || url == "default" ? DefaultCatalogUrl() : url;
}

}  // namespace

std::shared_ptr<Catalog> OpenCatalogOrThrow(const std::string& url) {
  Result<std::unique_ptr<Catalog>> opened = [&] {
    py::gil_scoped_release release;
    return OpenCatalog(CatalogTarget(url));
  }();
  return std::shared_ptr<Catalog>(ValueOrThrow(std::move(opened)));
}

std::shared_ptr<Catalog> OpenJobCatalogOrThrow(const std::string& url,
                                               bool required) {
  Result<std::unique_ptr<Catalog>> opened = [&] {
    py::gil_scoped_release release;
    return OpenCatalogForJob(CatalogTarget(url), required);
  }();
  return std::shared_ptr<Catalog>(ValueOrThrow(std::move(opened)));
}

namespace {

template <typename F>
auto Unlocked(F&& f) {
  py::gil_scoped_release release;
  return ValueOrThrow(f());
}

}  // namespace

void RegisterCatalog(py::module_& m) {
  py::class_<CatalogCheckpoint>(m, "CatalogCheckpoint",
                                "One checkpoint's row in the catalog.")
      .def_readonly("job_id", &CatalogCheckpoint::job_id)
      .def_readonly("root", &CatalogCheckpoint::root, "the root's URL")
      .def_readonly("step", &CatalogCheckpoint::step)
      .def_readonly("epoch", &CatalogCheckpoint::epoch, "-1 when not given")
      .def_readonly("scheme", &CatalogCheckpoint::scheme)
      .def_readonly("world_size", &CatalogCheckpoint::world_size)
      .def_readonly("hosts", &CatalogCheckpoint::hosts)
      .def_readonly("bytes", &CatalogCheckpoint::bytes)
      .def_readonly("manifest_checksum", &CatalogCheckpoint::manifest_checksum)
      .def_readonly("metrics", &CatalogCheckpoint::metrics)
      .def_readonly("created_unix_ms", &CatalogCheckpoint::created_unix_ms)
      .def_property_readonly(
          "state",
          [](const CatalogCheckpoint& c) {
            return std::string(CheckpointStateName(c.state));
          },
          "'committed' or 'deleted'")
      .def("__repr__", [](const CatalogCheckpoint& c) {
        return "CatalogCheckpoint(job_id=" +
               py::repr(py::str(c.job_id)).cast<std::string>() +
               ", step=" + std::to_string(c.step) +
               ", epoch=" + std::to_string(c.epoch) + ", state='" +
               std::string(CheckpointStateName(c.state)) + "')";
      });

  py::class_<CatalogJob>(m, "CatalogJob", "A job the catalog has seen.")
      .def_readonly("job_id", &CatalogJob::job_id)
      .def_readonly("root", &CatalogJob::root)
      .def_readonly("first_seen_unix_ms", &CatalogJob::first_seen_unix_ms)
      .def_readonly("last_seen_unix_ms", &CatalogJob::last_seen_unix_ms)
      .def_readonly("committed", &CatalogJob::committed)
      .def_readonly("latest_step", &CatalogJob::latest_step);

  py::class_<PyCatalog>(
      m, "Catalog",
      "The catalog of committed checkpoints: a SQLite file (sqlite:///path "
      "or a plain path) or a postgresql:// URL; \"\" or \"default\": "
      "$CKPT_CATALOG, else ~/.local/state/ckpt/catalog.sqlite. Pass "
      "it to "
      "CheckpointManager(catalog=...) to record saves, or ask it what to "
      "resume from.")
      .def(py::init([](const std::string& url) {
             return PyCatalog{OpenCatalogOrThrow(url)};
           }),
           py::arg("url") = "")
      .def_property_readonly(
          "url", [](const PyCatalog& c) { return c.catalog->url(); })
      .def(
          "jobs",
          [](PyCatalog& c) {
            return Unlocked([&] { return c.catalog->Jobs(); });
          },
          "Every job, by id (CatalogJob).")
      .def(
          "latest",
          [](PyCatalog& c, const std::string& job) {
            return Unlocked([&] { return c.catalog->Latest(job); });
          },
          "The job's newest committed checkpoint (CatalogCheckpoint), or "
          "None.",
          py::arg("job"))
      .def(
          "best",
          [](PyCatalog& c, const std::string& job, const std::string& metric,
             bool higher_is_better) {
            return Unlocked([&] {
              return c.catalog->Best(
                  job, metric,
                  higher_is_better ? MetricGoal::kMax : MetricGoal::kMin);
            });
          },
          "The job's committed checkpoint with the lowest (or, with "
          "higher_is_better, highest) value of `metric`, or None.",
          py::arg("job"), py::arg("metric"),
          py::arg("higher_is_better") = false)
      .def(
          "list",
          [](PyCatalog& c, const std::string& job, const std::string& root,
             bool include_deleted, int64_t limit) {
            CatalogFilter filter;
            filter.job_id = job;
            filter.root = root;
            if (include_deleted) filter.state.reset();
            filter.limit = limit;
            return Unlocked([&] { return c.catalog->List(filter); });
          },
          "Rows (CatalogCheckpoint), oldest step first: of one job and/or "
          "root (\"\": every one), committed only unless include_deleted, "
          "at most `limit` newest (0: all).",
          py::arg("job") = "", py::kw_only(), py::arg("root") = "",
          py::arg("include_deleted") = false, py::arg("limit") = 0);
}

}  // namespace ckpt::python

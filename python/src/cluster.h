// The parts of the Python module that reach beyond one root: the catalog
// (ckpt.Catalog) and the communicator of a many-rank job
// (ckpt.mpi_communicator()).
#pragma once

#include <pybind11/pybind11.h>

#include <memory>

#include "ckpt/catalog.h"
#include "ckpt/communicator.h"

namespace ckpt::python {

// What ckpt.Communicator holds. Managers keep a reference, so the
// communicator outlives every manager that uses it.
struct PyCommunicator {
  std::shared_ptr<Communicator> comm;
};

// What ckpt.Catalog holds: one catalog may serve many managers.
struct PyCatalog {
  std::shared_ptr<Catalog> catalog;
};

// Opens the catalog at `url` ("" or "default": DefaultCatalogUrl()).
std::shared_ptr<Catalog> OpenCatalogOrThrow(const std::string& url);
// The same for a manager's catalog= (OpenCatalogForJob): one that cannot be
// opened is a warning and null, unless `required`.
std::shared_ptr<Catalog> OpenJobCatalogOrThrow(const std::string& url,
                                               bool required);

void RegisterCatalog(pybind11::module_& m);
void RegisterCommunicators(pybind11::module_& m);

}  // namespace ckpt::python

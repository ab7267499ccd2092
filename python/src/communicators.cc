#include <pybind11/pybind11.h>

#include "cluster.h"
#include "errors.h"

#ifdef CKPT_PYTHON_MPI
#include <mpi.h>

#include "ckpt/mpi_communicator.h"
#endif

namespace ckpt::python {

namespace py = pybind11;

#ifdef CKPT_PYTHON_MPI
namespace {

// True when this module called MPI_Init_thread, so that it (and not, say,
// mpi4py, which finalizes what it initialized) finalizes MPI at exit.
bool initialized_mpi = false;

PyCommunicator MpiWorld() {
  int ready = 0;
  MPI_Initialized(&ready);
  if (!ready) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) {
      throw StatusError(FailedPreconditionError(
          "ckpt.mpi_communicator(): MPI has already been finalized"));
    }
    // Serialized: an asynchronous save runs its collectives on a thread of
    // its own, one save at a time.
    int provided = 0;
    const int rc =
        MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) {
      throw StatusError(
          UnavailableError("ckpt.mpi_communicator(): MPI_Init_thread failed"));
    }
    initialized_mpi = true;
  }
  return PyCommunicator{std::shared_ptr<Communicator>(NewMpiCommunicator())};
}

void FinalizeMpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (initialized_mpi && !finalized) MPI_Finalize();
}

}  // namespace
#endif

void RegisterCommunicators(py::module_& m) {
  py::class_<PyCommunicator>(
      m, "Communicator",
      "The ranks of a job; pass it to CheckpointManager(communicator=...).")
      .def_property_readonly(
          "rank", [](const PyCommunicator& c) { return c.comm->rank(); })
      .def_property_readonly(
          "size", [](const PyCommunicator& c) { return c.comm->size(); })
      .def_property_readonly(
          "host_name",
          [](const PyCommunicator& c) { return c.comm->host_name(); })
      .def("barrier", [](PyCommunicator& c) {
        py::gil_scoped_release release;
        ThrowIfError(c.comm->Barrier());
      });
#ifdef CKPT_PYTHON_MPI
  m.attr("HAS_MPI") = true;
  m.def("mpi_communicator", &MpiWorld);
  m.def("_finalize_mpi", &FinalizeMpi);
#else
  m.attr("HAS_MPI") = false;
#endif
}

}  // namespace ckpt::python

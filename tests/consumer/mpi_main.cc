// Links the MPI communicator (ckpt::ckpt_mpi): a save on every rank of
// MPI_COMM_WORLD, under mpirun.
#include <mpi.h>

#include "ckpt/ckpt.h"
#include "ckpt/mpi_communicator.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int failed = 0;
  {
    auto comm = ckpt::NewMpiCommunicator(MPI_COMM_WORLD);
    std::vector<float> weights(1024, 0.5f);
    ckpt::State state;
    state.AddTensor("model.weights", ckpt::View(weights));
    auto mgr = ckpt::CheckpointManager::Open(
        argc > 1 ? argv[1] : "run42",
        {.create_root = true, .communicator = comm.get()});
    failed = !mgr.ok() || !(*mgr)->Save(1, state).ok();
  }
  MPI_Finalize();
  return failed;
}

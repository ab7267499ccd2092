// `ckpt import-dcp` and `ckpt export --format dcp`: checkpoints in the file
// format of PyTorch's distributed checkpoint (DCP) in and out.
//
// DCP's format is PyTorch's: a pickled `.metadata` and tensors in
// torch.save archives. Reading and writing it takes PyTorch, so these
// commands parse their arguments here (usage errors and --help as every
// command's) and then become the ckpt Python package's converter,
// python/ckpt/_dcp_files.py, which reads `.metadata` with an unpickler that
// admits DCP's metadata classes only. The Python is $CKPT_PYTHON (the
// wheel's `ckpt` command sets it to its own interpreter), else python3.

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "common.h"
#include "util/names.h"

namespace ckpt::cli {
namespace {

// Run by the Python: a missing package or PyTorch is named, with what to do.
constexpr const char* kBootstrap =
    "import sys\n"
    "try:\n"
    "    from ckpt import _dcp_files\n"
    "except ImportError as e:\n"
    "    sys.exit(f'ckpt {sys.argv[1]}: {e}: DCP checkpoints are read and '\n"
    "             f'written by the ckpt Python package with PyTorch, which '\n"
    "             f'{sys.executable} cannot import (install both there, or '\n"
    "             f'set CKPT_PYTHON to a Python that has them)')\n"
    "sys.exit(_dcp_files.main(sys.argv[1:]))\n";

struct ImportDcpArgs {
  std::string dir;
  std::string root;
  int64_t step = 0;
  std::optional<int64_t> epoch;
  std::string catalog;
  bool json = false;
};

}  // namespace

Status RunDcpConverter(const std::vector<std::string>& args) {
  const char* env = std::getenv("CKPT_PYTHON");
  const std::string python = env != nullptr && *env != '\0' ? env : "python3";
  std::vector<std::string> all = {python, "-c", kBootstrap};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  execvp(argv[0], argv.data());
  const int err = errno;
  return UnavailableError(
      "cannot run " + Quote(python) + " (" + std::strerror(err) +
      "): DCP checkpoints are read and written by the ckpt Python package "
      "with PyTorch; set CKPT_PYTHON to a Python that has both");
}

void AddImportDcpCommand(CLI::App& app, Command& selected) {
  auto args = std::make_shared<ImportDcpArgs>();
  CLI::App* sub = AddSubcommand(
      app, "import-dcp", "Make a checkpoint from one written by PyTorch's DCP.",
      "Read DIR, a checkpoint written by torch.distributed.checkpoint's "
      "FileSystemWriter at any world size (DTensor shards included), and "
      "save it as checkpoint --step N under ROOT, creating ROOT if needed: "
      "each tensor whole under DCP's name, each non-tensor value as the "
      "blob DCP stored. DIR/.metadata is a pickle: it is read by an "
      "unpickler that admits only DCP's metadata classes, so a hostile one "
      "is refused and nothing in it runs. Every chunk is read and checked "
      "before anything is written; a bad DIR leaves ROOT as it was. Needs "
      "the ckpt Python package and PyTorch ($CKPT_PYTHON, else python3).",
      "  ckpt import-dcp /data/dcp/step_1200 /data/run42 --step 1200\n"
      "  ckpt import-dcp ./checkpoint s3://ckpt/run42 --step 0 --json\n");
  sub->add_option("DIR", args->dir, "the DCP checkpoint directory")->required();
  AddRootArg(*sub, args->root);
  sub->add_option("--step", args->step, "the step to save it as")
      ->required()
      ->check(NonNegativeInteger(INT64_MAX));
  sub->add_option("--epoch", args->epoch, "the epoch to record")
      ->check(NonNegativeInteger(INT64_MAX));
  AddCatalogOption(*sub, args->catalog);
  AddJsonFlag(*sub, args->json);
  sub->callback([args, &selected] {
    selected = {
        "import-dcp", [args] {
          std::vector<std::string> a = {"import-dcp", args->dir, args->root,
                                        "--step", std::to_string(args->step)};
          if (args->epoch) {
            a.insert(a.end(), {"--epoch", std::to_string(*args->epoch)});
          }
          // The default catalog records the import, as `ckpt import`'s.
          a.insert(a.end(),
                   {"--catalog", args->catalog.empty() ? std::string("default")
                                                       : args->catalog});
          if (args->json) a.push_back("--json");
          return RunDcpConverter(a);
        }};
  });
}

}  // namespace ckpt::cli

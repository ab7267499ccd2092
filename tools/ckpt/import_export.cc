// `ckpt import` and `ckpt export`: a checkpoint to and from one safetensors
// file, the format most tools read.
//
// An exported file carries what safetensors has no place for in its
// `__metadata__` string map, so that import restores the same entries:
//   "ckpt.blobs"            a JSON array naming the U8 1-d tensors that are
//                           blobs;
//   "ckpt.metadata.NAME"    the JSON text of metadata entry NAME;
//   "ckpt.epoch"            the step's epoch, where it has one;
//   "ckpt.metrics"          a JSON object of the step's metrics, where it
//                           has any (`ckpt catalog best` ranks by them);
// every other key is the checkpoint's user metadata. Import takes the epoch
// and metrics back unless told otherwise, so that a step moved through a
// file keeps what it was saved with.

#include <fcntl.h>
#include <fmt/core.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "ckpt/checkpoint_manager.h"
#include "commands.h"
#include "common.h"
#include "format/json.h"
#include "format/safetensors.h"
#include "util/names.h"
#include "util/progress.h"

namespace ckpt::cli {
namespace {

constexpr std::string_view kBlobsKey = "ckpt.blobs";
constexpr std::string_view kMetadataKeyPrefix = "ckpt.metadata.";
constexpr std::string_view kEpochKey = "ckpt.epoch";
constexpr std::string_view kMetricsKey = "ckpt.metrics";

// Keys of __metadata__ that ckpt writes for itself, not user metadata.
bool ReservedKey(std::string_view key) {
  return key == kBlobsKey || key == kEpochKey || key == kMetricsKey ||
         key.starts_with(kMetadataKeyPrefix);
}

// The epoch an exported file records: a decimal number of at most 18 digits.
Result<int64_t> ParseEpoch(const std::string& text, const std::string& what) {
  const bool digits = !text.empty() && text.size() <= 18 &&
                      std::all_of(text.begin(), text.end(),
                                  [](char c) { return c >= '0' && c <= '9'; });
  if (!digits) {
    return DataLossError(what + ": __metadata__ " + Quote(kEpochKey) + " is " +
                         Quote(text.substr(0, 40)) + ", not an epoch");
  }
  return static_cast<int64_t>(std::stoll(text));
}

// The metrics an exported file records: a JSON object of finite numbers.
Result<std::map<std::string, double>> ParseMetrics(const std::string& text,
                                                   const std::string& what) {
  CKPT_ASSIGN_OR_RETURN(nlohmann::json object,
                        format::ParseJsonStrict(text, what));
  auto bad = [&](std::string why) {
    return DataLossError(what + ": __metadata__ " + Quote(kMetricsKey) + " " +
                         why);
  };
  if (!object.is_object()) return bad("is not a JSON object");
  std::map<std::string, double> metrics;
  for (const auto& [name, value] : object.items()) {
    if (!value.is_number()) {
      return bad("gives metric " + Quote(name) + " a value that is no number");
    }
    metrics[name] = value.get<double>();
  }
  return metrics;
}

// A whole file mapped read-only. The mapping is private, so the State's views
// into it never see another process's later writes to the pages we read.
class MappedFile {
 public:
  static Result<std::unique_ptr<MappedFile>> Open(const std::string& path) {
    // O_NONBLOCK: a FIFO with no writer would block the open forever; it
    // returns at once and is refused below as no regular file.
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return ErrnoError(errno, "open " + Quote(path));
    struct stat st;
    if (fstat(fd, &st) != 0) {
      const int err = errno;
      close(fd);
      return ErrnoError(err, "stat " + Quote(path));
    }
    if (!S_ISREG(st.st_mode)) {
      close(fd);
      return InvalidArgumentError(Quote(path) + " is not a regular file");
    }
    auto file = std::unique_ptr<MappedFile>(new MappedFile());
    file->size_ = static_cast<size_t>(st.st_size);
    // mmap refuses length 0; an empty file parses (and fails) as "".
    if (file->size_ > 0) {
      void* p = mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        const int err = errno;
        close(fd);
        return ErrnoError(err, "mmap " + Quote(path));
      }
      file->data_ = static_cast<char*>(p);
    }
    close(fd);
    return file;
  }

  // FILE given as a storage URL (s3://BUCKET/DIR/NAME.safetensors, say,
  // where `aws s3 cp` put it): the object NAME of the root s3://BUCKET/DIR,
  // read whole into memory.
  static Result<std::unique_ptr<MappedFile>> ReadObject(
      const std::string& url) {
    const size_t scheme = url.find("://");
    const size_t slash = url.rfind('/');
    if (slash == std::string::npos || slash <= scheme + 3 ||
        url.find('/', scheme + 3) == std::string::npos ||
        slash + 1 == url.size()) {
      return InvalidArgumentError(
          Quote(url) +
          " names no object (give ROOT/NAME, as s3://BUCKET/NAME)");
    }
    const std::string root = url.substr(0, slash);
    const std::string key = url.substr(slash + 1);
    CKPT_ASSIGN_OR_RETURN(std::unique_ptr<Storage> storage,
                          OpenStorage(root, {.create = false}));
    CKPT_ASSIGN_OR_RETURN(std::string bytes, storage->ReadAll(key));
    auto file = std::unique_ptr<MappedFile>(new MappedFile());
    file->object_ = std::move(bytes);
    return file;
  }

  ~MappedFile() {
    if (data_ != nullptr) munmap(data_, size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::string_view bytes() const {
    return data_ != nullptr ? std::string_view(data_, size_) : object_;
  }

 private:
  MappedFile() = default;
  char* data_ = nullptr;
  size_t size_ = 0;
  std::string object_;  // ReadObject's
};

struct ImportArgs {
  std::string file;
  std::string root;
  int64_t step = 0;
  std::optional<int64_t> epoch;  // else the file's, if it has one
  std::string catalog;
  LeaseArgs lease;
  std::string compression = "off";
  int compression_level = 1;
  bool json = false;
};

// The names listed under "ckpt.blobs", each of which must be a U8 1-d tensor
// of the file.
Result<std::set<std::string>> BlobNames(const format::SafetensorsHeader& header,
                                        const std::string& what) {
  std::set<std::string> names;
  auto it = header.metadata.find(std::string(kBlobsKey));
  if (it == header.metadata.end()) return names;
  CKPT_ASSIGN_OR_RETURN(nlohmann::json list,
                        format::ParseJsonStrict(it->second, what));
  auto bad = [&](std::string why) {
    return DataLossError(what + ": __metadata__ " + Quote(kBlobsKey) + " " +
                         why);
  };
  if (!list.is_array()) return bad("is not a JSON array");
  for (const nlohmann::json& name : list) {
    if (!name.is_string()) return bad("holds something other than names");
    names.insert(name.get<std::string>());
  }
  std::set<std::string> missing = names;
  for (const format::TensorLayout& t : header.tensors) {
    if (!names.contains(t.name)) continue;
    if (t.dtype != DType::kU8 || t.shape.size() != 1) {
      return bad("names " + Quote(t.name) + ", which is not a 1-d U8 tensor");
    }
    missing.erase(t.name);
  }
  if (!missing.empty()) {
    return bad("names a missing tensor " + Quote(*missing.begin()));
  }
  return names;
}

Status RunImport(const ImportArgs& args) {
  const std::string what = Quote(args.file);
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file,
                        args.file.find("://") != std::string::npos
                            ? MappedFile::ReadObject(args.file)
                            : MappedFile::Open(args.file));
  CKPT_ASSIGN_OR_RETURN(format::SafetensorsHeader header,
                        format::ParseSafetensorsFile(file->bytes(), what));
  CKPT_ASSIGN_OR_RETURN(std::set<std::string> blobs, BlobNames(header, what));

  State state;
  auto* base =
      reinterpret_cast<std::byte*>(const_cast<char*>(file->bytes().data()));
  for (const format::TensorLayout& t : header.tensors) {
    std::byte* data = base + header.data_start + t.begin;
    if (blobs.contains(t.name)) {
      state.AddBlob(t.name, std::span<const std::byte>(data, t.end - t.begin));
    } else {
      state.AddTensor(t.name, TensorView{.dtype = t.dtype,
                                         .shape = t.shape,
                                         .data = data,
                                         .writable = false});
    }
  }
  SaveOptions options;
  options.compression =
      Compression{args.compression == "zstd"   ? Compression::Mode::kZstd
                  : args.compression == "auto" ? Compression::Mode::kAuto
                                               : Compression::Mode::kOff,
                  args.compression_level};
  for (const auto& [key, value] : header.metadata) {
    if (key == kBlobsKey) continue;
    if (key == kEpochKey) {
      CKPT_ASSIGN_OR_RETURN(options.epoch, ParseEpoch(value, what));
    } else if (key == kMetricsKey) {
      CKPT_ASSIGN_OR_RETURN(options.metrics, ParseMetrics(value, what));
    } else if (key.starts_with(kMetadataKeyPrefix)) {
      state.AddMetadataJson(key.substr(kMetadataKeyPrefix.size()), value);
    } else {
      options.metadata[key] = value;
    }
  }
  if (args.epoch) options.epoch = *args.epoch;
  CKPT_RETURN_IF_ERROR_CTX(state.status(), "import " + what);

  // The bar follows the bytes the save writes (the data objects' headers
  // too, so it may reach its end a little early).
  std::unique_ptr<ProgressBar> bar;
  ByteProgressFn progress;
  if (!args.json) {
    bar =
        std::make_unique<ProgressBar>("import " + args.file, header.data_size);
    progress = [&bar](const ByteCounts& counts) {
      bar->Update(counts.written);
    };
  }
  // The file is checked before the root is touched: a bad file must not leave
  // even an empty new root behind.
  CKPT_ASSIGN_OR_RETURN(
      auto manager,
      OpenRootWithCatalog(args.root, /*create=*/true, args.catalog, args.lease,
                          std::move(progress)));
  CKPT_ASSIGN_OR_RETURN(SaveResult saved,
                        manager->Save(args.step, state, options));
  if (bar) bar->Finish();
  if (args.json) {
    // The checkpoint made, and what the human line says besides: the file
    // it came from and its tensors' bytes (before any compression).
    nlohmann::json j = InfoToJson(saved.info);
    j["file"] = args.file;
    j["data_bytes"] = header.data_size;
    PrintJson(j);
  } else {
    fmt::print("imported {} ({}) from {} as step {}\n",
               Count(state.size(), "entry"), FormatBytes(header.data_size),
               args.file, args.step);
  }
  return Status();
}

struct ExportArgs {
  std::string root;
  std::optional<int64_t> step;
  std::string out;
  std::string format = "safetensors";
  bool force = false;
  bool json = false;
};

Status RunExport(const ExportArgs& args) {
  // A URL would be taken for a relative path ("s3:" a folder): said plainly.
  if (const size_t scheme = args.out.find("://"); scheme != std::string::npos &&
                                                  scheme > 0 &&
                                                  args.out.find('/') > scheme) {
    return InvalidArgumentError(
        "export to " + Quote(args.out) +
        ": OUT is a local path (export writes a local file" +
        (args.format == "dcp" ? std::string(" tree") : std::string()) +
        "; copy it to a store afterwards), not a URL");
  }
  if (args.format == "dcp") {
    std::vector<std::string> a = {"export", args.root, args.out};
    if (args.step) a.insert(a.end(), {"--step", std::to_string(*args.step)});
    if (args.force) a.push_back("--force");
    if (args.json) a.push_back("--json");
    return RunDcpConverter(a);
  }
  // Fail before loading what may be many gigabytes.
  struct stat st;
  if (lstat(args.out.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    // No --force replaces a folder by a file: said before the export, not
    // after it has written every byte.
    return InvalidArgumentError(
        "export to " + Quote(args.out) +
        ": it is a directory; OUT names the file to write (such as " +
        (std::filesystem::path(args.out) / "model.safetensors").string() + ")");
  }
  // Nor can a file be written into a folder that is not there.
  const std::filesystem::path folder =
      std::filesystem::path(args.out).parent_path();
  if (!folder.empty()) {
    const bool there = stat(folder.c_str(), &st) == 0;
    if (!there || !S_ISDIR(st.st_mode)) {
      return NotFoundError("export to " + Quote(args.out) + ": " +
                           Quote(folder.string()) +
                           (there ? " is not a folder"
                                  : " does not exist (export creates no "
                                    "folders)"));
    }
  }
  if (!args.force && lstat(args.out.c_str(), &st) == 0) {
    return AlreadyExistsError(Quote(args.out) +
                              " exists (use --force to overwrite)");
  }
  // Two bars, made once their totals are known: the bytes LoadAll reads,
  // then the bytes of the file.
  std::unique_ptr<ProgressBar> bar;
  ByteProgressFn progress;
  if (!args.json) {
    progress = [&bar](const ByteCounts& counts) {
      if (bar) bar->Update(counts.read);
    };
  }
  CKPT_ASSIGN_OR_RETURN(
      auto manager, OpenRoot(args.root, /*create=*/false, std::move(progress)));
  // The step is pinned here, so the bar's total and the load describe the
  // same checkpoint even if a newer one is committed meanwhile.
  CKPT_ASSIGN_OR_RETURN(CheckpointDescription described,
                        manager->Describe(args.step));
  const int64_t step = described.info.step;
  if (!args.json) {
    uint64_t total = 0;
    for (const EntryInfo& e : described.entries) total += e.bytes;
    bar = std::make_unique<ProgressBar>(
        "export step " + std::to_string(step) + ": load", total);
  }
  CKPT_ASSIGN_OR_RETURN(LoadedCheckpoint loaded, manager->LoadAll(step));
  if (bar) {
    bar->Finish();
    bar.reset();
  }

  std::map<std::string, std::string> metadata;
  for (const auto& [key, value] : loaded.info.metadata) {
    if (ReservedKey(key)) {
      return InvalidArgumentError(
          "user metadata key " + Quote(key) +
          " is reserved in exported files for ckpt's own entries");
    }
    metadata[key] = value;
  }
  std::vector<format::TensorLayout> layouts;
  std::vector<std::string_view> parts = {""};  // [0]: the header, below
  nlohmann::json blob_names = nlohmann::json::array();
  for (const Entry& e : loaded.state.entries()) {
    if (e.kind == EntryKind::kMetadata) {
      metadata[std::string(kMetadataKeyPrefix) + e.name] = e.json;
      continue;
    }
    CKPT_ASSIGN_OR_RETURN(uint64_t size, e.tensor.ByteSize());
    if (e.kind == EntryKind::kBlob) {
      blob_names.push_back(e.name);
      layouts.push_back({.name = e.name,
                         .dtype = DType::kU8,
                         .shape = {static_cast<int64_t>(size)}});
    } else {
      layouts.push_back(
          {.name = e.name, .dtype = e.tensor.dtype, .shape = e.tensor.shape});
    }
    parts.emplace_back(reinterpret_cast<const char*>(e.tensor.data), size);
  }
  if (!blob_names.empty()) metadata[std::string(kBlobsKey)] = blob_names.dump();
  if (loaded.info.epoch >= 0) {
    metadata[std::string(kEpochKey)] = std::to_string(loaded.info.epoch);
  }
  if (!loaded.info.metrics.empty()) {
    nlohmann::json metrics = nlohmann::json::object();
    for (const auto& [name, value] : loaded.info.metrics) metrics[name] = value;
    metadata[std::string(kMetricsKey)] = metrics.dump();
  }
  CKPT_ASSIGN_OR_RETURN(std::string header,
                        format::EncodeSafetensorsHeader(layouts, metadata));
  parts[0] = header;
  uint64_t bytes = 0;
  for (std::string_view part : parts) bytes += part.size();
  if (!args.json) {
    bar = std::make_unique<ProgressBar>(
        "export step " + std::to_string(step) + ": write " + args.out, bytes);
  }
  CKPT_RETURN_IF_ERROR_CTX(
      WriteFileAtomically(args.out, parts, args.force,
                          [&bar](uint64_t done) {
                            if (bar) bar->Update(done);
                          }),
      "export step " + std::to_string(step) + " to " + Quote(args.out));
  if (bar) bar->Finish();
  if (args.json) {
    PrintJson({{"step", loaded.info.step},
               {"file", args.out},
               {"tensors", layouts.size()},
               {"bytes", bytes}});
  } else {
    fmt::print("exported step {} ({}, {}) to {}\n", loaded.info.step,
               Count(layouts.size(), "tensor"), FormatBytes(bytes), args.out);
  }
  return Status();
}

}  // namespace

void AddImportCommand(CLI::App& app, Command& selected) {
  auto args = std::make_shared<ImportArgs>();
  CLI::App* sub = AddSubcommand(
      app, "import", "Make a checkpoint from a safetensors file.",
      "Read FILE (a safetensors file, or an object given by its URL, as "
      "s3://BUCKET/models/model.safetensors; every offset, shape and name is "
      "checked before anything is written) and save its tensors as "
      "checkpoint --step N under ROOT, creating ROOT if needed. The file's "
      "__metadata__ becomes the checkpoint's user metadata; the blobs, "
      "metadata entries, epoch and metrics of a file written by `ckpt "
      "export` are restored as such (--epoch gives another epoch). A bad "
      "file leaves ROOT as it was.",
      "  ckpt import model.safetensors /data/run42 --step 0\n"
      "  ckpt import model.safetensors file:///data/run42 --step 100 "
      "--epoch 3\n"
      "  ckpt import s3://models/llm/model.safetensors s3://ckpt/run42 "
      "--step 0 --compression zstd\n");
  sub->add_option("FILE", args->file,
                  "the safetensors file (or object URL) to read")
      ->required();
  AddRootArg(*sub, args->root);
  sub->add_option("--step", args->step, "the step to save it as")
      ->required()
      ->check(NonNegativeInteger(INT64_MAX));
  sub->add_option("--epoch", args->epoch,
                  "the epoch to record (default: the file's, where `ckpt "
                  "export` wrote one)")
      ->check(NonNegativeInteger(INT64_MAX));
  sub->add_option("--compression", args->compression,
                  "off (the default), zstd (each chunk in byte planes of its "
                  "element and zstd; raw where that does not shrink it) or "
                  "auto (zstd where the storage is slower than compressing "
                  "makes up for)")
      ->check(CLI::IsMember({"off", "zstd", "auto"}));
  sub->add_option("--compression-level", args->compression_level,
                  "zstd's level, -7 (fastest) to 19 (smallest); default 1")
      ->check(CLI::Range(-7, 19));
  AddCatalogOption(*sub, args->catalog);
  AddLeaseOptions(*sub, args->lease);
  AddJsonFlag(*sub, args->json);
  sub->callback([args, &selected] {
    selected = {"import", [args] { return RunImport(*args); }};
  });
}

void AddExportCommand(CLI::App& app, Command& selected) {
  auto args = std::make_shared<ExportArgs>();
  CLI::App* sub = AddSubcommand(
      app, "export", "Write a checkpoint as one safetensors file, or for DCP.",
      "Load a checkpoint (the newest, or --step N), whatever world size "
      "saved it, and write it as one safetensors file that any safetensors "
      "reader opens: tensors as they are, blobs as 1-d U8 tensors, and "
      "metadata entries, the step's epoch and metrics and the user "
      "metadata in __metadata__ (`ckpt import` restores them). The file "
      "appears whole or not at all; an existing OUT is kept unless --force "
      "is given.\n\n"
      "With --format dcp, OUT is a directory that PyTorch's DCP "
      "(FileSystemReader) loads at any world size: its tensors and blobs, "
      "the data synced before its .metadata appears (needs the ckpt Python "
      "package and PyTorch: $CKPT_PYTHON, else python3).",
      "  ckpt export /data/run42 model.safetensors\n"
      "  ckpt export /data/run42 --step 1200 model.safetensors --force\n"
      "  ckpt export /data/run42 --step 1200 --format dcp /data/dcp/1200\n");
  AddRootArg(*sub, args->root);
  sub->add_option("OUT", args->out,
                  "the local safetensors file (with --format dcp: the "
                  "directory) to write")
      ->required();
  AddStepOption(*sub, args->step);
  sub->add_option("--format", args->format, "safetensors (the default) or dcp")
      ->check(CLI::IsMember({"safetensors", "dcp"}));
  sub->add_flag("--force", args->force, "replace OUT if it exists");
  AddJsonFlag(*sub, args->json);
  sub->callback([args, &selected] {
    selected = {"export", [args] { return RunExport(*args); }};
  });
}

}  // namespace ckpt::cli

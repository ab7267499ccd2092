// The C API's options, save options and states (include/ckpt/c.h).
#include <charconv>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "c_api_internal.h"
#include "ckpt/dtype.h"
#include "util/names.h"

using ckpt::capi::Guard;
using ckpt::capi::NullArgument;

namespace ckpt::capi {

Status NullArgument(const char* function, const char* what) {
  return InvalidArgumentError(std::string(function) + ": " + what + " is NULL");
}

namespace {

Status BadValue(std::string_view name, std::string_view value,
                std::string_view want) {
  return InvalidArgumentError("option " + std::string(name) + ": \"" +
                              std::string(value) + "\" is not " +
                              std::string(want));
}

template <typename T>
Status ParseInteger(std::string_view name, std::string_view text, T min,
                    T& out) {
  T v{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
    return BadValue(name, text, "an integer");
  }
  if (v < min) {
    return BadValue(name, text, "at least " + std::to_string(min));
  }
  out = v;
  return Status();
}

Status ParseNumber(std::string_view name, std::string_view text, double& out) {
  // from_chars for double is in g++ 12's libstdc++, and unlike strtod it
  // ignores the locale.
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty() ||
      !std::isfinite(v)) {
    return BadValue(name, text, "a finite number");
  }
  out = v;
  return Status();
}

Status ParseBool(std::string_view name, std::string_view text, bool& out) {
  if (text == "true" || text == "1") {
    out = true;
  } else if (text == "false" || text == "0") {
    out = false;
  } else {
    return BadValue(name, text, "true or false");
  }
  return Status();
}

using Setter = std::function<Status(ckpt_options_t&, std::string_view name,
                                    std::string_view value)>;

template <typename T>
Setter Integer(T Options::*field, T min = 0) {
  return [=](ckpt_options_t& o, std::string_view n, std::string_view v) {
    return ParseInteger(n, v, min, o.options.*field);
  };
}
template <typename T>
Setter RetentionInteger(T RetentionPolicy::*field) {
  return [=](ckpt_options_t& o, std::string_view n, std::string_view v) {
    return ParseInteger(n, v, T{0}, o.options.retention.*field);
  };
}
template <typename T>
Setter IncrementalInteger(T IncrementalPolicy::*field) {
  return [=](ckpt_options_t& o, std::string_view n, std::string_view v) {
    return ParseInteger(n, v, T{0}, o.options.incremental.*field);
  };
}
Setter Number(double Options::*field) {
  return [=](ckpt_options_t& o, std::string_view n, std::string_view v) {
    return ParseNumber(n, v, o.options.*field);
  };
}
Setter Bool(bool Options::*field) {
  return [=](ckpt_options_t& o, std::string_view n, std::string_view v) {
    return ParseBool(n, v, o.options.*field);
  };
}

// "off", "zstd", "auto": Compression::Mode by name.
Status ParseCompressionMode(std::string_view name, std::string_view v,
                            ckpt::Compression::Mode& out) {
  if (v == "off") {
    out = ckpt::Compression::Mode::kOff;
  } else if (v == "zstd") {
    out = ckpt::Compression::Mode::kZstd;
  } else if (v == "auto") {
    out = ckpt::Compression::Mode::kAuto;
  } else {
    return BadValue(name, v, "\"off\", \"zstd\" or \"auto\"");
  }
  return Status();
}

const std::map<std::string, Setter, std::less<>>& Setters() {
  static const auto* setters = new std::map<std::string, Setter, std::less<>>{
      {"job_id",
       [](ckpt_options_t& o, std::string_view, std::string_view v) {
         o.options.job_id = std::string(v);
         return Status();
       }},
      {"keep_last", RetentionInteger(&RetentionPolicy::keep_last)},
      {"keep_every_n_steps",
       RetentionInteger(&RetentionPolicy::keep_every_n_steps)},
      {"keep_every_seconds",
       RetentionInteger(&RetentionPolicy::keep_every_seconds)},
      {"keep_best", RetentionInteger(&RetentionPolicy::keep_best)},
      {"best_metric",
       [](ckpt_options_t& o, std::string_view, std::string_view v) {
         o.options.retention.best_metric = std::string(v);
         return Status();
       }},
      {"best_higher_is_better",
       [](ckpt_options_t& o, std::string_view n, std::string_view v) {
         return ParseBool(n, v, o.options.retention.best_higher_is_better);
       }},
      {"min_seconds_between_saves",
       Number(&Options::min_seconds_between_saves)},
      {"gc_after_save", Bool(&Options::gc_after_save)},
      {"gc_grace_seconds", Integer(&Options::gc_grace_seconds)},
      {"create", Bool(&Options::create)},
      {"create_root", Bool(&Options::create_root)},
      {"full_every", IncrementalInteger(&IncrementalPolicy::full_every)},
      {"max_chain", IncrementalInteger(&IncrementalPolicy::max_chain)},
      {"min_referenced_fraction",
       [](ckpt_options_t& o, std::string_view n, std::string_view v) {
         double f = 0;
         if (Status s = ParseNumber(n, v, f); !s.ok()) return s;
         if (f < 0 || f > 1) return BadValue(n, v, "in [0, 1]");
         o.options.incremental.min_referenced_fraction = f;
         return Status();
       }},
      {"lease_seconds", Number(&Options::lease_seconds)},
      {"lease_wait_seconds", Number(&Options::lease_wait_seconds)},
      {"break_lease", Bool(&Options::break_lease)},
      {"chunk_size", Integer(&Options::chunk_size)},
      {"async_staging_bytes", Integer(&Options::async_staging_bytes)},
      {"async_staging_prepare_bytes",
       Integer(&Options::async_staging_prepare_bytes)},
      {"io_threads", Integer(&Options::io_threads, 1)},
      {"compression",
       [](ckpt_options_t& o, std::string_view n, std::string_view v) {
         return ParseCompressionMode(n, v, o.options.compression.mode);
       }},
      {"compression_level",
       [](ckpt_options_t& o, std::string_view n, std::string_view v) {
         return ParseInteger(n, v, -7, o.options.compression.level);
       }},
      {"metadata_layout",
       [](ckpt_options_t& o, std::string_view n, std::string_view v) {
         if (v == "indexed") {
           o.options.metadata_layout = Options::MetadataLayout::kIndexed;
         } else if (v == "json") {
           o.options.metadata_layout = Options::MetadataLayout::kJson;
         } else {
           return BadValue(n, v, "\"indexed\" or \"json\"");
         }
         return Status();
       }},
      {"catalog",
       [](ckpt_options_t& o, std::string_view, std::string_view v) {
         o.catalog_url = std::string(v);
         o.options.catalog = nullptr;
         return Status();
       }},
      {"catalog_required",
       [](ckpt_options_t& o, std::string_view n, std::string_view v) {
         return ParseBool(n, v, o.catalog_required);
       }},
  };
  return *setters;
}

// The entries of one ckpt_state_add call, checked and added.
Status AddEntry(State& state, const ckpt_entry_t& e, bool for_load) {
  if (e.name == nullptr) {
    return InvalidArgumentError("ckpt_state_add: an entry's name is NULL");
  }
  std::string name(e.name);
  auto bad = [&](const std::string& why) {
    return InvalidArgumentError("entry \"" + name + "\": " + why);
  };
  if (e.placement < CKPT_PLACE_WHOLE || e.placement > CKPT_PLACE_PIECE) {
    return bad("unknown placement " + std::to_string(e.placement));
  }
  switch (e.kind) {
    case CKPT_KIND_TENSOR: {
      if (e.dtype == nullptr) return bad("a tensor needs a dtype");
      std::optional<DType> dtype = ParseDType(e.dtype);
      if (!dtype) return bad("unknown dtype \"" + std::string(e.dtype) + "\"");
      if (e.ndim < 0 || e.ndim > 64) {
        return bad("ndim " + std::to_string(e.ndim) + " is not in [0, 64]");
      }
      if (e.ndim > 0 && e.shape == nullptr) return bad("its shape is NULL");
      TensorView view;
      view.dtype = *dtype;
      view.shape.assign(e.shape, e.shape + e.ndim);
      view.data = static_cast<std::byte*>(e.data);
      view.writable = for_load;
      Result<uint64_t> size = view.ByteSize();
      if (!size.ok()) return bad(size.status().message());
      if (*size != e.nbytes) {
        return bad("its shape and dtype make " + std::to_string(*size) +
                   " bytes, but nbytes is " + std::to_string(e.nbytes));
      }
      if (*size > 0 && e.data == nullptr) return bad("its data is NULL");
      if (e.placement == CKPT_PLACE_RANK_LOCAL) {
        state.AddRankLocalTensor(std::move(name), std::move(view));
      } else if (e.placement == CKPT_PLACE_PIECE) {
        if (e.ndim > 0 && (e.global_shape == nullptr || e.offsets == nullptr)) {
          return bad("a piece needs its global shape and offsets");
        }
        state.AddTensorPiece(
            std::move(name),
            std::vector<int64_t>(e.global_shape, e.global_shape + e.ndim),
            std::vector<int64_t>(e.offsets, e.offsets + e.ndim),
            std::move(view));
      } else {
        state.AddTensor(std::move(name), std::move(view));
      }
      return Status();
    }
    case CKPT_KIND_BLOB: {
      if (e.placement == CKPT_PLACE_PIECE) {
        return bad("only a tensor can be a piece of a sharded tensor");
      }
      if (e.data == nullptr && e.nbytes > 0) return bad("its data is NULL");
      const auto* bytes = static_cast<const std::byte*>(e.data);
      const auto size = static_cast<size_t>(for_load ? 0 : e.nbytes);
      if (e.placement == CKPT_PLACE_RANK_LOCAL) {
        // The state keeps its own copy of a rank-local blob.
        state.AddRankLocalBlob(
            std::move(name),
            std::string(reinterpret_cast<const char*>(bytes), size));
      } else if (for_load) {
        state.AddBlob(std::move(name), std::string());
      } else {
        state.AddBlob(std::move(name), std::span<const std::byte>(bytes, size));
      }
      return Status();
    }
    case CKPT_KIND_METADATA: {
      if (e.placement != CKPT_PLACE_WHOLE) {
        return bad("metadata cannot be rank-local or a piece");
      }
      if (for_load) {
        state.AddMetadataJson(std::move(name), "{}");
        return Status();
      }
      if (e.data == nullptr) return bad("its JSON text is NULL");
      state.AddMetadataJson(std::move(name),
                            std::string(static_cast<const char*>(e.data),
                                        static_cast<size_t>(e.nbytes)));
      return Status();
    }
    default:
      return bad("unknown kind " + std::to_string(e.kind));
  }
}

// n NUL-terminated strings back to back in `size` bytes, read one by one
// without reading past the end (ckpt_state_add_tensors' names and dtypes).
struct PackedStrings {
  const char* data;
  size_t size;
  const char* what;
  size_t at = 0;

  Status Next(const char* fn, size_t i, size_t n, const char*& out) {
    const void* end =
        at < size ? std::memchr(data + at, '\0', size - at) : nullptr;
    if (end == nullptr) {
      return InvalidArgumentError(
          std::string(fn) + ": " + what + " holds " + std::to_string(i) +
          " NUL-terminated strings in its " + std::to_string(size) +
          " bytes, not " + std::to_string(n));
    }
    out = data + at;
    at = static_cast<size_t>(static_cast<const char*>(end) - data) + 1;
    return Status();
  }

  Status AllUsed(const char* fn, size_t n) const {
    if (at == size) return Status();
    return InvalidArgumentError(
        std::string(fn) + ": " + what + " holds " + std::to_string(size - at) +
        " bytes after its " + std::to_string(n) + " strings");
  }
};

}  // namespace
}  // namespace ckpt::capi

extern "C" {

ckpt_options_t* ckpt_options_create(void) {
  try {
    return new ckpt_options_t();
  } catch (...) {
    return nullptr;
  }
}

void ckpt_options_destroy(ckpt_options_t* options) { delete options; }

int ckpt_options_set(ckpt_options_t* options, const char* name,
                     const char* value, char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (options == nullptr || name == nullptr || value == nullptr) {
      return NullArgument("ckpt_options_set", "an argument");
    }
    const auto& setters = ckpt::capi::Setters();
    auto it = setters.find(std::string_view(name));
    if (it == setters.end()) {
      std::string known;
      for (const auto& [n, _] : setters)
        known += (known.empty() ? "" : ", ") + n;
      return ckpt::InvalidArgumentError("unknown option \"" +
                                        std::string(name) +
                                        "\" (known: " + known + ")");
    }
    return it->second(*options, name, value);
  });
}

void ckpt_options_set_communicator(ckpt_options_t* options,
                                   ckpt_communicator_t* comm) {
  if (options == nullptr) return;
  options->communicator = comm == nullptr ? nullptr : comm->comm;
}

void ckpt_options_set_catalog(ckpt_options_t* options,
                              ckpt_catalog_t* catalog) {
  if (options == nullptr) return;
  options->options.catalog = catalog == nullptr ? nullptr : catalog->catalog;
  options->catalog_url.clear();
}

ckpt_save_options_t* ckpt_save_options_create(void) {
  try {
    return new ckpt_save_options_t();
  } catch (...) {
    return nullptr;
  }
}

void ckpt_save_options_destroy(ckpt_save_options_t* options) { delete options; }

void ckpt_save_options_set_epoch(ckpt_save_options_t* options, int64_t epoch) {
  if (options != nullptr) options->options.epoch = epoch;
}

void ckpt_save_options_set_incremental(ckpt_save_options_t* options,
                                       int incremental) {
  if (options != nullptr) options->options.incremental = incremental != 0;
}

void ckpt_save_options_set_stage_in_background(ckpt_save_options_t* options,
                                               int in_background) {
  if (options != nullptr) {
    options->options.stage_in_background = in_background != 0;
  }
}

int ckpt_save_options_set_compression(ckpt_save_options_t* options,
                                      const char* mode, int level,
                                      char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (options == nullptr || mode == nullptr) {
      return NullArgument("ckpt_save_options_set_compression", "an argument");
    }
    ckpt::Compression c;
    CKPT_RETURN_IF_ERROR(
        ckpt::capi::ParseCompressionMode("compression", mode, c.mode));
    c.level = level;
    options->options.compression = c;
    return ckpt::Status();
  });
}

int ckpt_save_options_set_metric(ckpt_save_options_t* options, const char* name,
                                 double value, char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (options == nullptr || name == nullptr) {
      return NullArgument("ckpt_save_options_set_metric", "an argument");
    }
    // One that is not finite is left out by the save, with a warning.
    options->options.metrics[name] = value;
    return ckpt::Status();
  });
}

int ckpt_save_options_set_metadata(ckpt_save_options_t* options,
                                   const char* key, const char* value,
                                   char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (options == nullptr || key == nullptr || value == nullptr) {
      return NullArgument("ckpt_save_options_set_metadata", "an argument");
    }
    options->options.metadata[key] = value;
    return ckpt::Status();
  });
}

int ckpt_save_options_set_dirty_rows(ckpt_save_options_t* options,
                                     const char* name, const int64_t* ranges,
                                     size_t n, char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (options == nullptr || name == nullptr || (n > 0 && ranges == nullptr)) {
      return NullArgument("ckpt_save_options_set_dirty_rows", "an argument");
    }
    auto& rows = options->options.dirty_rows[name];
    rows.clear();
    for (size_t i = 0; i < n; ++i) {
      rows.emplace_back(ranges[2 * i], ranges[2 * i + 1]);
    }
    return ckpt::Status();
  });
}

ckpt_state_t* ckpt_state_create(void) {
  try {
    return new ckpt_state_t();
  } catch (...) {
    return nullptr;
  }
}

void ckpt_state_destroy(ckpt_state_t* state) { delete state; }

int ckpt_state_add(ckpt_state_t* state, const ckpt_entry_t* entries, size_t n,
                   int for_load, char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (state == nullptr || (n > 0 && entries == nullptr)) {
      return NullArgument("ckpt_state_add", "the state or the entries");
    }
    for (size_t i = 0; i < n; ++i) {
      ckpt::Status s =
          ckpt::capi::AddEntry(state->state, entries[i], for_load != 0);
      if (!s.ok()) {
        // The state holds part of the call's entries: every save or load
        // with it fails with this error (as a C++ State does), where one
        // whose caller missed the return code would commit a part.
        state->state.SetError(s);
        return s;
      }
      if (!state->state.status().ok()) return state->state.status();
    }
    return state->state.status();
  });
}

int ckpt_state_add_tensors(ckpt_state_t* state, size_t n, const char* names,
                           size_t names_size, const char* dtypes,
                           size_t dtypes_size, const int* ndims,
                           const int64_t* shapes, size_t shapes_size,
                           void* const* data, const uint64_t* nbytes,
                           int for_load, char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    constexpr const char* kFn = "ckpt_state_add_tensors";
    if (state == nullptr ||
        (n > 0 && (names == nullptr || dtypes == nullptr || ndims == nullptr ||
                   data == nullptr || nbytes == nullptr)) ||
        (shapes_size > 0 && shapes == nullptr)) {
      return NullArgument(kFn, "the state or an array");
    }
    ckpt::capi::PackedStrings name_list{names, names_size, "names"};
    ckpt::capi::PackedStrings dtype_list{dtypes, dtypes_size, "dtypes"};
    size_t dim = 0;
    for (size_t i = 0; i < n; ++i) {
      ckpt_entry_t e = {};
      e.kind = CKPT_KIND_TENSOR;
      e.placement = CKPT_PLACE_WHOLE;
      ckpt::Status s = name_list.Next(kFn, i, n, e.name);
      if (s.ok()) s = dtype_list.Next(kFn, i, n, e.dtype);
      if (!s.ok()) return s;
      e.ndim = ndims[i];
      // A negative or huge ndim is AddEntry's to refuse, naming the entry;
      // within [0, 64] its lengths must be there to read.
      if (e.ndim >= 0 && e.ndim <= 64) {
        if (static_cast<size_t>(e.ndim) > shapes_size - dim) {
          return ckpt::InvalidArgumentError(
              std::string(kFn) + ": tensor " + std::to_string(i) + " (\"" +
              e.name + "\") has " + std::to_string(e.ndim) +
              " dimensions, but shapes holds " +
              std::to_string(shapes_size - dim) + " more lengths");
        }
        e.shape = e.ndim > 0 ? shapes + dim : nullptr;
        dim += static_cast<size_t>(e.ndim);
      }
      e.data = data[i];
      e.nbytes = nbytes[i];
      s = ckpt::capi::AddEntry(state->state, e, for_load != 0);
      if (!s.ok()) return s;
      if (!state->state.status().ok()) return state->state.status();
    }
    if (ckpt::Status s = name_list.AllUsed(kFn, n); !s.ok()) return s;
    if (ckpt::Status s = dtype_list.AllUsed(kFn, n); !s.ok()) return s;
    if (dim != shapes_size) {
      return ckpt::InvalidArgumentError(
          std::string(kFn) + ": the " + std::to_string(n) + " tensors have " +
          std::to_string(dim) + " dimensions, but shapes holds " +
          std::to_string(shapes_size) + " lengths");
    }
    return state->state.status();
  });
}

int ckpt_state_set_error(ckpt_state_t* state, int code, const char* message,
                         char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (state == nullptr || message == nullptr) {
      return NullArgument("ckpt_state_set_error", "the state or the message");
    }
    if (code <= CKPT_OK || code > CKPT_FAILED_PRECONDITION) {
      return ckpt::InvalidArgumentError(
          "ckpt_state_set_error: " + std::to_string(code) +
          " is not an error code (1 to " +
          std::to_string(CKPT_FAILED_PRECONDITION) + ")");
    }
    state->state.SetError(
        ckpt::Status(static_cast<ckpt::ErrorCode>(code), message));
    return ckpt::Status();
  });
}

int ckpt_state_set_location(ckpt_state_t* state, size_t index, int device,
                            char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (state == nullptr) {
      return NullArgument("ckpt_state_set_location", "the state");
    }
    if (index >= state->state.size()) {
      return ckpt::NotFoundError("ckpt_state_set_location: entry " +
                                 std::to_string(index) + " of a state of " +
                                 std::to_string(state->state.size()));
    }
    // Found by name for a writable entry: entries() is read-only.
    ckpt::Entry& e = *state->state.Find(state->state.entries()[index].name);
    const std::string op =
        "ckpt_state_set_location: entry " + ckpt::Quote(e.name);
    if (e.kind != ckpt::EntryKind::kTensor) {
      return ckpt::InvalidArgumentError(
          op + " is a " + std::string(ckpt::EntryKindName(e.kind)) +
          "; only tensors live on a device");
    }
    if (device < -1) {
      return ckpt::InvalidArgumentError(op + ": device " +
                                        std::to_string(device) +
                                        " is neither an ordinal nor -1");
    }
    e.tensor.location = device < 0 ? ckpt::MemoryLocation::Host()
                                   : ckpt::MemoryLocation::Cuda(device);
    return ckpt::Status();
  });
}

int ckpt_state_set_cuda_stream(ckpt_state_t* state, uint64_t stream,
                               char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (state == nullptr) {
      return NullArgument("ckpt_state_set_cuda_stream", "the state");
    }
    state->state.SetCudaStream(reinterpret_cast<void*>(stream));
    return ckpt::Status();
  });
}

size_t ckpt_state_size(const ckpt_state_t* state) {
  return state == nullptr ? 0 : state->state.size();
}

int ckpt_state_get(const ckpt_state_t* state, size_t i, ckpt_entry_t* out,
                   char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (state == nullptr || out == nullptr) {
      return NullArgument("ckpt_state_get", "the state or out");
    }
    if (i >= state->state.size()) {
      return ckpt::NotFoundError("ckpt_state_get: entry " + std::to_string(i) +
                                 " of a state of " +
                                 std::to_string(state->state.size()));
    }
    const ckpt::Entry& e = state->state.entries()[i];
    *out = ckpt_entry_t{};
    out->name = e.name.c_str();
    out->owner = -1;
    out->placement = e.rank_local   ? CKPT_PLACE_RANK_LOCAL
                     : e.is_piece() ? CKPT_PLACE_PIECE
                                    : CKPT_PLACE_WHOLE;
    switch (e.kind) {
      case ckpt::EntryKind::kTensor: {
        out->kind = CKPT_KIND_TENSOR;
        // DTypeName's views are of string literals, so NUL-terminated.
        out->dtype = ckpt::DTypeName(e.tensor.dtype).data();
        out->ndim = static_cast<int>(e.tensor.shape.size());
        out->shape = e.tensor.shape.data();
        out->data = e.tensor.data;
        out->nbytes = e.tensor.ByteSize().value_or(0);
        if (e.is_piece()) {
          out->global_shape = e.global_shape.data();
          out->offsets = e.offsets.data();
        }
        break;
      }
      case ckpt::EntryKind::kBlob:
        // A blob is held as a 1-d U8 tensor.
        out->kind = CKPT_KIND_BLOB;
        out->data = e.tensor.data;
        out->nbytes = e.tensor.shape.empty()
                          ? 0
                          : static_cast<uint64_t>(e.tensor.shape[0]);
        break;
      case ckpt::EntryKind::kMetadata:
        out->kind = CKPT_KIND_METADATA;
        out->data = const_cast<char*>(e.json.data());
        out->nbytes = e.json.size();
        break;
    }
    return ckpt::Status();
  });
}

}  // extern "C"

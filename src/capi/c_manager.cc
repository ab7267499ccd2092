// The C API's manager, saves and loads (include/ckpt/c.h).
#include <optional>
#include <string>
#include <utility>

#include "c_api_internal.h"
#include "capi/records.h"

using ckpt::capi::Guard;
using ckpt::capi::NullArgument;
using ckpt::capi::SetOut;
using ckpt::records::Dump;

namespace {

std::optional<int64_t> StepOrNewest(int64_t step) {
  return step < 0 ? std::nullopt : std::optional<int64_t>(step);
}

const ckpt::SaveOptions& SaveOptionsOf(const ckpt_save_options_t* options) {
  static const ckpt::SaveOptions* defaults = new ckpt::SaveOptions();
  return options == nullptr ? *defaults : options->options;
}

ckpt::Status Unopened(const char* function) {
  return NullArgument(function, "the manager");
}

}  // namespace

extern "C" {

const char* ckpt_version(void) { return CKPT_VERSION_STRING; }

int ckpt_abi_version(void) { return CKPT_ABI_VERSION; }

const char* ckpt_code_name(int code) {
  if (code == CKPT_OK) return "OK";
  if (code < CKPT_INVALID_ARGUMENT || code > CKPT_FAILED_PRECONDITION) {
    return "Unknown";
  }
  // ErrorCodeName's views are of string literals, so NUL-terminated.
  return ckpt::ErrorCodeName(static_cast<ckpt::ErrorCode>(code)).data();
}

void ckpt_free(void* p) { std::free(p); }

int ckpt_manager_open(const char* url, const ckpt_options_t* options,
                      ckpt_manager_t** out, char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (url == nullptr || out == nullptr) {
      return NullArgument("ckpt_manager_open", "url or out");
    }
    static const ckpt_options_t* defaults = new ckpt_options_t();
    const ckpt_options_t& o = options == nullptr ? *defaults : *options;
    auto m = std::make_unique<ckpt_manager_t>();
    m->comm = o.communicator;
    ckpt::Options opts = o.options;
    opts.communicator = m->comm.get();
    if (!o.catalog_url.empty()) {
      const std::string target = o.catalog_url == "default"
                                     ? ckpt::DefaultCatalogUrl()
                                     : o.catalog_url;
      auto catalog = ckpt::OpenCatalogForJob(target, o.catalog_required);
      if (!catalog.ok()) return catalog.status();
      opts.catalog = std::shared_ptr<ckpt::Catalog>(std::move(*catalog));
    }
    auto opened = ckpt::CheckpointManager::Open(url, std::move(opts));
    if (!opened.ok()) return opened.status();
    m->manager = std::move(*opened);
    m->url = m->manager->storage().url();
    *out = m.release();
    return ckpt::Status();
  });
}

void ckpt_manager_close(ckpt_manager_t* manager) { delete manager; }

const char* ckpt_manager_url(const ckpt_manager_t* manager) {
  return manager == nullptr ? "" : manager->url.c_str();
}

int ckpt_manager_rank(const ckpt_manager_t* manager) {
  return manager == nullptr || !manager->comm ? 0 : manager->comm->rank();
}

int ckpt_manager_world_size(const ckpt_manager_t* manager) {
  return manager == nullptr || !manager->comm ? 1 : manager->comm->size();
}

int ckpt_manager_save(ckpt_manager_t* manager, int64_t step,
                      const ckpt_state_t* state,
                      const ckpt_save_options_t* options, char** result,
                      char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (manager == nullptr) return Unopened("ckpt_manager_save");
    if (state == nullptr) return NullArgument("ckpt_manager_save", "state");
    auto r = manager->manager->Save(step, state->state, SaveOptionsOf(options));
    if (!r.ok()) return r.status();
    SetOut(result, Dump(ckpt::records::SaveResultJson(*r)));
    return ckpt::Status();
  });
}

ckpt_save_t* ckpt_manager_save_async(ckpt_manager_t* manager, int64_t step,
                                     const ckpt_state_t* state,
                                     const ckpt_save_options_t* options) {
  if (manager == nullptr || state == nullptr) return nullptr;
  try {
    return new ckpt_save_t{manager->manager->SaveAsync(step, state->state,
                                                       SaveOptionsOf(options))};
  } catch (...) {
    return nullptr;
  }
}

int64_t ckpt_save_step(const ckpt_save_t* save) {
  return save == nullptr ? -1 : save->handle.step();
}

int ckpt_save_done(const ckpt_save_t* save) {
  return save == nullptr || save->handle.Done() ? 1 : 0;
}

int ckpt_save_wait(ckpt_save_t* save, char** result, char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (save == nullptr) return NullArgument("ckpt_save_wait", "the save");
    auto r = save->handle.Wait();
    if (!r.ok()) return r.status();
    SetOut(result, Dump(ckpt::records::SaveResultJson(*r)));
    return ckpt::Status();
  });
}

int ckpt_save_wait_staged(ckpt_save_t* save, char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (save == nullptr)
      return NullArgument("ckpt_save_wait_staged", "the save");
    return save->handle.WaitStaged();
  });
}

void ckpt_save_destroy(ckpt_save_t* save) { delete save; }

int ckpt_manager_load(ckpt_manager_t* manager, int64_t step,
                      ckpt_state_t* state, int strict, char** info,
                      char** errptr) {
  return ckpt_manager_load_ex(manager, step, state, strict, 1, info, errptr);
}

int ckpt_manager_load_ex(ckpt_manager_t* manager, int64_t step,
                         ckpt_state_t* state, int strict, int transactional,
                         char** info, char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (manager == nullptr) return Unopened("ckpt_manager_load");
    if (state == nullptr) return NullArgument("ckpt_manager_load", "state");
    auto r = manager->manager->Load(
        StepOrNewest(step), state->state,
        {.strict = strict != 0, .transactional = transactional != 0});
    if (!r.ok()) return r.status();
    SetOut(info, Dump(ckpt::records::InfoJson(*r)));
    return ckpt::Status();
  });
}

int ckpt_manager_load_rank_local(ckpt_manager_t* manager, int64_t step,
                                 const char* name, ckpt_state_t** out,
                                 char** info, char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (manager == nullptr) return Unopened("ckpt_manager_load_rank_local");
    if (name == nullptr || out == nullptr) {
      return NullArgument("ckpt_manager_load_rank_local", "name or out");
    }
    auto r = manager->manager->LoadRankLocal(StepOrNewest(step), name);
    if (!r.ok()) return r.status();
    SetOut(info, Dump(ckpt::records::InfoJson(r->info)));
    *out = new ckpt_state_t{std::move(r->state)};
    return ckpt::Status();
  });
}

int ckpt_manager_latest(ckpt_manager_t* manager, int64_t* step, char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (manager == nullptr) return Unopened("ckpt_manager_latest");
    if (step == nullptr) return NullArgument("ckpt_manager_latest", "step");
    auto r = manager->manager->Latest();
    if (!r.ok()) return r.status();
    *step = r->value_or(-1);
    return ckpt::Status();
  });
}

int ckpt_manager_list(ckpt_manager_t* manager, char** json, char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (manager == nullptr) return Unopened("ckpt_manager_list");
    auto r = manager->manager->List();
    if (!r.ok()) return r.status();
    nlohmann::json out = nlohmann::json::array();
    for (const ckpt::CheckpointInfo& i : *r) {
      out.push_back(ckpt::records::InfoJson(i));
    }
    SetOut(json, Dump(out));
    return ckpt::Status();
  });
}

namespace {

// ckpt_manager_describe and its columns: one description, two texts.
int Describe(ckpt_manager_t* manager, int64_t step, char** json, char** errptr,
             const char* fn,
             std::string (*text)(const ckpt::CheckpointDescription&)) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (manager == nullptr) return Unopened(fn);
    auto r = manager->manager->Describe(StepOrNewest(step));
    if (!r.ok()) return r.status();
    SetOut(json, text(*r));
    return ckpt::Status();
  });
}

}  // namespace

int ckpt_manager_describe(ckpt_manager_t* manager, int64_t step, char** json,
                          char** errptr) {
  return Describe(manager, step, json, errptr, "ckpt_manager_describe",
                  ckpt::records::DescriptionText);
}

int ckpt_manager_describe_columns(ckpt_manager_t* manager, int64_t step,
                                  char** json, char** errptr) {
  return Describe(manager, step, json, errptr, "ckpt_manager_describe_columns",
                  ckpt::records::DescriptionColumnsText);
}

int ckpt_manager_verify(ckpt_manager_t* manager, int64_t step, char** json,
                        char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (manager == nullptr) return Unopened("ckpt_manager_verify");
    int64_t target = step;
    if (target < 0) {
      auto latest = manager->manager->Latest();
      if (!latest.ok()) return latest.status();
      if (!*latest) {
        return ckpt::NotFoundError("verify: " + manager->url +
                                   " holds no committed checkpoint");
      }
      target = **latest;
    }
    auto r = manager->manager->Verify(target);
    if (!r.ok()) return r.status();
    SetOut(json, Dump(ckpt::records::VerifyJson(*r)));
    return ckpt::Status();
  });
}

int ckpt_manager_delete(ckpt_manager_t* manager, int64_t step,
                        int rewrite_dependants, char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (manager == nullptr) return Unopened("ckpt_manager_delete");
    return manager->manager
        ->Delete(step, {.rewrite_dependants = rewrite_dependants != 0})
        .status();
  });
}

int ckpt_manager_delete_report(ckpt_manager_t* manager, int64_t step,
                               int rewrite_dependants, int dry_run, char** json,
                               char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (manager == nullptr) return Unopened("ckpt_manager_delete_report");
    auto r = manager->manager->Delete(
        step, {.rewrite_dependants = rewrite_dependants != 0,
               .dry_run = dry_run != 0});
    if (!r.ok()) return r.status();
    SetOut(json, Dump(ckpt::records::DeleteJson(*r)));
    return ckpt::Status();
  });
}

int ckpt_manager_gc(ckpt_manager_t* manager, int dry_run, char** json,
                    char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (manager == nullptr) return Unopened("ckpt_manager_gc");
    auto r = manager->manager->GarbageCollect({.dry_run = dry_run != 0});
    if (!r.ok()) return r.status();
    SetOut(json, Dump(ckpt::records::GcJson(*r)));
    return ckpt::Status();
  });
}

}  // extern "C"

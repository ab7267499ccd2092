// The C API's tiers (include/ckpt/c.h, ckpt/tiered.h).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "c_api_internal.h"
#include "capi/records.h"
#include "ckpt/tiered.h"

using ckpt::capi::Guard;
using ckpt::capi::NullArgument;
using ckpt::capi::SetOut;
using ckpt::records::Dump;

struct ckpt_tiered_t {
  std::unique_ptr<ckpt::TieredManager> tiers;
};

struct ckpt_tier_save_t {
  ckpt::TierSaveHandle handle;
};

namespace {

ckpt::Result<ckpt::TierSaveOptions> TierSaveOptionsOf(
    const ckpt_save_options_t* options, int durable) {
  if (durable != CKPT_TIER_BY_INTERVAL && durable != CKPT_TIER_DURABLE &&
      durable != CKPT_TIER_SKIP_DURABLE) {
    return ckpt::InvalidArgumentError(
        "tiered save: `durable` is " + std::to_string(durable) +
        ", not CKPT_TIER_BY_INTERVAL, CKPT_TIER_DURABLE or "
        "CKPT_TIER_SKIP_DURABLE");
  }
  ckpt::TierSaveOptions o;
  if (options != nullptr) o.save = options->options;
  // A tiered save's handle has no WaitStaged: it returns after the copy.
  o.save.stage_in_background = false;
  o.durable = durable == CKPT_TIER_DURABLE;
  o.skip_durable = durable == CKPT_TIER_SKIP_DURABLE;
  return o;
}

}  // namespace

extern "C" {

int ckpt_tiered_open(ckpt_manager_t* durable, const char* local_url,
                     int64_t local_every_steps, int64_t durable_every_steps,
                     int local_keep, int replicas,
                     double replication_bytes_per_second,
                     const int* node_of_rank, size_t n_nodes,
                     ckpt_tiered_t** out, char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (durable == nullptr || local_url == nullptr || out == nullptr) {
      return NullArgument("ckpt_tiered_open", "durable, local_url or out");
    }
    if (node_of_rank == nullptr && n_nodes != 0) {
      return NullArgument("ckpt_tiered_open", "node_of_rank");
    }
    ckpt::TierOptions o;
    o.local_url = local_url;
    o.local_every_steps = local_every_steps;
    o.durable_every_steps = durable_every_steps;
    if (local_keep != 0) o.local_keep = local_keep;
    o.replicas = replicas;  // CKPT_TIER_REPLICAS_AUTO is kReplicasAuto
    o.replication_bytes_per_second = replication_bytes_per_second;
    if (n_nodes != 0)
      o.node_of_rank.assign(node_of_rank, node_of_rank + n_nodes);
    auto opened = ckpt::TieredManager::Open(*durable->manager, std::move(o));
    if (!opened.ok()) return opened.status();
    *out = new ckpt_tiered_t{std::move(*opened)};
    return ckpt::Status();
  });
}

void ckpt_tiered_close(ckpt_tiered_t* tiers) { delete tiers; }

int ckpt_tiered_node(const ckpt_tiered_t* tiers) {
  return tiers == nullptr ? 0 : tiers->tiers->node();
}

int ckpt_tiered_save(ckpt_tiered_t* tiers, int64_t step,
                     const ckpt_state_t* state,
                     const ckpt_save_options_t* options, int durable,
                     char** result, char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (tiers == nullptr || state == nullptr) {
      return NullArgument("ckpt_tiered_save", "tiers or state");
    }
    auto o = TierSaveOptionsOf(options, durable);
    if (!o.ok()) return o.status();
    auto r = tiers->tiers->Save(step, state->state, *o);
    if (!r.ok()) return r.status();
    SetOut(result, Dump(ckpt::records::TierSaveResultJson(*r)));
    return ckpt::Status();
  });
}

ckpt_tier_save_t* ckpt_tiered_save_async(ckpt_tiered_t* tiers, int64_t step,
                                         const ckpt_state_t* state,
                                         const ckpt_save_options_t* options,
                                         int durable) {
  if (tiers == nullptr || state == nullptr) return nullptr;
  try {
    auto o = TierSaveOptionsOf(options, durable);
    if (!o.ok()) return nullptr;
    return new ckpt_tier_save_t{
        tiers->tiers->SaveAsync(step, state->state, *o)};
  } catch (...) {
    return nullptr;
  }
}

int ckpt_tier_save_done(const ckpt_tier_save_t* save) {
  return save == nullptr || save->handle.Done() ? 1 : 0;
}

int ckpt_tier_save_wait(ckpt_tier_save_t* save, char** result, char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (save == nullptr) return NullArgument("ckpt_tier_save_wait", "the save");
    auto r = save->handle.Wait();
    if (!r.ok()) return r.status();
    SetOut(result, Dump(ckpt::records::TierSaveResultJson(*r)));
    return ckpt::Status();
  });
}

void ckpt_tier_save_destroy(ckpt_tier_save_t* save) { delete save; }

int ckpt_tiered_restore(ckpt_tiered_t* tiers, ckpt_state_t* state, int strict,
                        char** result, char** errptr) {
  return ckpt_tiered_restore_ex(tiers, state, strict, 1, result, errptr);
}

int ckpt_tiered_restore_ex(ckpt_tiered_t* tiers, ckpt_state_t* state,
                           int strict, int transactional, char** result,
                           char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (tiers == nullptr || state == nullptr) {
      return NullArgument("ckpt_tiered_restore", "tiers or state");
    }
    auto r = tiers->tiers->Restore(
        state->state,
        {.strict = strict != 0, .transactional = transactional != 0});
    if (!r.ok()) return r.status();
    SetOut(result, Dump(ckpt::records::TierRestoreResultJson(*r)));
    return ckpt::Status();
  });
}

int ckpt_local_tier_list(const char* url, char** json, char** errptr) {
  return Guard(errptr, [&]() -> ckpt::Status {
    if (url == nullptr) return NullArgument("ckpt_local_tier_list", "url");
    auto shares = ckpt::ListLocalTier(url);
    if (!shares.ok()) return shares.status();
    nlohmann::json out = nlohmann::json::array();
    for (const auto& s : *shares)
      out.push_back(ckpt::records::LocalShareJson(s));
    SetOut(json, Dump(out));
    return ckpt::Status();
  });
}

}  // extern "C"

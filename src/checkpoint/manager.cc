// CheckpointManager: the save and load protocols of DESIGN.md.
//
// Save, on every rank together (rank 0 is the coordinator):
//   1. The coordinator decides: the step must not be committed yet, and
//      min_seconds_between_saves may skip it. It draws the attempt id. The
//      decision is broadcast, so every rank acts on the same one.
//   2. Every rank offers what it holds; the offers are all-gathered and every
//      rank computes the same plan (planner.h): who writes which piece.
//   3. Every rank writes its pieces to "step-N/rRRRRR-<attempt>.safetensors",
//      checksumming chunks as they stream out, and makes the object durable.
//   4. Every rank's result (its chunks, or its error) is all-gathered.
//   5. If any rank failed, nobody commits; every rank returns that error and
//      the attempt's objects are garbage.
//   6. Otherwise the coordinator writes step-N/MANIFEST.json with
//      create-if-absent. That write is the commit.
//   7. The coordinator records the checkpoint in the catalog (if any; a
//      failure there is a warning: the commit stands), updates the LATEST
//      hint, applies retention and removes dead attempts, then broadcasts
//      the outcome; every rank returns it.
// A crash anywhere leaves the earlier checkpoints as they were, plus either
// nothing or the complete new one: without its manifest a step does not exist.
//
// Asynchronous save (SaveAsync): on the caller's thread, wait until no save
// is in flight, copy the state into the reused staging memory and mark the
// manager busy; the caller returns. A background thread then runs steps 1-7
// above on the staged copy, and on every rank the collectives run on that
// thread. While the manager is busy every public call waits (the busy flag
// is a lock held across threads), so the communicator and the manifest cache
// are used by one thread at a time and every rank sees the same order of
// collectives. A background error is kept until the next Save or SaveAsync
// reports it: deterministically on every rank, whether or not Wait() saw it.
//
// Load: find the newest step whose manifest validates (or the one asked for),
// check that every needed object exists with the size the manifest records,
// and only then read, checking each chunk's checksum.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "checkpoint/catalog_record.h"
#include "checkpoint/incremental.h"
#include "checkpoint/planner.h"
#include "checkpoint/reader.h"
#include "checkpoint/retention.h"
#include "checkpoint/staging.h"
#include "checkpoint/writer.h"
#include "ckpt/checkpoint_manager.h"
#include "format/constants.h"
#include "format/manifest.h"
#include "format/safetensors.h"
#include "storage/file/file_storage.h"
#include "util/bytes.h"
#include "util/log.h"
#include "util/names.h"
#include "util/thread_pool.h"

namespace ckpt {

using format::Manifest;
using nlohmann::json;

namespace {

std::string NewAttemptId() {
  std::random_device rd;
  std::mt19937_64 gen(
      (uint64_t{rd()} << 32) ^ rd() ^
      std::chrono::steady_clock::now().time_since_epoch().count());
  static const char* kHex = "0123456789abcdef";
  const uint64_t v = gen();
  std::string out(format::kAttemptHexDigits, '0');
  for (int i = 0; i < format::kAttemptHexDigits; ++i)
    out[i] = kHex[(v >> (4 * i)) & 15];
  return out;
}

// Statuses cross ranks as JSON.
json StatusToJson(const Status& s) {
  return {{"code", static_cast<int>(s.code())}, {"message", s.message()}};
}

Status StatusFromJson(const json& j) {
  if (!j.is_object() || !j.contains("code") || !j["code"].is_number_integer()) {
    return AbortedError("a rank sent an unreadable status");
  }
  const auto code = static_cast<ErrorCode>(j["code"].get<int>());
  if (code == ErrorCode::kOk) return Status();
  return Status(code, j.value("message", std::string()));
}

CheckpointInfo InfoFromManifest(const Manifest& m) {
  CheckpointInfo info;
  info.step = m.step;
  info.epoch = m.epoch;
  info.created_unix_ms = m.created_unix_ms;
  info.job_id = m.job_id;
  info.world_size = m.world_size;
  info.hosts = m.hosts;
  info.bytes = m.OwnObjectBytes();
  info.referenced_bytes = m.TotalObjectBytes() - info.bytes;
  info.depends_on = m.depends_on;
  info.parent = m.parent;
  info.chain = m.chain;
  info.metrics = m.metrics;
  info.metadata = m.metadata;
  info.num_entries = m.entries.size();
  return info;
}

// Runs `f`, turning an escaping exception into an error: no exception crosses
// the library boundary.
template <typename F>
auto Guard(std::string_view op, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return IOError(std::string(op) + ": out of memory");
  } catch (const std::exception& e) {
    return IOError(std::string(op) + ": " + e.what());
  }
}

// MakeOffer, with an exception turned into an offer that carries the error:
// a rank that throws must still take part in the collectives, or the other
// ranks would wait for it forever.
Offer SafeOffer(const State& state, const std::string& host) {
  try {
    return MakeOffer(state, host);
  } catch (const std::exception& e) {
    Offer failed;
    failed.host = host;
    failed.error_code = ErrorCode::kIOError;
    failed.error_message = std::string("building the save plan: ") + e.what();
    return failed;
  }
}

// Splits "step-000000000042/file" into its step and file name.
bool SplitStepKey(std::string_view key, int64_t* step, std::string_view* file) {
  const size_t slash = key.find('/');
  if (slash == std::string_view::npos) return false;
  *step = format::ParseStepDirName(key.substr(0, slash));
  *file = key.substr(slash + 1);
  return *step >= 0 && file->find('/') == std::string_view::npos;
}

}  // namespace

std::string RankLocalName(std::string_view name, int rank) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "@rank%05d", rank);
  return std::string(name) + buf;
}

class CheckpointManager::Impl {
 public:
  Impl(std::unique_ptr<Storage> storage, Options options)
      : storage_(std::move(storage)), options_(std::move(options)) {
    if (options_.communicator == nullptr) {
      local_ = NewLocalCommunicator();
      options_.communicator = local_.get();
    }
    if (options_.job_id.empty()) options_.job_id = storage_->url();
    if (!options_.now_unix_ms) {
      options_.now_unix_ms = [] {
        return std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::system_clock::now().time_since_epoch())
            .count();
      };
    }
  }

  ~Impl();

  Storage& storage() { return *storage_; }
  const Options& options() const { return options_; }
  Communicator& comm() { return *options_.communicator; }
  std::mutex& mu() { return mu_; }

  // `state_error`, when set, stands for the state (a rank whose state could
  // not be staged still takes part in the collectives, and fails them).
  Result<SaveResult> Save(int64_t step, const State& state,
                          const SaveOptions& save,
                          const Status& state_error = Status());
  Result<CheckpointInfo> Load(std::optional<int64_t> step, State& state,
                              const LoadOptions& load);
  Result<LoadedCheckpoint> LoadAll(std::optional<int64_t> step,
                                   const std::vector<std::string>& names);
  Result<LoadedCheckpoint> LoadRankLocal(std::optional<int64_t> step,
                                         std::string_view name);
  Result<std::optional<int64_t>> Latest();
  Result<std::vector<CheckpointInfo>> List();
  Result<CheckpointDescription> Describe(std::optional<int64_t> step);
  Result<VerifyReport> Verify(int64_t step, const ProgressFn& progress);
  // `going`: steps deleted in the same run, whose dependence on `step` does
  // not hold it back (may be null).
  Status Delete(int64_t step, const std::set<int64_t>* going,
                std::vector<std::string>* deleted, uint64_t* bytes,
                bool dry_run, bool rewrite_dependants = false);
  Result<GcReport> GarbageCollect(const GcOptions& gc);

  // --- Parallel I/O
  // The pool that reads (and writes) beside the calling thread; null when
  // Options::io_threads is 1.
  ThreadPool* IoPool();
  // Appends `read`, cut into slabs for the pool, to `reads`.
  void AddSlabs(BoxRead read, std::vector<BoxRead>& reads) const;

  // --- Asynchronous save
  // Locks mu_ once no asynchronous save is in flight.
  std::unique_lock<std::mutex> Acquire();
  // The error of the last background save, once (then it is cleared).
  Status TakeAsyncError();
  // SaveAsync, under `lock` (from Acquire's mutex, not yet waited).
  void StartAsync(std::unique_lock<std::mutex>& lock, int64_t step,
                  const State& state, const SaveOptions& save,
                  const std::shared_ptr<SaveHandle::Shared>& handle);

 private:
  // Steps with a MANIFEST.json object, newest first, with the object's info.
  Result<std::vector<std::pair<int64_t, ObjectInfo>>> ManifestObjects();
  // Reads and validates a manifest (cached: committed manifests never change
  // under the same size and mtime).
  Result<std::shared_ptr<const Manifest>> ReadManifest(int64_t step);
  Result<std::shared_ptr<const Manifest>> ReadManifest(int64_t step,
                                                       const ObjectInfo& info);
  // The asked-for step, or the newest valid one; agreed across ranks.
  Result<std::shared_ptr<const Manifest>> Resolve(std::optional<int64_t> step);
  Result<std::shared_ptr<const Manifest>> NewestValid();
  // Checks that the objects `m` names for `entries` exist with the recorded
  // sizes, before a single byte is read into the caller's buffers.
  Status CheckObjects(const Manifest& m,
                      const std::vector<const format::EntryRecord*>& entries);
  // Reads `records` into `out.state` under the names `names`.
  Status ReadInto(const Manifest& m,
                  const std::vector<const format::EntryRecord*>& records,
                  const std::vector<std::string>& names, LoadedCheckpoint& out);
  std::string DecideSave(int64_t step, const SaveOptions& save);
  // The parent an incremental save of `step` compares with, as decision
  // fields ({} for a full save): IncrementalPolicy applied to the newest
  // committed checkpoint below `step`.
  json DecideParent(int64_t step);
  // Whether `state` is the asynchronous save's staged copy, whose memory
  // (huge pages, large entries page-aligned) is written in place.
  bool IsStaged(const State& state) const { return &state == &staged_; }
  // Step 3 of an incremental save on this rank (collective: every rank
  // calls it): the result to gather, with chunk rows that reference the
  // parent's objects as [offset, length, checksum, i], where "refs"[i] is
  // the object's [key, size, rank].
  json WriteIncremental(int64_t step, const std::string& attempt,
                        const State& state, const SaveOptions& save,
                        const SavePlan& plan, const std::vector<size_t>& mine,
                        int64_t parent);
  std::string Commit(int64_t step, const SaveOptions& save,
                     const std::string& attempt, const SavePlan& plan,
                     const std::vector<json>& results, int64_t parent = -1,
                     int64_t parent_chain = 0);
  // Copies the chunks of `dependant` that lie in objects of `step` into a new
  // object of its own and rewrites its manifest, so `step` can go.
  Status RewriteDependant(int64_t dependant, int64_t step);
  void UpdateLatestHint();
  std::string Where() const { return storage_->url(); }

  std::unique_ptr<Storage> storage_;
  Options options_;
  std::unique_ptr<Communicator> local_;
  std::mutex mu_;  // serializes the public calls
  std::map<int64_t, std::pair<ObjectInfo, std::shared_ptr<const Manifest>>>
      cache_;
  // Asynchronous save, guarded by mu_ (but the staged state is the
  // background thread's while busy_).
  std::condition_variable idle_;  // signalled when busy_ turns false
  bool busy_ = false;             // a background save is in flight
  Status async_error_;            // of the last background save, unreported
  std::thread worker_;            // the last background save's thread
  StagingArena staging_;
  State staged_;
  std::unique_ptr<ThreadPool> io_pool_;  // made on first use
  // The step this manager's last successful Save committed; -1 for none.
  int64_t last_saved_step_ = -1;
};

// --- Manifests
// ----------------------------------------------------------------

Result<std::vector<std::pair<int64_t, ObjectInfo>>>
CheckpointManager::Impl::ManifestObjects() {
  CKPT_ASSIGN_OR_RETURN(std::vector<ObjectInfo> objects,
                        storage_->List(format::kStepPrefix));
  std::vector<std::pair<int64_t, ObjectInfo>> out;
  for (ObjectInfo& o : objects) {
    int64_t step;
    std::string_view file;
    if (SplitStepKey(o.key, &step, &file) && file == format::kManifestName) {
      out.emplace_back(step, std::move(o));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

Result<std::shared_ptr<const Manifest>> CheckpointManager::Impl::ReadManifest(
    int64_t step, const ObjectInfo& info) {
  auto it = cache_.find(step);
  if (it != cache_.end() && it->second.first.size == info.size &&
      it->second.first.mtime_unix_ms == info.mtime_unix_ms) {
    return it->second.second;
  }
  const std::string key = format::ManifestKey(step);
  const std::string what = "manifest " + key + " in " + Where();
  if (info.size > format::kMaxManifestBytes) {
    return DataLossError(what + ": " + std::to_string(info.size) +
                         " bytes is beyond the manifest size limit");
  }
  CKPT_ASSIGN_OR_RETURN(std::string bytes, storage_->ReadAll(key));
  CKPT_ASSIGN_OR_RETURN(Manifest m, format::DecodeManifest(bytes, what));
  if (m.step != step) {
    return DataLossError(what + ": records step " + std::to_string(m.step));
  }
  auto shared = std::make_shared<const Manifest>(std::move(m));
  cache_[step] = {info, shared};
  return shared;
}

Result<std::shared_ptr<const Manifest>> CheckpointManager::Impl::ReadManifest(
    int64_t step) {
  if (step < 0) {
    return InvalidArgumentError("step " + std::to_string(step) +
                                " is negative");
  }
  Result<ObjectInfo> info = storage_->Stat(format::ManifestKey(step));
  if (!info.ok()) {
    if (info.status().code() == ErrorCode::kNotFound) {
      return NotFoundError("step " + std::to_string(step) +
                           " is not a committed checkpoint in " + Where());
    }
    return info.status();
  }
  return ReadManifest(step, *info);
}

Result<std::shared_ptr<const Manifest>> CheckpointManager::Impl::NewestValid() {
  CKPT_ASSIGN_OR_RETURN(auto manifests, ManifestObjects());
  for (const auto& [step, info] : manifests) {
    Result<std::shared_ptr<const Manifest>> m = ReadManifest(step, info);
    if (m.ok()) return m;
    // A damaged manifest is not a checkpoint; the one before it may be.
    LogWarning("skipping step " + std::to_string(step) + ": " +
               m.status().ToString());
  }
  return NotFoundError("no committed checkpoint in " + Where());
}

Result<std::shared_ptr<const Manifest>> CheckpointManager::Impl::Resolve(
    std::optional<int64_t> step) {
  if (step) return ReadManifest(*step);
  if (comm().size() == 1) return NewestValid();
  // Rank 0 decides which step is newest, so that ranks racing a concurrent
  // commit never load different steps.
  std::string mine;
  if (comm().rank() == 0) {
    Result<std::shared_ptr<const Manifest>> m = NewestValid();
    mine = m.ok() ? json{{"step", (*m)->step}}.dump()
                  : json{{"status", StatusToJson(m.status())}}.dump();
  }
  CKPT_ASSIGN_OR_RETURN(std::string agreed, comm().Broadcast(mine, 0));
  json j = json::parse(agreed, nullptr, false);
  if (j.is_object() && j.contains("step") && j["step"].is_number_integer()) {
    return ReadManifest(j["step"].get<int64_t>());
  }
  Status s = j.is_object() && j.contains("status")
                 ? StatusFromJson(j["status"])
                 : AbortedError("rank 0 sent an unreadable step");
  return s.ok() ? AbortedError("rank 0 sent no step") : s;
}

Status CheckpointManager::Impl::CheckObjects(
    const Manifest& m, const std::vector<const format::EntryRecord*>& entries) {
  std::set<uint32_t> needed;
  for (const auto* e : entries) {
    for (const auto& p : e->pieces) {
      for (const auto& c : p.chunks) needed.insert(c.object);
    }
  }
  for (uint32_t i : needed) {
    const format::ObjectRecord& o = m.objects[i];
    Result<ObjectInfo> info = storage_->Stat(o.key);
    if (!info.ok()) {
      if (info.status().code() == ErrorCode::kNotFound) {
        return DataLossError("step " + std::to_string(m.step) + " in " +
                             Where() + ": data object " + o.key +
                             " is missing");
      }
      return info.status().WithContext("stat " + o.key);
    }
    if (info->size != o.size) {
      return DataLossError("step " + std::to_string(m.step) + " in " + Where() +
                           ": data object " + o.key + " is " +
                           std::to_string(info->size) +
                           " bytes but the manifest records " +
                           std::to_string(o.size) + " (truncated or replaced)");
    }
  }
  return Status();
}

// --- Save
// ---------------------------------------------------------------------

std::string CheckpointManager::Impl::DecideSave(int64_t step,
                                                const SaveOptions& save) {
  auto fail = [](const Status& s) {
    return json{{"status", StatusToJson(s)}}.dump();
  };
  if (step < 0) {
    return fail(
        InvalidArgumentError("step " + std::to_string(step) + " is negative"));
  }
  if (step > format::kMaxStep) {
    return fail(InvalidArgumentError("step " + std::to_string(step) +
                                     " does not fit in 12 digits"));
  }
  for (const auto& [k, v] : save.metrics) {
    if (!std::isfinite(v)) {
      return fail(
          InvalidArgumentError("metric " + Quote(k) + " is not finite"));
    }
  }
  Result<ObjectInfo> existing = storage_->Stat(format::ManifestKey(step));
  if (existing.ok()) {
    return fail(AlreadyExistsError("step " + std::to_string(step) +
                                   " is already committed in " + Where()));
  }
  if (existing.status().code() != ErrorCode::kNotFound) {
    return fail(
        existing.status().WithContext("save step " + std::to_string(step)));
  }
  if (options_.min_seconds_between_saves > 0) {
    Result<std::shared_ptr<const Manifest>> newest = NewestValid();
    if (newest.ok()) {
      const double since =
          (options_.now_unix_ms() - (*newest)->created_unix_ms) / 1000.0;
      if (since < options_.min_seconds_between_saves) {
        return json{{"skip", true}}.dump();
      }
    }
  }
  json out = save.incremental ? DecideParent(step) : json::object();
  out["attempt"] = NewAttemptId();
  return out.dump();
}

json CheckpointManager::Impl::DecideParent(int64_t step) {
  Result<std::vector<std::pair<int64_t, ObjectInfo>>> manifests =
      ManifestObjects();
  if (!manifests.ok()) return json::object();  // a full save is always safe
  for (const auto& [s, info] : *manifests) {
    if (s >= step) continue;
    Result<std::shared_ptr<const Manifest>> m = ReadManifest(s, info);
    if (!m.ok()) continue;
    const IncrementalPolicy& policy = options_.incremental;
    const int64_t next = (*m)->chain + 1;
    int64_t cap = format::kMaxDependsOn;
    if (policy.max_chain > 0) cap = std::min<int64_t>(cap, policy.max_chain);
    if (next > cap || (policy.full_every > 0 && next >= policy.full_every) ||
        (*m)->chunk_size != options_.chunk_size) {
      return json::object();
    }
    return json{{"parent", s}, {"parent_chain", (*m)->chain}};
  }
  return json::object();
}

json CheckpointManager::Impl::WriteIncremental(
    int64_t step, const std::string& attempt, const State& state,
    const SaveOptions& save, const SavePlan& plan,
    const std::vector<size_t>& mine, int64_t parent) {
  Communicator& c = comm();
  // A rank that cannot read the parent writes all its pieces: correct, just
  // larger.
  Result<std::shared_ptr<const Manifest>> old = ReadManifest(parent);
  const Manifest* base = old.ok() ? old->get() : nullptr;
  Result<IncrementalWrites> w = Guard("plan incremental writes", [&] {
    // Dirty rows say what changed since the caller's previous save; they
    // describe the parent only if that save is the parent (not when it was
    // deleted since, skipped, or made by another process).
    return PlanIncrementalWrites(plan, mine, state, base, options_.chunk_size,
                                 c.size(), save.dirty_rows,
                                 parent == last_saved_step_);
  });
  // Every rank learns what all could reference, so all drop the references
  // together when too little is unchanged.
  const json mine_stats =
      w.ok() ? json::array({w->referenced_bytes, w->total_bytes})
             : json::array({0, 0});
  Result<std::vector<std::string>> stats = c.AllGather(mine_stats.dump());
  if (!stats.ok()) return {{"status", StatusToJson(stats.status())}};
  if (!w.ok()) return {{"status", StatusToJson(w.status())}};
  uint64_t referenced = 0, total = 0;
  for (const std::string& st : *stats) {
    json j = json::parse(st, nullptr, false);
    if (!j.is_array() || j.size() != 2) continue;
    referenced += j[0].get<uint64_t>();
    total += j[1].get<uint64_t>();
  }
  if (static_cast<double>(referenced) <
      options_.incremental.min_referenced_fraction *
          static_cast<double>(total)) {
    w = PlanIncrementalWrites(plan, mine, state, nullptr, options_.chunk_size,
                              c.size(), {}, false);
    if (!w.ok()) return {{"status", StatusToJson(w.status())}};
  }
  json result = json::object();
  std::optional<WrittenObject> written;
  if (!w->runs.empty()) {
    const std::string key = format::DataObjectKey(step, c.rank(), attempt);
    Result<WrittenObject> r = Guard("write " + key, [&] {
      return WriteDataObject(*storage_, key, w->runs, options_.chunk_size,
                             IsStaged(state));
    });
    if (!r.ok()) return {{"status", StatusToJson(r.status())}};
    written = std::move(r).value();
    result["key"] = key;
    result["size"] = written->size;
  }
  // Referenced objects are listed once; a row names one by its index.
  json refs = json::array();
  std::map<std::string_view, size_t> ref_index;
  json pieces = json::array();
  for (size_t k = 0; k < mine.size(); ++k) {
    json list = json::array();
    for (const ChunkSlot& slot : w->slots[k]) {
      if (slot.ref) {
        const format::ChunkRecord& ch = slot.ref->chunk;
        const format::ObjectRecord& o = *slot.ref->object;
        auto [it, added] = ref_index.try_emplace(o.key, refs.size());
        if (added) refs.push_back({o.key, o.size, o.rank});
        list.push_back({ch.offset, ch.length, ch.checksum.Hex(), it->second});
      } else {
        const format::ChunkRecord& ch = written->chunks[slot.run][slot.index];
        list.push_back({ch.offset, ch.length, ch.checksum.Hex()});
      }
    }
    pieces.push_back({{"piece", mine[k]}, {"chunks", std::move(list)}});
  }
  result["pieces"] = std::move(pieces);
  result["refs"] = std::move(refs);
  return result;
}

Result<SaveResult> CheckpointManager::Impl::Save(int64_t step,
                                                 const State& state,
                                                 const SaveOptions& save,
                                                 const Status& state_error) {
  const std::string op = "save step " + std::to_string(step) + " in " + Where();
  Communicator& c = comm();
  // 1. The coordinator decides.
  std::string decision;
  if (c.rank() == 0) decision = DecideSave(step, save);
  CKPT_ASSIGN_OR_RETURN(decision, c.Broadcast(decision, 0));
  json d = json::parse(decision, nullptr, false);
  if (!d.is_object())
    return AbortedError(op + ": unreadable decision from rank 0");
  if (d.contains("status")) return StatusFromJson(d["status"]);
  if (d.value("skip", false)) {
    SaveResult skipped;
    skipped.skipped = true;
    return skipped;
  }
  const std::string attempt = d.value("attempt", std::string());

  // 2. Plan.
  Offer offer = SafeOffer(state, c.host_name());
  if (!state_error.ok()) {
    offer = Offer{c.host_name(), state_error.code(), state_error.message(), {}};
  }
  CKPT_ASSIGN_OR_RETURN(std::vector<std::string> offers,
                        c.AllGather(EncodeOffer(offer)));
  std::vector<Offer> decoded;
  for (const std::string& o : offers) {
    CKPT_ASSIGN_OR_RETURN(Offer offer, DecodeOffer(o));
    decoded.push_back(std::move(offer));
  }
  Result<SavePlan> planned = MakePlan(decoded);
  if (!planned.ok()) return planned.status().WithContext(op);
  const SavePlan& plan = *planned;

  // 3. Write this rank's pieces.
  std::vector<size_t> mine;
  std::vector<PieceToWrite> pieces;
  for (size_t i = 0; i < plan.pieces.size(); ++i) {
    const PlannedPiece& p = plan.pieces[i];
    if (p.writer != c.rank()) continue;
    const PlannedEntry& e = plan.entries[p.entry];
    const Entry* local = state.Find(e.name);
    mine.push_back(i);
    PieceToWrite w;
    w.tensor_name = e.name;
    w.dtype = e.dtype;
    w.lengths = p.lengths;
    w.bytes = std::span<const std::byte>(local->tensor.data, p.bytes);
    pieces.push_back(std::move(w));
  }
  json result;
  if (d.contains("parent")) {
    result = WriteIncremental(step, attempt, state, save, plan, mine,
                              d["parent"].get<int64_t>());
  } else if (!mine.empty()) {
    const std::string key = format::DataObjectKey(step, c.rank(), attempt);
    Result<WrittenObject> written = Guard("write " + key, [&] {
      return WriteDataObject(*storage_, key, pieces, options_.chunk_size,
                             IsStaged(state));
    });
    if (written.ok()) {
      json chunks = json::array();
      for (size_t k = 0; k < mine.size(); ++k) {
        json list = json::array();
        for (const auto& ch : written->chunks[k]) {
          list.push_back({ch.offset, ch.length, ch.checksum.Hex()});
        }
        chunks.push_back({{"piece", mine[k]}, {"chunks", std::move(list)}});
      }
      result = {
          {"key", key}, {"size", written->size}, {"pieces", std::move(chunks)}};
    } else {
      result = {{"status", StatusToJson(written.status())}};
    }
  } else {
    result = json::object();
  }

  // 4. Gather the results; 5. any failure fails every rank. A single rank
  // keeps its own: with small chunks the result holds a row per chunk, and
  // writing it out as text and parsing it back took a third of a save.
  std::vector<json> results;
  if (c.size() == 1) {
    results.push_back(std::move(result));
  } else {
    CKPT_ASSIGN_OR_RETURN(std::vector<std::string> gathered,
                          c.AllGather(result.dump()));
    for (size_t r = 0; r < gathered.size(); ++r) {
      json j = json::parse(gathered[r], nullptr, false);
      if (!j.is_object()) {
        return AbortedError(op + ": rank " + std::to_string(r) +
                            " sent an unreadable result");
      }
      results.push_back(std::move(j));
    }
  }
  for (size_t r = 0; r < results.size(); ++r) {
    if (results[r].contains("status")) {
      Status s = StatusFromJson(results[r]["status"]);
      if (c.size() > 1) s = s.WithContext("rank " + std::to_string(r));
      return s.WithContext(op);
    }
  }

  // 6-7. The coordinator commits; everyone returns its outcome.
  std::string outcome;
  if (c.rank() == 0) {
    Result<std::string> committed =
        Guard("commit", [&]() -> Result<std::string> {
          return Commit(step, save, attempt, plan, results,
                        d.value("parent", int64_t{-1}),
                        d.value("parent_chain", int64_t{0}));
        });
    outcome = committed.ok()
                  ? *committed
                  : json{{"status", StatusToJson(committed.status())}}.dump();
  }
  CKPT_ASSIGN_OR_RETURN(outcome, c.Broadcast(outcome, 0));
  json o = json::parse(outcome, nullptr, false);
  if (!o.is_object())
    return AbortedError(op + ": unreadable outcome from rank 0");
  if (o.contains("status")) return StatusFromJson(o["status"]);
  // Every rank reads the committed manifest's facts the same way.
  SaveResult out;
  Result<std::shared_ptr<const Manifest>> committed = ReadManifest(step);
  if (!committed.ok())
    return committed.status().WithContext(op + ": after commit");
  out.info = InfoFromManifest(**committed);
  last_saved_step_ = step;
  out.deleted_steps = o.value("deleted_steps", std::vector<int64_t>());
  return out;
}

std::string CheckpointManager::Impl::Commit(
    int64_t step, const SaveOptions& save, const std::string& attempt,
    const SavePlan& plan, const std::vector<json>& results, int64_t parent,
    int64_t parent_chain) {
  auto fail = [](const Status& s) {
    return json{{"status", StatusToJson(s)}}.dump();
  };
  const std::string op =
      "commit step " + std::to_string(step) + " in " + Where();
  Manifest m;
  m.version = format::kManifestVersion;
  m.job_id = options_.job_id;
  m.step = step;
  m.epoch = save.epoch;
  m.created_unix_ms = options_.now_unix_ms();
  m.attempt = attempt;
  m.world_size = static_cast<int32_t>(plan.hosts.size());
  m.hosts = plan.hosts;
  m.chunk_size = options_.chunk_size;
  m.metadata = save.metadata;
  m.metrics = save.metrics;
  // Chunks of each planned piece, gathered from the rank that wrote it.
  std::vector<std::vector<format::ChunkRecord>> chunks(plan.pieces.size());
  std::map<std::string, uint32_t> referenced;  // key -> index in m.objects
  for (size_t r = 0; r < results.size(); ++r) {
    const json& res = results[r];
    if (!res.contains("pieces")) continue;
    uint32_t object = 0;
    if (res.contains("key")) {
      object = static_cast<uint32_t>(m.objects.size());
      m.objects.push_back(format::ObjectRecord{res["key"].get<std::string>(),
                                               res["size"].get<uint64_t>(),
                                               static_cast<int32_t>(r)});
    }
    for (const json& p : res["pieces"]) {
      const size_t piece = p["piece"].get<size_t>();
      if (piece >= chunks.size())
        return fail(AbortedError(op + ": bad piece index"));
      for (const json& ch : p["chunks"]) {
        auto sum = Checksum128::FromHex(ch[2].get<std::string>());
        if (!sum) return fail(AbortedError(op + ": bad checksum from a rank"));
        uint32_t in = object;
        if (ch.size() == 4) {  // a chunk of the parent's
          const size_t ref = ch[3].get<size_t>();
          if (!res.contains("refs") || ref >= res["refs"].size()) {
            return fail(AbortedError(op + ": bad reference from a rank"));
          }
          const json& o = res["refs"][ref];
          const std::string key = o[0].get<std::string>();
          auto [it, added] = referenced.try_emplace(
              key, static_cast<uint32_t>(m.objects.size()));
          if (added) {
            m.objects.push_back(format::ObjectRecord{key, o[1].get<uint64_t>(),
                                                     o[2].get<int32_t>()});
            const int64_t dep = format::ParseStepDirName(
                std::string_view(key).substr(0, key.find('/')));
            if (dep >= 0 && std::find(m.depends_on.begin(), m.depends_on.end(),
                                      dep) == m.depends_on.end()) {
              m.depends_on.push_back(dep);
            }
          }
          in = it->second;
        } else if (!res.contains("key")) {
          return fail(AbortedError(op + ": a chunk names no object"));
        }
        chunks[piece].push_back(format::ChunkRecord{
            in, ch[0].get<uint64_t>(), ch[1].get<uint64_t>(), *sum});
      }
    }
  }
  for (const PlannedEntry& e : plan.entries) {
    format::EntryRecord rec;
    rec.name = e.name;
    rec.owner = e.owner;
    rec.kind = e.kind;
    rec.dtype = e.dtype;
    rec.shape = e.shape;
    rec.json = e.json;
    for (size_t pi : e.pieces) {
      const PlannedPiece& p = plan.pieces[pi];
      rec.pieces.push_back(format::PieceRecord{p.offsets, p.lengths, p.writer,
                                               std::move(chunks[pi])});
    }
    m.entries.push_back(std::move(rec));
  }
  if (!m.depends_on.empty()) {
    std::sort(m.depends_on.begin(), m.depends_on.end());
    m.version = format::kIncrementalManifestVersion;
    m.parent = parent;
    m.chain = parent_chain + 1;
  }
  if (Status s = format::ValidateManifest(m); !s.ok()) {
    return fail(s.WithContext(op + ": the manifest would be inconsistent"));
  }
  const std::string bytes = format::EncodeManifest(m);
  const std::string key = format::ManifestKey(step);
  if (!storage_->capabilities().atomic_create_if_absent) {
    // Best effort where the store cannot refuse an existing object: check
    // first. Only one job writes a root, so the race is between its own
    // retries, which use distinct steps.
    if (storage_->Stat(key).ok()) {
      return fail(AlreadyExistsError(op + ": step is already committed"));
    }
  }
  // THE COMMIT.
  if (Status s = storage_->PutString(key, bytes, PutMode::kCreateIfAbsent);
      !s.ok()) {
    if (s.code() == ErrorCode::kAlreadyExists) {
      return fail(
          AlreadyExistsError(op + ": another save committed this step first"));
    }
    return fail(s.WithContext(op));
  }
  // The coordinator keeps what it just wrote instead of decoding it again
  // (a large manifest takes seconds to parse); the cache still checks the
  // object's size and mtime on every use.
  const CheckpointInfo info = InfoFromManifest(m);
  cache_.erase(step);
  if (Result<ObjectInfo> written = storage_->Stat(key);
      written.ok() && written->size == bytes.size()) {
    m.Reindex();
    cache_[step] = {*written, std::make_shared<const Manifest>(std::move(m))};
  }
  if (options_.catalog) {
    RecordCommitted(*options_.catalog, info, Where(), bytes);
  }
  UpdateLatestHint();
  json deleted = json::array();
  if (options_.retention.enabled() || options_.gc_after_save) {
    GcOptions gc;
    gc.retention = options_.retention;
    Result<GcReport> report = GarbageCollect(gc);
    if (report.ok()) {
      deleted = report->deleted_steps;
    } else {
      // The checkpoint is committed; a failed clean-up only leaves garbage
      // that the next GarbageCollect removes.
      LogWarning("after " + op +
                 ": garbage collection failed: " + report.status().ToString());
    }
  }
  return json{{"deleted_steps", deleted}}.dump();
}

void CheckpointManager::Impl::UpdateLatestHint() {
  // LATEST is a hint for humans and other tools; readers never trust it, so
  // a failure to write it does not fail anything. It names the newest step
  // whose manifest validates, never a damaged one.
  Result<std::shared_ptr<const Manifest>> newest = NewestValid();
  Status s;
  if (newest.ok()) {
    s = storage_->PutString(format::kLatestName,
                            std::to_string((*newest)->step) + "\n");
  } else if (newest.status().code() == ErrorCode::kNotFound) {
    s = storage_->Delete(format::kLatestName);
    if (s.code() == ErrorCode::kNotFound) s = Status();
  } else {
    s = newest.status();
  }
  if (!s.ok()) LogWarning("could not update the LATEST hint: " + s.ToString());
}

// --- Load
// ---------------------------------------------------------------------

Result<CheckpointInfo> CheckpointManager::Impl::Load(
    std::optional<int64_t> step, State& state, const LoadOptions& load) {
  CKPT_RETURN_IF_ERROR(state.status());
  CKPT_ASSIGN_OR_RETURN(std::shared_ptr<const Manifest> m, Resolve(step));
  const std::string op =
      "load step " + std::to_string(m->step) + " from " + Where();
  const int rank = comm().rank();
  // Everything that can be checked without reading data is checked before the
  // first byte lands in the caller's buffers.
  std::vector<const format::EntryRecord*> records;
  for (const Entry& e : state.entries()) {
    const format::EntryRecord* rec;
    if (e.rank_local) {
      if (m->world_size != comm().size()) {
        return FailedPreconditionError(
            op + ": entry " + Quote(e.name) +
            " is rank-local and was saved by " + std::to_string(m->world_size) +
            " ranks, but " + std::to_string(comm().size()) +
            " ranks load it; use LoadRankLocal to get every rank's value and "
            "merge them");
      }
      rec = m->FindLocal(e.name, rank);
    } else {
      rec = m->Find(e.name);
    }
    if (rec == nullptr) {
      return NotFoundError(op + ": the checkpoint has no " +
                           (e.rank_local ? "rank-local " : "") + "entry " +
                           Quote(e.name));
    }
    if (rec->kind != e.kind) {
      return InvalidArgumentError(
          op + ": entry " + Quote(e.name) + " is a " +
          std::string(EntryKindName(rec->kind)) + " in the checkpoint but a " +
          std::string(EntryKindName(e.kind)) + " in the state");
    }
    if (e.kind == EntryKind::kTensor) {
      if (rec->dtype != e.tensor.dtype || rec->shape != e.full_shape()) {
        auto describe = [](DType dt, const std::vector<int64_t>& shape) {
          std::string s(DTypeName(dt));
          s += " [";
          for (size_t i = 0; i < shape.size(); ++i) {
            s += (i ? ", " : "") + std::to_string(shape[i]);
          }
          return s + "]";
        };
        return InvalidArgumentError(
            op + ": entry " + Quote(e.name) + " is " +
            describe(rec->dtype, rec->shape) + " in the checkpoint but " +
            describe(e.tensor.dtype, e.full_shape()) + " in the state");
      }
      if (!e.tensor.writable) {
        return InvalidArgumentError(op + ": entry " + Quote(e.name) +
                                    " is a read-only view; Load needs a "
                                    "writable one");
      }
    }
    records.push_back(rec);
  }
  if (load.strict) {
    for (const auto& rec : m->entries) {
      if (rec.owner >= 0 && rec.owner != rank) continue;
      const Entry* e = state.Find(rec.name);
      if (e == nullptr || e->rank_local != (rec.owner >= 0)) {
        return InvalidArgumentError(
            op + ": strict load: the state has no entry " + Quote(rec.name));
      }
    }
  }
  CKPT_RETURN_IF_ERROR(CheckObjects(*m, records));
  std::vector<BoxRead> reads;  // tensors, read in parallel at the end
  for (size_t i = 0; i < records.size(); ++i) {
    const format::EntryRecord& rec = *records[i];
    Entry* e = state.Find(rec.name);
    switch (rec.kind) {
      case EntryKind::kTensor: {
        // The box this rank holds: a piece, or the whole tensor.
        const std::vector<int64_t> offsets =
            e->is_piece() ? e->offsets
                          : std::vector<int64_t>(rec.shape.size(), 0);
        AddSlabs(BoxRead{&rec, offsets, e->tensor.shape,
                         std::span<std::byte>(e->tensor.data,
                                              *e->tensor.ByteSize())},
                 reads);
        break;
      }
      case EntryKind::kBlob: {
        std::string bytes(static_cast<size_t>(rec.shape[0]), '\0');
        CKPT_RETURN_IF_ERROR_CTX(
            ReadEntry(
                *storage_, *m, rec,
                std::span<std::byte>(reinterpret_cast<std::byte*>(bytes.data()),
                                     bytes.size())),
            op);
        CKPT_RETURN_IF_ERROR(state.SetBlob(rec.name, std::move(bytes)));
        break;
      }
      case EntryKind::kMetadata:
        CKPT_RETURN_IF_ERROR(state.SetMetadataJson(rec.name, rec.json));
        break;
    }
  }
  CKPT_RETURN_IF_ERROR_CTX(ReadBoxes(*storage_, *m, reads, IoPool()), op);
  return InfoFromManifest(*m);
}

Status CheckpointManager::Impl::ReadInto(
    const Manifest& m, const std::vector<const format::EntryRecord*>& records,
    const std::vector<std::string>& names, LoadedCheckpoint& out) {
  const std::string op =
      "load step " + std::to_string(m.step) + " from " + Where();
  // The objects must really hold the bytes the manifest claims before any
  // buffer is sized from the manifest's shapes.
  CKPT_RETURN_IF_ERROR(CheckObjects(m, records));
  out.info = InfoFromManifest(m);
  std::vector<BoxRead> reads;  // tensors, read in parallel at the end
  for (size_t i = 0; i < records.size(); ++i) {
    const format::EntryRecord* rec = records[i];
    switch (rec->kind) {
      case EntryKind::kTensor: {
        CKPT_ASSIGN_OR_RETURN(
            TensorView view,
            out.state.AllocateTensor(names[i], rec->dtype, rec->shape));
        AddSlabs(
            BoxRead{rec, std::vector<int64_t>(rec->shape.size(), 0), rec->shape,
                    std::span<std::byte>(view.data, *view.ByteSize())},
            reads);
        break;
      }
      case EntryKind::kBlob: {
        std::string bytes(static_cast<size_t>(rec->shape[0]), '\0');
        CKPT_RETURN_IF_ERROR_CTX(
            ReadEntry(
                *storage_, m, *rec,
                std::span<std::byte>(reinterpret_cast<std::byte*>(bytes.data()),
                                     bytes.size())),
            op);
        out.state.AddBlob(names[i], std::move(bytes));
        break;
      }
      case EntryKind::kMetadata:
        out.state.AddMetadataJson(names[i], rec->json);
        break;
    }
  }
  CKPT_RETURN_IF_ERROR_CTX(ReadBoxes(*storage_, m, reads, IoPool()), op);
  return out.state.status();
}

Result<LoadedCheckpoint> CheckpointManager::Impl::LoadAll(
    std::optional<int64_t> step, const std::vector<std::string>& names) {
  CKPT_ASSIGN_OR_RETURN(std::shared_ptr<const Manifest> m, Resolve(step));
  const std::string op =
      "load step " + std::to_string(m->step) + " from " + Where();
  std::vector<const format::EntryRecord*> records;
  std::vector<std::string> as;
  if (names.empty()) {
    for (const auto& rec : m->entries) {
      records.push_back(&rec);
      as.push_back(rec.owner < 0 ? rec.name
                                 : RankLocalName(rec.name, rec.owner));
    }
  } else {
    for (const std::string& n : names) {
      const format::EntryRecord* rec = m->Find(n);
      if (rec == nullptr) {
        return NotFoundError(op + ": the checkpoint has no entry " + Quote(n));
      }
      records.push_back(rec);
      as.push_back(n);
    }
  }
  LoadedCheckpoint out;
  CKPT_RETURN_IF_ERROR(ReadInto(*m, records, as, out));
  return out;
}

Result<LoadedCheckpoint> CheckpointManager::Impl::LoadRankLocal(
    std::optional<int64_t> step, std::string_view name) {
  CKPT_ASSIGN_OR_RETURN(std::shared_ptr<const Manifest> m, Resolve(step));
  std::vector<const format::EntryRecord*> records;
  std::vector<std::string> as;
  for (int32_t r = 0; r < m->world_size; ++r) {
    if (const format::EntryRecord* rec = m->FindLocal(name, r)) {
      records.push_back(rec);
      as.push_back(std::to_string(r));
    }
  }
  if (records.empty()) {
    return NotFoundError("load step " + std::to_string(m->step) + " from " +
                         Where() + ": no rank saved a rank-local entry " +
                         Quote(name));
  }
  LoadedCheckpoint out;
  CKPT_RETURN_IF_ERROR(ReadInto(*m, records, as, out));
  return out;
}

// --- Inspection
// -----------------------------------------------------------------

Result<std::optional<int64_t>> CheckpointManager::Impl::Latest() {
  Result<std::shared_ptr<const Manifest>> m = NewestValid();
  if (!m.ok()) {
    if (m.status().code() == ErrorCode::kNotFound)
      return std::optional<int64_t>();
    return m.status();
  }
  return std::optional<int64_t>((*m)->step);
}

Result<std::vector<CheckpointInfo>> CheckpointManager::Impl::List() {
  CKPT_ASSIGN_OR_RETURN(auto manifests, ManifestObjects());
  std::vector<CheckpointInfo> out;
  for (auto it = manifests.rbegin(); it != manifests.rend(); ++it) {
    Result<std::shared_ptr<const Manifest>> m =
        ReadManifest(it->first, it->second);
    if (!m.ok()) {
      LogWarning("skipping step " + std::to_string(it->first) + ": " +
                 m.status().ToString());
      continue;
    }
    out.push_back(InfoFromManifest(**m));
  }
  return out;
}

Result<CheckpointDescription> CheckpointManager::Impl::Describe(
    std::optional<int64_t> step) {
  CKPT_ASSIGN_OR_RETURN(std::shared_ptr<const Manifest> m, Resolve(step));
  CheckpointDescription d;
  d.info = InfoFromManifest(*m);
  for (const auto& rec : m->entries) {
    EntryInfo e;
    e.name = rec.name;
    e.owner = rec.owner;
    e.kind = rec.kind;
    e.dtype = rec.dtype;
    e.shape = rec.shape;
    e.num_pieces = rec.pieces.size();
    e.json = rec.json;
    Xxh3Hasher digest;
    auto feed = [&](std::string_view s) {
      digest.Update(std::span<const std::byte>(
          reinterpret_cast<const std::byte*>(s.data()), s.size()));
    };
    feed(rec.kind == EntryKind::kMetadata ? rec.json : "");
    for (const auto& p : rec.pieces) {
      for (size_t i = 0; i < p.offsets.size(); ++i) {
        feed(std::to_string(p.offsets[i]) + ":" + std::to_string(p.lengths[i]) +
             ",");
      }
      for (const auto& c : p.chunks) {
        e.bytes += c.length;
        feed(c.checksum.Hex());
      }
    }
    e.digest = digest.Digest().Hex();
    d.entries.push_back(std::move(e));
  }
  for (const auto& o : m->objects) {
    d.objects.push_back(ObjectInfo{o.key, o.size, 0});
  }
  return d;
}

Result<VerifyReport> CheckpointManager::Impl::Verify(
    int64_t step, const ProgressFn& progress) {
  // Verify re-reads every byte, the manifest's too: damage that kept its size
  // and mtime would otherwise hide behind the cache.
  cache_.erase(step);
  CKPT_ASSIGN_OR_RETURN(std::shared_ptr<const Manifest> m, ReadManifest(step));
  VerifyReport report;
  report.step = step;
  uint64_t total = 0;
  for (const auto& e : m->entries) {
    for (const auto& p : e.pieces) {
      for (const auto& c : p.chunks) total += c.length;
    }
  }
  // Objects: present, the recorded size, and a valid safetensors header.
  std::vector<uint64_t> actual(m->objects.size(), 0);
  std::vector<bool> readable(m->objects.size(), false);
  std::vector<std::optional<format::SafetensorsHeader>> headers(
      m->objects.size());
  for (size_t i = 0; i < m->objects.size(); ++i) {
    const format::ObjectRecord& o = m->objects[i];
    Result<ObjectInfo> info = storage_->Stat(o.key);
    if (!info.ok()) {
      report.problems.push_back(o.key + ": " + info.status().ToString());
      continue;
    }
    actual[i] = info->size;
    readable[i] = true;
    if (info->size != o.size) {
      report.problems.push_back(o.key + ": is " + std::to_string(info->size) +
                                " bytes, the manifest records " +
                                std::to_string(o.size) +
                                " (truncated or replaced)");
    }
    std::byte prefix[8];
    Status s = info->size >= 8 ? storage_->ReadRange(o.key, 0, prefix)
                               : DataLossError("shorter than 8 bytes");
    if (s.ok()) {
      Result<uint64_t> n =
          format::DecodeSafetensorsHeaderLength(prefix, info->size, o.key);
      if (!n.ok()) {
        s = n.status();
      } else {
        std::string header(*n, '\0');
        s = storage_->ReadRange(
            o.key, 8,
            std::span<std::byte>(reinterpret_cast<std::byte*>(header.data()),
                                 header.size()));
        if (s.ok()) {
          Result<format::SafetensorsHeader> h =
              format::ParseSafetensorsHeader(header, info->size, o.key);
          if (h.ok()) {
            headers[i] = std::move(h).value();
          } else {
            s = h.status();
          }
        }
      }
    }
    if (!s.ok())
      report.problems.push_back(o.key +
                                ": safetensors header: " + s.ToString());
  }
  // Every chunk, re-read and re-hashed.
  std::vector<std::byte> buf;
  uint64_t done = 0;
  for (const auto& e : m->entries) {
    for (const auto& p : e.pieces) {
      for (const auto& c : p.chunks) {
        const std::string& key = m->objects[c.object].key;
        if (!readable[c.object]) continue;  // already reported
        if (c.offset > actual[c.object] ||
            c.length > actual[c.object] - c.offset) {
          report.problems.push_back(key + ": entry " + Quote(e.name) +
                                    " bytes [" + std::to_string(c.offset) +
                                    ", " + std::to_string(c.offset + c.length) +
                                    ") lie past the end of the object");
          continue;
        }
        // The header must place the chunk inside the entry's own tensor: a
        // damaged name or offset there is damage that no chunk checksum sees.
        if (const auto& h = headers[c.object]) {
          const bool inside = std::any_of(
              h->tensors.begin(), h->tensors.end(), [&](const auto& t) {
                // An incremental save writes the changed runs of a piece
                // as "<entry>@<first chunk>" (incremental.h).
                return (t.name == e.name ||
                        (t.name.size() > e.name.size() + 1 &&
                         t.name.starts_with(e.name) &&
                         t.name[e.name.size()] == '@')) &&
                       c.offset >= h->data_start + t.begin &&
                       c.offset + c.length <= h->data_start + t.end;
              });
          if (!inside) {
            report.problems.push_back(key + ": safetensors header: no tensor " +
                                      Quote(e.name) + " holds bytes [" +
                                      std::to_string(c.offset) + ", " +
                                      std::to_string(c.offset + c.length) +
                                      ") of entry " + Quote(e.name));
          }
        }
        buf.resize(c.length);
        Status s = ReadChunk(*storage_, *m, e, c, buf);
        if (!s.ok()) {
          report.problems.push_back(s.ToString());
        } else {
          ++report.chunks_checked;
          report.bytes_checked += c.length;
        }
        done += c.length;
        if (progress) progress(done, total);
      }
    }
  }
  return report;
}

// --- Deleting
// -------------------------------------------------------------------

Status CheckpointManager::Impl::Delete(int64_t step,
                                       const std::set<int64_t>* going,
                                       std::vector<std::string>* deleted,
                                       uint64_t* bytes, bool dry_run,
                                       bool rewrite_dependants) {
  const std::string op =
      "delete step " + std::to_string(step) + " in " + Where();
  if (step < 0) return InvalidArgumentError(op + ": the step is negative");
  const std::string manifest_key = format::ManifestKey(step);
  Result<ObjectInfo> info = storage_->Stat(manifest_key);
  if (!info.ok()) {
    if (info.status().code() == ErrorCode::kNotFound) {
      return NotFoundError(op + ": step is not a committed checkpoint");
    }
    return info.status().WithContext(op);
  }
  // Refuse to break a checkpoint that references this one.
  CKPT_ASSIGN_OR_RETURN(auto manifests, ManifestObjects());
  std::vector<int64_t> dependants;
  // Objects that checkpoints which stay name: never deleted with this one,
  // whatever their step directory.
  std::set<std::string> named_elsewhere;
  for (const auto& [s, oi] : manifests) {
    if (s == step || (going && going->count(s))) continue;
    Result<std::shared_ptr<const Manifest>> m = ReadManifest(s, oi);
    if (!m.ok()) continue;
    const auto& deps = (*m)->depends_on;
    if (std::find(deps.begin(), deps.end(), step) != deps.end())
      dependants.push_back(s);
    for (const auto& o : (*m)->objects) named_elsewhere.insert(o.key);
  }
  if (!dependants.empty() && rewrite_dependants && !dry_run) {
    // Oldest first; each rewrite is complete (new object durable, then the
    // manifest replaced) before the next, and this step goes only after all.
    std::sort(dependants.begin(), dependants.end());
    for (int64_t d : dependants) {
      CKPT_RETURN_IF_ERROR_CTX(RewriteDependant(d, step), op);
    }
    return Delete(step, going, deleted, bytes, dry_run, false);
  }
  if (!dependants.empty()) {
    std::sort(dependants.begin(), dependants.end());
    std::string list;
    for (int64_t s : dependants)
      list += (list.empty() ? "" : ", ") + std::to_string(s);
    return FailedPreconditionError(op + ": steps " + list +
                                   " depend on it; delete them first");
  }
  // The manifest goes first: from then on the step is not a checkpoint, and
  // a crash leaves only garbage.
  const std::string prefix = format::StepDirName(step) + "/";
  CKPT_ASSIGN_OR_RETURN(std::vector<ObjectInfo> objects,
                        storage_->List(prefix));
  std::vector<ObjectInfo> doomed;
  for (const ObjectInfo& o : objects) {
    std::string_view file = std::string_view(o.key).substr(prefix.size());
    if (o.key == manifest_key || named_elsewhere.count(o.key)) continue;
    if (format::ParseDataObjectKey(o.key, nullptr, nullptr, nullptr) ||
        file.find(kTempMarker) != std::string_view::npos) {
      doomed.push_back(o);  // ckpt's own; anything else is left alone
    }
  }
  if (!dry_run) {
    CKPT_RETURN_IF_ERROR_CTX(storage_->Delete(manifest_key), op);
    cache_.erase(step);
    if (options_.catalog) RecordDeleted(*options_.catalog, Where(), step);
  }
  if (deleted) deleted->push_back(manifest_key);
  if (bytes) *bytes += info->size;
  for (const ObjectInfo& o : doomed) {
    if (!dry_run) {
      Status s = storage_->Delete(o.key);
      if (!s.ok() && s.code() != ErrorCode::kNotFound) return s.WithContext(op);
    }
    if (deleted) deleted->push_back(o.key);
    if (bytes) *bytes += o.size;
  }
  if (!dry_run) UpdateLatestHint();
  return Status();
}

Status CheckpointManager::Impl::RewriteDependant(int64_t dependant,
                                                 int64_t step) {
  const std::string op = "rewrite step " + std::to_string(dependant) +
                         " without step " + std::to_string(step);
  CKPT_ASSIGN_OR_RETURN(std::shared_ptr<const Manifest> old,
                        ReadManifest(dependant));
  Manifest m = *old;
  auto in_step = [](const std::string& key) {
    return format::ParseStepDirName(
        std::string_view(key).substr(0, key.find('/')));
  };
  // The chunks to copy, read (and checked) into memory.
  std::set<std::string> names;
  for (const auto& e : m.entries) names.insert(e.name);
  std::vector<format::ChunkRecord*> moved;
  std::vector<std::vector<std::byte>> bytes;
  std::vector<PieceToWrite> pieces;
  uint64_t largest = 1;
  for (auto& e : m.entries) {
    for (auto& p : e.pieces) {
      for (auto& c : p.chunks) {
        if (in_step(m.objects[c.object].key) != step) continue;
        bytes.emplace_back(c.length);
        CKPT_RETURN_IF_ERROR_CTX(ReadChunk(*storage_, *old, e, c, bytes.back()),
                                 op);
        std::string name;
        for (size_t n = pieces.size();; ++n) {
          name = e.name + "@" + std::to_string(n);
          if (!names.count(name)) break;
        }
        names.insert(name);
        pieces.push_back(PieceToWrite{
            name, DType::kU8, {static_cast<int64_t>(c.length)}, {}});
        moved.push_back(&c);
        largest = std::max(largest, c.length);
      }
    }
  }
  for (size_t i = 0; i < pieces.size(); ++i) pieces[i].bytes = bytes[i];
  if (!pieces.empty()) {
    const std::string key = format::DataObjectKey(dependant, 0, NewAttemptId());
    CKPT_ASSIGN_OR_RETURN(WrittenObject written,
                          WriteDataObject(*storage_, key, pieces, largest));
    const uint32_t index = static_cast<uint32_t>(m.objects.size());
    m.objects.push_back(format::ObjectRecord{key, written.size, 0});
    for (size_t i = 0; i < moved.size(); ++i) {
      moved[i]->object = index;
      moved[i]->offset = written.chunks[i][0].offset;
    }
  }
  // Keep the objects still named, in order, and the steps they lie in.
  std::vector<bool> used(m.objects.size(), false);
  for (const auto& e : m.entries) {
    for (const auto& p : e.pieces) {
      for (const auto& c : p.chunks) used[c.object] = true;
    }
  }
  std::vector<uint32_t> remap(m.objects.size(), 0);
  std::vector<format::ObjectRecord> objects;
  std::set<int64_t> deps;
  for (size_t i = 0; i < m.objects.size(); ++i) {
    if (!used[i]) continue;
    remap[i] = static_cast<uint32_t>(objects.size());
    const int64_t s = in_step(m.objects[i].key);
    if (s != dependant) deps.insert(s);
    objects.push_back(std::move(m.objects[i]));
  }
  m.objects = std::move(objects);
  for (auto& e : m.entries) {
    for (auto& p : e.pieces) {
      for (auto& c : p.chunks) c.object = remap[c.object];
    }
  }
  m.depends_on.assign(deps.begin(), deps.end());
  if (m.depends_on.empty()) {
    m.version = format::kManifestVersion;
    m.parent = -1;
    m.chain = 0;
  }
  CKPT_RETURN_IF_ERROR_CTX(format::ValidateManifest(m), op);
  // Replacing a committed manifest is atomic on every backend; until it
  // happens the old one, whose bytes are all still there, stands.
  CKPT_RETURN_IF_ERROR_CTX(storage_->PutString(format::ManifestKey(dependant),
                                               format::EncodeManifest(m)),
                           op);
  cache_.erase(dependant);
  return Status();
}

Result<GcReport> CheckpointManager::Impl::GarbageCollect(const GcOptions& gc) {
  GcReport report;
  const RetentionPolicy policy =
      gc.retention ? *gc.retention : options_.retention;
  CKPT_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> infos, List());
  // Newest first, so that a dependant always goes before what it depends on
  // (a crash part-way never leaves a checkpoint without its dependency), and
  // a step that only doomed steps depend on may go (in a dry run those
  // dependants are still there).
  const std::vector<int64_t> doomed = StepsToDelete(infos, policy);
  const std::set<int64_t> going(doomed.begin(), doomed.end());
  for (auto it = doomed.rbegin(); it != doomed.rend(); ++it) {
    CKPT_RETURN_IF_ERROR(Delete(*it, &going, &report.deleted_objects,
                                &report.bytes_freed, gc.dry_run));
  }
  report.deleted_steps = doomed;
  // Dead attempts: ckpt-named objects that no committed manifest names.
  CKPT_ASSIGN_OR_RETURN(auto manifests, ManifestObjects());
  std::set<std::string> referenced;
  std::set<int64_t> committed;
  std::set<int64_t> damaged;  // left untouched: someone should look at them
  int64_t newest = -1;
  for (const auto& [step, info] : manifests) {
    if (gc.dry_run &&
        std::find(report.deleted_steps.begin(), report.deleted_steps.end(),
                  step) != report.deleted_steps.end()) {
      continue;
    }
    Result<std::shared_ptr<const Manifest>> m = ReadManifest(step, info);
    if (!m.ok()) {
      damaged.insert(step);
      continue;
    }
    committed.insert(step);
    newest = std::max(newest, step);
    for (const auto& o : (*m)->objects) referenced.insert(o.key);
  }
  CKPT_ASSIGN_OR_RETURN(std::vector<ObjectInfo> all, storage_->List(""));
  const int64_t now = options_.now_unix_ms();
  const int64_t grace_ms = options_.gc_grace_seconds * 1000;
  const std::set<std::string> already(report.deleted_objects.begin(),
                                      report.deleted_objects.end());
  for (const ObjectInfo& o : all) {
    if (referenced.count(o.key) || already.count(o.key)) continue;
    const bool old = now - o.mtime_unix_ms > grace_ms;
    int64_t step;
    std::string_view file;
    bool dead = false;
    if (SplitStepKey(o.key, &step, &file)) {
      if (damaged.count(step) || file == format::kManifestName) continue;
      const bool ours =
          format::ParseDataObjectKey(o.key, nullptr, nullptr, nullptr) ||
          file.find(kTempMarker) != std::string_view::npos;
      // An attempt at a step at or below the newest committed one can no
      // longer commit; a newer one may still be running elsewhere.
      dead = ours && (step <= newest || old);
    } else {
      // Root-level temporaries (of the LATEST hint).
      dead = o.key.starts_with(std::string(format::kLatestName) +
                               std::string(kTempMarker)) &&
             old;
    }
    if (!dead) continue;
    if (!gc.dry_run) {
      Status s = storage_->Delete(o.key);
      if (!s.ok() && s.code() != ErrorCode::kNotFound) {
        return s.WithContext("garbage collection in " + Where());
      }
    }
    report.deleted_objects.push_back(o.key);
    report.bytes_freed += o.size;
  }
  // Writes that died unfinished show in no listing, but a store may keep
  // them (on s3://: incomplete multipart uploads). The same rule finds the
  // dead ones; a store that cannot tell does not fail the collection.
  Result<std::vector<std::string>> aborted = storage_->AbortIncompleteWrites(
      format::kStepPrefix, [&](const ObjectInfo& o) {
        int64_t step;
        std::string_view file;
        if (!SplitStepKey(o.key, &step, &file) || damaged.count(step)) {
          return false;
        }
        const bool manifest = file == format::kManifestName;
        const bool ours = manifest || format::ParseDataObjectKey(
                                          o.key, nullptr, nullptr, nullptr);
        const bool old = now - o.mtime_unix_ms > grace_ms;
        const bool dead = ours && (old || (step <= newest && !manifest));
        if (dead && gc.dry_run) report.deleted_objects.push_back(o.key);
        return dead && !gc.dry_run;
      });
  if (aborted.ok()) {
    for (std::string& key : *aborted) {
      report.deleted_objects.push_back(std::move(key));
    }
  } else {
    LogWarning(
        "garbage collection in " + Where() +
        ": incomplete uploads were left: " + aborted.status().ToString());
  }
  return report;
}

// --- Parallel I/O
// ---------------------------------------------------------------

ThreadPool* CheckpointManager::Impl::IoPool() {
  if (options_.io_threads <= 1) return nullptr;
  if (!io_pool_)
    io_pool_ = std::make_unique<ThreadPool>(options_.io_threads - 1);
  return io_pool_.get();
}

void CheckpointManager::Impl::AddSlabs(BoxRead read,
                                       std::vector<BoxRead>& reads) const {
  // Slabs of whole chunks where the rows allow, so that few chunks are read
  // by two slabs.
  for (BoxRead& slab : SplitBoxRead(std::move(read), 4 * options_.chunk_size)) {
    reads.push_back(std::move(slab));
  }
}

// --- Asynchronous save
// ---------------------------------------------------------

struct SaveHandle::Shared {
  explicit Shared(int64_t step) : step(step) {}

  void Finish(Result<SaveResult> r) {
    {
      std::lock_guard<std::mutex> lock(mu);
      result.emplace(std::move(r));
    }
    done.notify_all();
  }

  const int64_t step;
  std::mutex mu;
  std::condition_variable done;
  std::optional<Result<SaveResult>> result;  // guarded by mu
};

int64_t SaveHandle::step() const { return shared_ ? shared_->step : -1; }

bool SaveHandle::Done() const {
  if (!shared_) return true;
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->result.has_value();
}

Result<SaveResult> SaveHandle::Wait() const {
  if (!shared_) {
    return FailedPreconditionError("wait: the handle belongs to no save");
  }
  std::unique_lock<std::mutex> lock(shared_->mu);
  shared_->done.wait(lock, [&] { return shared_->result.has_value(); });
  return *shared_->result;
}

CheckpointManager::Impl::~Impl() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [&] { return !busy_; });
  lock.unlock();
  if (worker_.joinable()) worker_.join();
}

std::unique_lock<std::mutex> CheckpointManager::Impl::Acquire() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [&] { return !busy_; });
  return lock;
}

Status CheckpointManager::Impl::TakeAsyncError() {
  return std::exchange(async_error_, Status());
}

void CheckpointManager::Impl::StartAsync(
    std::unique_lock<std::mutex>& lock, int64_t step, const State& state,
    const SaveOptions& save,
    const std::shared_ptr<SaveHandle::Shared>& handle) {
  if (busy_ && options_.async_policy == AsyncSavePolicy::kSkip &&
      comm().size() == 1) {
    SaveResult skipped;
    skipped.skipped = true;
    handle->Finish(std::move(skipped));
    return;
  }
  idle_.wait(lock, [&] { return !busy_; });
  // The thread has reported its result and is ending; join it so that it
  // can be replaced.
  if (worker_.joinable()) worker_.join();
  if (Status s = TakeAsyncError(); !s.ok()) {
    handle->Finish(std::move(s));
    return;
  }
  const uint64_t need = StagingBytes(state);
  if (options_.async_staging_bytes > 0 && need > options_.async_staging_bytes) {
    handle->Finish(Guard("save", [&] { return Save(step, state, save); }));
    return;
  }
  // A state that cannot be staged still takes part in the collectives, so
  // that every rank fails together instead of waiting for this one.
  Status staged = state.status();
  staged_ = State();
  if (staged.ok()) {
    staged = Guard("asynchronous save: stage the state", [&]() -> Status {
      CKPT_ASSIGN_OR_RETURN(std::span<std::byte> memory,
                            staging_.Reserve(need));
      return StageState(state, memory, staged_);
    });
  }
  if (!staged.ok()) staged_ = State();
  busy_ = true;
  worker_ = std::thread([this, step, save, staged, handle] {
    Result<SaveResult> r =
        Guard("save", [&] { return Save(step, staged_, save, staged); });
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!r.ok()) {
        async_error_ = r.status().WithContext("the asynchronous save of step " +
                                              std::to_string(step) + " failed");
      }
    }
    // The handle is done before any waiting call runs, so a call that
    // waited for this save finds it Done().
    handle->Finish(std::move(r));
    {
      std::lock_guard<std::mutex> l(mu_);
      busy_ = false;
    }
    idle_.notify_all();
  });
}

// --- The public face
// -------------------------------------------------------------

CheckpointManager::CheckpointManager(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
CheckpointManager::~CheckpointManager() = default;

Result<std::unique_ptr<CheckpointManager>> CheckpointManager::Open(
    std::string_view url, Options options) {
  return Guard("open " + std::string(url),
               [&]() -> Result<std::unique_ptr<CheckpointManager>> {
                 StorageOptions so;
                 so.create = options.create;
                 CKPT_ASSIGN_OR_RETURN(std::unique_ptr<Storage> storage,
                                       OpenStorage(url, so));
                 return Open(std::move(storage), std::move(options));
               });
}

Result<std::unique_ptr<CheckpointManager>> CheckpointManager::Open(
    std::unique_ptr<Storage> storage, Options options) {
  if (storage == nullptr) return InvalidArgumentError("open: no storage given");
  if (options.chunk_size < format::kMinChunkSize) {
    return InvalidArgumentError("open " + storage->url() + ": chunk_size " +
                                std::to_string(options.chunk_size) +
                                " is below the minimum of " +
                                std::to_string(format::kMinChunkSize));
  }
  if (options.io_threads < 1) {
    return InvalidArgumentError("open " + storage->url() +
                                ": io_threads must be at least 1");
  }
  if (options.min_seconds_between_saves < 0 || options.gc_grace_seconds < 0 ||
      options.retention.keep_last < 0 || options.retention.keep_best < 0 ||
      options.retention.keep_every_n_steps < 0 ||
      options.retention.keep_every_seconds < 0) {
    return InvalidArgumentError(
        "open " + storage->url() +
        ": retention and timing options must not be negative");
  }
  if (options.incremental.full_every < 0 || options.incremental.max_chain < 0 ||
      !(options.incremental.min_referenced_fraction >= 0 &&
        options.incremental.min_referenced_fraction <= 1)) {
    return InvalidArgumentError(
        "open " + storage->url() +
        ": incremental full_every and max_chain must not be negative, "
        "min_referenced_fraction must lie in [0, 1]");
  }
  if (options.retention.keep_best > 0 &&
      options.retention.best_metric.empty()) {
    return InvalidArgumentError("open " + storage->url() +
                                ": keep_best needs best_metric");
  }
  return std::unique_ptr<CheckpointManager>(new CheckpointManager(
      std::make_unique<Impl>(std::move(storage), std::move(options))));
}

Result<SaveResult> CheckpointManager::Save(int64_t step, const State& state,
                                           const SaveOptions& options) {
  auto lock = impl_->Acquire();
  if (Status s = impl_->TakeAsyncError(); !s.ok()) return s;
  return Guard("save", [&] { return impl_->Save(step, state, options); });
}

SaveHandle CheckpointManager::SaveAsync(int64_t step, const State& state,
                                        const SaveOptions& options) {
  auto handle = std::make_shared<SaveHandle::Shared>(step);
  std::unique_lock<std::mutex> lock(impl_->mu());
  impl_->StartAsync(lock, step, state, options, handle);
  return SaveHandle(std::move(handle));
}

Result<CheckpointInfo> CheckpointManager::Load(std::optional<int64_t> step,
                                               State& state,
                                               const LoadOptions& options) {
  auto lock = impl_->Acquire();
  return Guard("load", [&] { return impl_->Load(step, state, options); });
}

Result<LoadedCheckpoint> CheckpointManager::LoadRankLocal(
    std::optional<int64_t> step, std::string_view name) {
  auto lock = impl_->Acquire();
  return Guard("load", [&] { return impl_->LoadRankLocal(step, name); });
}

Result<LoadedCheckpoint> CheckpointManager::LoadAll(
    std::optional<int64_t> step, const std::vector<std::string>& names) {
  auto lock = impl_->Acquire();
  return Guard("load", [&] { return impl_->LoadAll(step, names); });
}

Result<std::optional<int64_t>> CheckpointManager::Latest() {
  auto lock = impl_->Acquire();
  return Guard("latest", [&] { return impl_->Latest(); });
}

Result<std::vector<CheckpointInfo>> CheckpointManager::List() {
  auto lock = impl_->Acquire();
  return Guard("list", [&] { return impl_->List(); });
}

Result<CheckpointDescription> CheckpointManager::Describe(
    std::optional<int64_t> step) {
  auto lock = impl_->Acquire();
  return Guard("describe", [&] { return impl_->Describe(step); });
}

Result<VerifyReport> CheckpointManager::Verify(int64_t step,
                                               const ProgressFn& progress) {
  auto lock = impl_->Acquire();
  return Guard("verify", [&] { return impl_->Verify(step, progress); });
}

Status CheckpointManager::Delete(int64_t step) {
  auto lock = impl_->Acquire();
  return Guard("delete", [&] {
    return impl_->Delete(step, nullptr, nullptr, nullptr, false);
  });
}

Status CheckpointManager::Delete(int64_t step, const DeleteOptions& options) {
  std::lock_guard<std::mutex> lock(impl_->mu());
  return Guard("delete", [&] {
    return impl_->Delete(step, nullptr, nullptr, nullptr, false,
                         options.rewrite_dependants);
  });
}

Result<GcReport> CheckpointManager::GarbageCollect(const GcOptions& options) {
  auto lock = impl_->Acquire();
  return Guard("gc", [&] { return impl_->GarbageCollect(options); });
}

Storage& CheckpointManager::storage() { return impl_->storage(); }
const Options& CheckpointManager::options() const { return impl_->options(); }

}  // namespace ckpt

#include "checkpoint/catalog_record.h"

#include <algorithm>
#include <set>

#include "checkpoint/manifests.h"
#include "checkpoint/root_context.h"
#include "format/constants.h"
#include "util/log.h"

namespace ckpt {
namespace {

// "a", "a and b", "a, b and c".
std::string JoinAnd(const std::vector<std::string>& parts) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += i + 1 == parts.size() ? " and " : ", ";
    out += parts[i];
  }
  return out;
}

}  // namespace

std::string ManifestChecksum(std::string_view manifest_bytes) {
  constexpr size_t kHexDigits = 32;
  const std::string_view prefix = format::kEnvelopePrefix;
  if (!manifest_bytes.starts_with(prefix) ||
      manifest_bytes.size() < prefix.size() + kHexDigits) {
    return "";
  }
  return std::string(manifest_bytes.substr(prefix.size(), kHexDigits));
}

CatalogCheckpoint CatalogRecordFor(const CheckpointInfo& info,
                                   std::string_view root,
                                   std::string manifest_checksum) {
  CatalogCheckpoint c;
  c.job_id = info.job_id;
  c.root = CatalogRootUrl(root);
  c.step = info.step;
  c.epoch = info.epoch;
  const size_t sep = c.root.find("://");
  c.scheme = sep == std::string::npos ? "file" : c.root.substr(0, sep);
  c.world_size = info.world_size;
  c.hosts = info.hosts;
  c.bytes = info.bytes;
  c.manifest_checksum = std::move(manifest_checksum);
  c.metrics = info.metrics;
  c.created_unix_ms = info.created_unix_ms;
  return c;
}

CatalogRecorder::~CatalogRecorder() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CatalogRecorder::Open(bool wait) {
  if (!catalog_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (depth_++ == 0) wait_ = wait;
}

void CatalogRecorder::Close() {
  if (!catalog_) return;
  std::vector<Op> ops;
  bool wait = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (--depth_ > 0) return;
    ops = std::exchange(building_, {});
    wait = wait_;
  }
  Submit(std::move(ops), wait);
}

void CatalogRecorder::Add(Op op) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (depth_ > 0) {
      building_.push_back(std::move(op));
      return;
    }
  }
  std::vector<Op> alone;
  alone.push_back(std::move(op));
  Submit(std::move(alone), /*wait=*/true);
}

void CatalogRecorder::Submit(std::vector<Op> ops, bool wait) {
  if (ops.empty()) return;
  auto job = std::make_shared<Job>();
  job->ops = std::move(ops);
  std::unique_lock<std::mutex> lock(mu_);
  job->after = completed_;
  queue_.push_back(job);
  if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
  wake_.notify_all();
  if (wait) done_.wait(lock, [&] { return job->done; });
}

void CatalogRecorder::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopped, and nothing left to make
    std::shared_ptr<Job> job = queue_.front();
    queue_.pop_front();
    const uint64_t index = completed_ + 1;
    lock.unlock();
    Execute(*job, index);
    lock.lock();
    completed_ = index;
    job->done = true;
    done_.notify_all();
  }
}

void CatalogRecorder::Execute(const Job& job, uint64_t index) {
  // Handed over while an earlier batch waited for the catalog and failed:
  // trying again would make this batch's caller wait a second time.
  bool failed = failed_at_ > job.after;
  if (!failed && !pending_other_.empty()) {
    if (Status s = RetryOthers(); !s.ok()) {
      error_ = s;
      failed = true;
      failed_at_ = index;
    }
  }
  for (const Op& op : job.ops) {
    bool skipped = false;
    Status s;
    if (!failed) s = Make(op, &skipped);
    if (failed || skipped || !s.ok()) {
      missed_.push_back(op.what);
      if (op.kind == Op::kCommitted || op.kind == Op::kDeleted) {
        behind_ = true;
      } else {
        KeepOther(op);
      }
    }
    if (!s.ok()) {
      error_ = s;
      failed = true;
      failed_at_ = index;
    }
  }
  Warn();
}

Status CatalogRecorder::Make(const Op& op, bool* skipped) {
  switch (op.kind) {
    case Op::kCommitted: {
      if (!checked_) {
        // Once per manager: a process killed between a commit and its row
        // (or a delete and its mark) left the catalog behind, and nothing
        // else would tell; compared by the steps alone, without reading
        // any manifest.
        checked_ = true;
        Result<bool> behind = CatalogBehind(op.step);
        if (!behind.ok()) return behind.status();
        if (*behind) behind_ = true;
      }
      if (!behind_) return catalog_->Record(op.row);
      // An earlier call failed: the sync writes its rows and this one.
      Result<std::vector<CheckpointInfo>> infos = list_();
      Result<CatalogSyncReport> synced =
          infos.ok() ? SyncCatalogWith(storage_, *infos, *catalog_)
                     : Result<CatalogSyncReport>(infos.status());
      if (!synced.ok()) return synced.status();
      behind_ = false;
      LogInfo("catalog " + catalog_->url() + " is up to date with " + Root() +
              " again: " + std::to_string(synced->added.size()) + " added, " +
              std::to_string(synced->updated.size()) + " updated, " +
              std::to_string(synced->marked_deleted.size()) +
              " marked deleted");
      return Status();
    }
    case Op::kDeleted: {
      if (behind_) {
        // The next sync marks it; waiting for the catalog again gains
        // nothing.
        *skipped = true;
        return Status();
      }
      return catalog_->MarkDeleted(CatalogRootUrl(Root()), op.step).status();
    }
    case Op::kRecordOther:
      return catalog_->Record(op.row);
    case Op::kDeletedOther:
      return catalog_->MarkDeleted(op.root, op.step).status();
  }
  return Status();
}

Result<bool> CatalogRecorder::CatalogBehind(int64_t committing) {
  CKPT_ASSIGN_OR_RETURN(auto listed, ManifestStore(storage_).List());
  std::set<int64_t> on_storage;
  for (const auto& [step, info] : listed) {
    if (step != committing) on_storage.insert(step);
  }
  CKPT_ASSIGN_OR_RETURN(std::vector<CatalogCheckpoint> rows,
                        catalog_->List({.root = CatalogRootUrl(Root()),
                                        .tier = CatalogTier::kDurable}));
  std::set<int64_t> in_catalog;
  for (const CatalogCheckpoint& row : rows) {
    if (row.step != committing) in_catalog.insert(row.step);
  }
  if (on_storage == in_catalog) return false;
  LogInfo("catalog " + catalog_->url() + " is behind " + Root() + " (" +
          std::to_string(on_storage.size()) + " committed steps on storage, " +
          std::to_string(in_catalog.size()) +
          " in the catalog): syncing it with this commit");
  return true;
}

void CatalogRecorder::KeepOther(const Op& op) {
  const std::string& root = op.kind == Op::kRecordOther ? op.row.root : op.root;
  const int64_t step = op.kind == Op::kRecordOther ? op.row.step : op.step;
  // The later call for a step stands for both: a row recorded and then
  // marked deleted ends deleted.
  pending_other_.insert_or_assign({root, step}, op);
  if (pending_other_.size() > kMaxPendingOther) {
    // The oldest step is the least worth keeping; a long outage must not
    // grow the recorder without bound.
    auto oldest = std::min_element(pending_other_.begin(), pending_other_.end(),
                                   [](const auto& a, const auto& b) {
                                     return a.first.second < b.first.second;
                                   });
    pending_other_.erase(oldest);
  }
}

Status CatalogRecorder::RetryOthers() {
  for (auto it = pending_other_.begin(); it != pending_other_.end();) {
    bool skipped = false;
    CKPT_RETURN_IF_ERROR(Make(it->second, &skipped));
    it = pending_other_.erase(it);
  }
  return Status();
}

void CatalogRecorder::Committed(const CheckpointInfo& info,
                                std::string_view manifest_bytes) {
  if (!catalog_) return;
  Op op{.kind = Op::kCommitted};
  op.row = CatalogRecordFor(info, Root(), ManifestChecksum(manifest_bytes));
  op.step = info.step;
  op.what = "step " + std::to_string(info.step) + " is committed in " + Root();
  Add(std::move(op));
}

void CatalogRecorder::Deleted(int64_t step) {
  if (!catalog_) return;
  Op op{.kind = Op::kDeleted};
  op.step = step;
  op.what = "step " + std::to_string(step) + " is deleted from " + Root();
  Add(std::move(op));
}

void CatalogRecorder::RecordOther(CatalogCheckpoint row, std::string what) {
  if (!catalog_) return;
  Op op{.kind = Op::kRecordOther};
  op.row = std::move(row);
  op.what = std::move(what);
  Add(std::move(op));
}

void CatalogRecorder::DeletedOther(std::string root, int64_t step,
                                   std::string what) {
  if (!catalog_) return;
  Op op{.kind = Op::kDeletedOther};
  op.root = std::move(root);
  op.step = step;
  op.what = std::move(what);
  Add(std::move(op));
}

void CatalogRecorder::Warn() {
  if (missed_.empty()) return;
  LogWarning(JoinAnd(missed_) +
             ", but the catalog was not told: " + error_.ToString() +
             " (the next save brings it up to date, or run: ckpt catalog "
             "sync " +
             Root() + ")");
  missed_.clear();
}

Result<std::vector<CheckpointInfo>> ListCommittedApart(Storage& storage) {
  ManifestStore store(storage);
  CKPT_ASSIGN_OR_RETURN(auto listed, store.List());
  std::vector<CheckpointInfo> out;
  for (auto it = listed.rbegin(); it != listed.rend(); ++it) {
    Result<std::shared_ptr<const format::Manifest>> m =
        store.Summary(it->first, it->second);
    if (m.ok()) out.push_back(InfoFromManifest(**m));
  }
  return out;
}

}  // namespace ckpt

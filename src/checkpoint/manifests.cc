#include "checkpoint/manifests.h"

#include <algorithm>

#include "checkpoint/root_context.h"
#include "format/constants.h"
#include "util/log.h"

namespace ckpt {

using format::Manifest;

Result<std::vector<std::pair<int64_t, ObjectInfo>>> ManifestStore::List() {
  return ListManifests(storage_);
}

Result<std::vector<std::pair<int64_t, ObjectInfo>>> ListManifests(
    Storage& storage) {
  CKPT_ASSIGN_OR_RETURN(std::vector<ObjectInfo> objects,
                        storage.List(format::kStepPrefix));
  std::vector<std::pair<int64_t, ObjectInfo>> out;
  for (ObjectInfo& o : objects) {
    int64_t step;
    std::string_view file;
    if (format::SplitStepKey(o.key, &step, &file) &&
        file == format::kManifestName) {
      out.emplace_back(step, std::move(o));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

Result<ManifestStore::Summarized> ManifestStore::ReadSummary(
    int64_t step, const ObjectInfo& info) {
  auto it = summaries_.find(step);
  if (it != summaries_.end() && it->second.info.size == info.size &&
      it->second.info.mtime_unix_ms == info.mtime_unix_ms) {
    return it->second;
  }
  // A JSON manifest read (or remembered) whole is its own summary.
  if (std::shared_ptr<const Manifest> whole = Cached(step, info);
      whole && whole->version != format::kScalableManifestVersion) {
    return Summarized{info, whole, nullptr};
  }
  const std::string key = format::ManifestKey(step);
  const std::string what = "manifest " + key + " in " + storage_.url();
  if (info.size > format::kMaxManifestBytes) {
    return DataLossError(what + ": " + std::to_string(info.size) +
                         " bytes is beyond the manifest size limit");
  }
  CKPT_ASSIGN_OR_RETURN(std::string bytes, storage_.ReadAll(key));
  CKPT_ASSIGN_OR_RETURN(Manifest m, format::DecodeManifest(bytes, what));
  if (m.step != step) {
    return DataLossError(what + ": records step " + std::to_string(m.step));
  }
  Summarized out;
  out.info = info;
  if (m.version != format::kScalableManifestVersion) {
    // The whole manifest: kept once, in the cache Read uses.
    out.manifest = std::make_shared<Manifest>(std::move(m));
    cache_[step] = {info, out.manifest};
    return out;
  }
  const std::string dwhat =
      "directory " + m.directory.key + " in " + storage_.url();
  if (m.directory.size > format::kMaxBinaryMetadataBytes) {
    return DataLossError(dwhat + ": " + std::to_string(m.directory.size) +
                         " bytes is beyond the size limit");
  }
  Result<std::string> dir_bytes = storage_.ReadAll(m.directory.key);
  if (!dir_bytes.ok()) {
    // A committed step whose directory is gone is damaged, not absent.
    return DataLossError(dwhat + ": " + dir_bytes.status().message());
  }
  if (dir_bytes->size() != m.directory.size ||
      Xxh3_128(*dir_bytes) != m.directory.checksum) {
    return DataLossError(
        dwhat +
        ": is not the directory the commit record "
        "names (its size or checksum is not the one recorded)");
  }
  CKPT_ASSIGN_OR_RETURN(format::Directory dir,
                        format::DecodeDirectory(*dir_bytes, dwhat));
  out.manifest = std::make_shared<Manifest>(format::WithDirectory(m, dir));
  out.directory = std::make_shared<const format::Directory>(std::move(dir));
  summaries_[step] = out;
  return out;
}

Result<format::RankIndex> ManifestStore::ReadIndex(const Summarized& s,
                                                   int32_t rank) {
  const Manifest& m = *s.manifest;
  const std::string key = format::IndexObjectKey(m.step, rank, m.attempt);
  const std::string what = "index " + key + " in " + storage_.url();
  const format::IndexRef& ref = s.directory->indexes[rank];
  if (own_index_ && own_index_->index.step == m.step &&
      own_index_->index.rank == rank && own_index_->size == ref.size &&
      own_index_->checksum == ref.checksum) {
    format::RankIndex x = std::move(own_index_->index);
    own_index_.reset();
    return x;
  }
  Result<std::string> bytes = storage_.ReadAll(key);
  if (!bytes.ok()) return DataLossError(what + ": " + bytes.status().message());
  if (bytes->size() != ref.size || Xxh3_128(*bytes) != ref.checksum) {
    return DataLossError(what +
                         ": is not the index the directory names "
                         "(its size or checksum is not the one recorded)");
  }
  return format::DecodeRankIndex(*bytes, what);
}

Result<std::shared_ptr<const Manifest>> ManifestStore::Assembled(
    const Summarized& s, std::vector<int32_t> ranks, bool all) {
  std::vector<format::RankIndex> indexes;
  indexes.reserve(ranks.size());
  for (int32_t r : ranks) {
    CKPT_ASSIGN_OR_RETURN(format::RankIndex x, ReadIndex(s, r));
    indexes.push_back(std::move(x));
  }
  CKPT_ASSIGN_OR_RETURN(
      Manifest m,
      format::Assemble(*s.manifest, *s.directory, std::move(indexes), all,
                       "step " + std::to_string(s.manifest->step) + " in " +
                           storage_.url()));
  m.Reindex();
  return std::shared_ptr<const Manifest>(
      std::make_shared<Manifest>(std::move(m)));
}

Status ManifestStore::ForEachRank(
    int64_t step, const std::function<Status(const Manifest&)>& each) {
  Forget(step);
  CKPT_ASSIGN_OR_RETURN(ObjectInfo info, StatManifest(step));
  CKPT_ASSIGN_OR_RETURN(Summarized s, ReadSummary(step, info));
  if (!s.directory) return each(*s.manifest);
  format::IndexWalk walk(
      *s.manifest, *s.directory,
      "step " + std::to_string(step) + " in " + storage_.url());
  CKPT_RETURN_IF_ERROR(walk.CheckEntriesDisjoint());
  for (int32_t r = 0; r < s.directory->world_size; ++r) {
    CKPT_ASSIGN_OR_RETURN(format::RankIndex x, ReadIndex(s, r));
    CKPT_ASSIGN_OR_RETURN(Manifest m, walk.Next(std::move(x)));
    m.Reindex();
    CKPT_RETURN_IF_ERROR(each(m));
  }
  return walk.Finish();
}

std::shared_ptr<const Manifest> ManifestStore::Cached(int64_t step,
                                                      const ObjectInfo& info) {
  auto it = cache_.find(step);
  if (it != cache_.end() && it->second.first.size == info.size &&
      it->second.first.mtime_unix_ms == info.mtime_unix_ms) {
    return it->second.second;
  }
  return nullptr;
}

Result<std::shared_ptr<const Manifest>> ManifestStore::Read(
    int64_t step, const ObjectInfo& info) {
  if (auto cached = Cached(step, info)) return cached;
  CKPT_ASSIGN_OR_RETURN(Summarized s, ReadSummary(step, info));
  if (!s.directory) return s.manifest;
  std::vector<int32_t> ranks(s.directory->world_size);
  for (int32_t r = 0; r < s.directory->world_size; ++r) ranks[r] = r;
  CKPT_ASSIGN_OR_RETURN(std::shared_ptr<const Manifest> m,
                        Assembled(s, std::move(ranks), true));
  cache_[step] = {info, m};
  return m;
}

Result<std::shared_ptr<const Manifest>> ManifestStore::Summary(
    int64_t step, const ObjectInfo& info) {
  CKPT_ASSIGN_OR_RETURN(Summarized s, ReadSummary(step, info));
  return s.manifest;
}

Result<std::shared_ptr<const Manifest>> ManifestStore::Summary(int64_t step) {
  CKPT_ASSIGN_OR_RETURN(ObjectInfo info, StatManifest(step));
  return Summary(step, info);
}

Result<std::shared_ptr<const Manifest>> ManifestStore::ReadFor(
    int64_t step, const std::vector<Want>& wants) {
  CKPT_ASSIGN_OR_RETURN(ObjectInfo info, StatManifest(step));
  // Every piece already read (verify, a forced delete, an earlier load).
  if (auto cached = Cached(step, info)) return cached;
  CKPT_ASSIGN_OR_RETURN(Summarized s, ReadSummary(step, info));
  if (!s.directory) return s.manifest;
  const Manifest& m = *s.manifest;
  std::vector<int32_t> ranks;
  for (const Want& w : wants) {
    const format::EntryRecord* e = m.FindLocal(w.name, w.owner);
    if (e == nullptr || e->kind == EntryKind::kMetadata) continue;
    const format::DirectoryEntry& de =
        s.directory->entries[static_cast<size_t>(e - m.entries.data())];
    if (w.offsets.empty() || w.offsets.size() != de.shape.size() ||
        w.lengths.size() != de.shape.size()) {
      format::RanksMeeting(de, std::vector<int64_t>(de.shape.size(), 0),
                           de.shape, ranks);
    } else {
      format::RanksMeeting(de, w.offsets, w.lengths, ranks);
    }
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  // Each piece is checked against the directory and alone, then the pieces
  // read against each other (no two boxes of an entry or chunks of an
  // object overlap), even when every index is needed. Coverage, which needs
  // every piece, is Verify's: a load reads only the boxes it asks for.
  return Assembled(s, std::move(ranks), false);
}

std::string ManifestStore::NearestSteps(int64_t step) {
  // Only on the way to an error: a typo, an off-by-one step, or one that
  // retention removed is told apart by what the root holds.
  Result<std::vector<std::pair<int64_t, ObjectInfo>>> listed = List();
  if (!listed.ok()) return "";
  if (listed->empty()) return " (it holds no committed checkpoint)";
  // Newest first: the neighbours are the last above `step` and the first
  // below it.
  std::optional<int64_t> above, below;
  for (const auto& [s, info] : *listed) {
    if (s > step) above = s;
    if (s < step && !below) below = s;
  }
  const int64_t newest = listed->front().first;
  const std::string n = std::to_string(listed->size());
  std::string out;
  if (listed->size() == 1) {
    out = " (its only committed step is " + std::to_string(newest);
  } else if (below && above) {
    out = " (" + n + " committed: the nearest " + std::to_string(*below) +
          " and " + std::to_string(*above) + ", the newest " +
          std::to_string(newest);
  } else if (above) {
    out = " (" + n + " committed: the oldest " + std::to_string(*above) +
          ", the newest " + std::to_string(newest);
  } else {
    out = " (" + n + " committed: the newest " + std::to_string(newest);
  }
  // A step older than the newest may have been committed and then removed
  // by retention (keep_last, keep_every, gc) or deleted.
  if (step < newest) {
    out += "; an older step may have been removed by retention or deleted";
  }
  return out + ")";
}

Result<ObjectInfo> ManifestStore::StatManifest(int64_t step) {
  if (step < 0) {
    return InvalidArgumentError("step " + std::to_string(step) + " in " +
                                storage_.url() + " is negative");
  }
  Result<ObjectInfo> info = storage_.Stat(format::ManifestKey(step));
  last_seen_.reset();
  if (info.ok()) last_seen_.emplace(step, *info);
  if (!info.ok()) {
    if (info.status().code() == ErrorCode::kNotFound) {
      return NotFoundError("step " + std::to_string(step) +
                           " is not a committed checkpoint in " +
                           storage_.url() + NearestSteps(step));
    }
    return info.status();
  }
  return info;
}

Result<std::shared_ptr<const Manifest>> ManifestStore::Read(int64_t step) {
  CKPT_ASSIGN_OR_RETURN(ObjectInfo info, StatManifest(step));
  return Read(step, info);
}

Result<std::shared_ptr<const Manifest>> ManifestStore::NewestValid() {
  CKPT_ASSIGN_OR_RETURN(auto manifests, List());
  for (const auto& [step, info] : manifests) {
    Result<std::shared_ptr<const Manifest>> m = Summary(step, info);
    if (m.ok()) return m;
    // A damaged manifest is not a checkpoint; the one before it may be.
    WarnSkipped(step, info, m.status().ToString());
  }
  return NotFoundError("no committed checkpoint in " + storage_.url());
}

Result<std::map<std::string, uint64_t>> ManifestStore::ObjectSizes() {
  CKPT_ASSIGN_OR_RETURN(std::vector<ObjectInfo> objects,
                        storage_.List(format::kStepPrefix));
  std::map<std::string, uint64_t> sizes;
  for (ObjectInfo& o : objects) sizes.emplace(std::move(o.key), o.size);
  return sizes;
}

std::string ManifestStore::MissingObject(
    const Manifest& m, const std::map<std::string, uint64_t>& sizes,
    Storage* storage) {
  for (const auto* list : {&m.objects, &m.metadata_objects}) {
    const char* kind = list == &m.objects ? "data object " : "metadata object ";
    for (const format::ObjectRecord& o : *list) {
      auto it = sizes.find(o.key);
      if (it == sizes.end()) {
        // Listings leave out what is not a regular file; a load says why it
        // cannot read one (load_path.cc, CheckObjects), and so does this.
        if (storage != nullptr) {
          Result<ObjectInfo> info = storage->Stat(o.key);
          if (!info.ok() &&
              info.status().code() == ErrorCode::kInvalidArgument) {
            return kind + o.key + " cannot be read: " + info.status().message();
          }
        }
        return kind + o.key + " is missing";
      }
      if (it->second != o.size) {
        return kind + o.key + " is " + std::to_string(it->second) +
               " bytes but the manifest records " + std::to_string(o.size);
      }
    }
  }
  return "";
}

Result<std::shared_ptr<const Manifest>> ManifestStore::NewestComplete() {
  CKPT_ASSIGN_OR_RETURN(auto manifests, List());
  if (manifests.empty()) {
    return NotFoundError("no committed checkpoint in " + storage_.url());
  }
  // Listed after the manifests: an object a manifest names was written
  // before it, so a save committing meanwhile is not judged incomplete.
  CKPT_ASSIGN_OR_RETURN(auto sizes, ObjectSizes());
  for (const auto& [step, info] : manifests) {
    Result<std::shared_ptr<const Manifest>> m = Summary(step, info);
    if (!m.ok()) {
      WarnSkipped(step, info, m.status().ToString());
      continue;
    }
    const std::string missing = MissingObject(**m, sizes, &storage_);
    if (missing.empty()) return m;
    WarnSkipped(step, info,
                "in " + storage_.url() + ": " + missing +
                    "; resuming from an older complete checkpoint");
  }
  return NotFoundError("no complete checkpoint in " + storage_.url());
}

void ManifestStore::Remember(int64_t step, const ObjectInfo& info, Manifest m) {
  // Read returns every piece; a version 3 summary is read again instead.
  if (!m.HasAllPieces()) return;
  m.Reindex();
  cache_[step] = {info, std::make_shared<Manifest>(std::move(m))};
}

void ManifestStore::RememberSummary(
    int64_t step, const ObjectInfo& info, Manifest m,
    std::shared_ptr<const format::Directory> dir) {
  summaries_[step] = Summarized{info, std::make_shared<Manifest>(std::move(m)),
                                std::move(dir)};
}

void ManifestStore::RememberIndex(uint64_t size, Checksum128 checksum,
                                  format::RankIndex x) {
  own_index_ = OwnIndex{size, checksum, std::move(x)};
}

std::vector<std::vector<format::ChunkRecord>> ManifestStore::RecycleRows(
    std::shared_ptr<const Manifest> m) {
  std::vector<std::vector<format::ChunkRecord>> rows;
  if (m == nullptr || m.use_count() != 1) return rows;
  // Sound: every manifest this store hands out was made mutable (above), and
  // no one else can see it.
  Manifest& owned = const_cast<Manifest&>(*m);
  for (format::EntryRecord& e : owned.entries) {
    for (format::PieceRecord& p : e.pieces) {
      if (p.chunks.capacity() == 0) continue;
      p.chunks.clear();
      rows.push_back(std::move(p.chunks));
    }
  }
  return rows;
}

void ManifestStore::UpdateLatestHint(std::optional<int64_t> committed_alone) {
  // LATEST is a hint for humans and other tools; readers never trust it, so
  // a failure to write it does not fail anything. It names the newest step
  // that is complete, never a damaged one.
  Status s;
  if (committed_alone && hinted_ && *committed_alone > *hinted_) {
    // Complete, just committed, and newer than the newest this store found
    // (and no one else writes): the newest, known without a listing, which
    // would make every save cost a walk over every checkpoint.
    s = storage_.PutString(format::kLatestName,
                           std::to_string(*committed_alone) + "\n");
    if (s.ok()) {
      hinted_ = committed_alone;
      return;
    }
    hinted_.reset();
    LogWarning("could not update the LATEST hint: " + s.ToString());
    return;
  }
  hinted_.reset();
  Result<std::shared_ptr<const Manifest>> newest = NewestComplete();
  if (newest.ok()) {
    s = storage_.PutString(format::kLatestName,
                           std::to_string((*newest)->step) + "\n");
    if (s.ok()) hinted_ = (*newest)->step;
  } else if (newest.status().code() == ErrorCode::kNotFound) {
    s = storage_.Delete(format::kLatestName);
    if (s.code() == ErrorCode::kNotFound) s = Status();
  } else {
    s = newest.status();
  }
  if (!s.ok()) LogWarning("could not update the LATEST hint: " + s.ToString());
}

void ManifestStore::WarnSkipped(int64_t step, const ObjectInfo& info,
                                const std::string& why) {
  if (warned_.emplace(step, info.size, info.mtime_unix_ms).second) {
    LogWarning("skipping step " + std::to_string(step) + ": " + why);
  }
}

}  // namespace ckpt

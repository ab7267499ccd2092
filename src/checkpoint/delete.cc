// Deleting a committed checkpoint, on the coordinator or a tool:
//
//   1. The step must be committed (NotFound otherwise).
//   2. Read every other manifest: which checkpoints depend on this one, and
//      which objects they name (never deleted with this step, whatever step
//      directory they lie in).
//   3. Dependants refuse the delete (FailedPrecondition, naming them) unless
//      rewrite_dependants (`ckpt delete --force`) is set: then each
//      dependant, oldest first, gets the chunks it uses of this step copied
//      into a new object of its own (streamed a chunk at a time through one
//      buffer, so memory stays at one chunk), and its manifest is replaced
//      atomically, and recorded in the catalog again; only after all of
//      them does the delete go on.
//   4. Check that the root's lease is still this party's (lease.h): a
//      holder that was taken over, or that only believed it won (a store
//      without an atomic create-if-absent), deletes nothing. Then delete
//      the manifest first: from then on the step is not a checkpoint, and
//      a crash leaves only garbage. Mark it deleted in the catalog.
//   5. Delete the step's objects that are ckpt's own (data objects, a
//      backend's temporaries) and that no other manifest names; anything
//      else in the directory is left alone. Update the LATEST hint.
//   The DeleteReport says what each step did: the dependants rewritten
//   (bytes copied), the objects removed, those kept in the directory and
//   why, those already gone. A dry run goes through 1 to 5 writing nothing:
//   with rewrite_dependants it counts the bytes each rewrite would copy,
//   fails where a rewrite would (an object to copy from gone or too
//   short), and judges the directory as the rewritten dependants would
//   leave it.
#include "checkpoint/delete.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>

#include "data/reader.h"
#include "data/writer.h"
#include "format/constants.h"
#include "util/log.h"

namespace ckpt {

using format::Manifest;

namespace {

std::string ListSteps(const std::vector<int64_t>& steps) {
  std::string list;
  for (int64_t s : steps)
    list += (list.empty() ? "" : ", ") + std::to_string(s);
  return list;
}

// `object` as removed, or skipped when it was `gone` already.
void Record(DeleteReport* report, DeleteReport::Object object, bool gone) {
  if (gone) {
    object.reason = kDeleteAlreadyGone;
    report->skipped.push_back(std::move(object));
    return;
  }
  report->bytes_freed += object.bytes;
  report->removed.push_back(std::move(object));
}

// The bytes of the chunks of `m` that lie in objects of step `step`: what a
// rewrite of `m` without `step` copies.
uint64_t ChunkBytesIn(const Manifest& m, int64_t step) {
  uint64_t bytes = 0;
  for (const auto& e : m.entries) {
    for (const auto& p : e.pieces) {
      for (const auto& c : p.chunks) {
        if (format::StepOfKey(m.objects[c.object].key) == step) {
          bytes += c.length;
        }
      }
    }
  }
  return bytes;
}

std::string RewriteOp(int64_t dependant, int64_t step) {
  return "rewrite step " + std::to_string(dependant) + " without step " +
         std::to_string(step);
}

}  // namespace

Result<uint64_t> Deleter::BytesToRewrite(int64_t dependant, int64_t step) {
  const std::string op = RewriteOp(dependant, step);
  Result<std::shared_ptr<const Manifest>> m = root_.manifests.Read(dependant);
  if (!m.ok()) return m.status().WithContext(op);
  // The objects of `step` the rewrite would read, and how far into each:
  // they must be there, and that long, or the rewrite fails on its first
  // read, and a dry run that promised it would have said what is not so.
  // (Their bytes are checked only by the rewrite, which reads them.)
  std::map<uint32_t, uint64_t> read_up_to;
  for (const auto& e : (*m)->entries) {
    for (const auto& p : e.pieces) {
      for (const auto& c : p.chunks) {
        if (format::StepOfKey((*m)->objects[c.object].key) != step) continue;
        const uint64_t end =
            c.offset + (c.compressed() ? c.stored_length() : c.length);
        read_up_to[c.object] = std::max(read_up_to[c.object], end);
      }
    }
  }
  for (const auto& [object, end] : read_up_to) {
    const std::string& key = (*m)->objects[object].key;
    Result<ObjectInfo> info = root_.storage->Stat(key);
    if (!info.ok()) return info.status().WithContext(op + ": copy from " + key);
    if (info->size < end) {
      return DataLossError(op + ": copy from " + key + ": it holds " +
                           std::to_string(info->size) +
                           " bytes, and the chunks to copy reach byte " +
                           std::to_string(end));
    }
  }
  return ChunkBytesIn(**m, step);
}

Status RootContext::CheckLeaseBeforeDeleting(const std::string& op) {
  // The same refusal as the fence at commit: another party owns the root
  // now, and may be writing what a listing taken before showed as garbage.
  if (Status s = lease->Check(); !s.ok()) {
    return s.WithContext(op + ": nothing was deleted");
  }
  return Status();
}

Status Deleter::Delete(int64_t step, const DeleteRun* run, DeleteReport* report,
                       bool dry_run, bool rewrite_dependants) {
  const std::string op =
      "delete step " + std::to_string(step) + " in " + root_.Where();
  report->step = step;
  report->dry_run = dry_run;
  // 1. Committed?
  if (step < 0) return InvalidArgumentError(op + ": the step is negative");
  const std::string manifest_key = format::ManifestKey(step);
  Result<ObjectInfo> info = root_.storage->Stat(manifest_key);
  if (!info.ok()) {
    if (info.status().code() == ErrorCode::kNotFound) {
      return NotFoundError(op + ": step is not a committed checkpoint");
    }
    return info.status().WithContext(op);
  }
  // 2. Dependants, and the objects that checkpoints which stay name (in a
  // collection, from its one listing; alone, with the steps naming each,
  // for the report).
  std::vector<int64_t> dependants;
  std::map<std::string, std::vector<int64_t>> named_by;
  if (run) {
    if (auto it = run->dependants.find(step); it != run->dependants.end()) {
      dependants = it->second;
    }
  } else {
    CKPT_ASSIGN_OR_RETURN(auto listed, root_.manifests.List());
    for (const auto& [s, oi] : listed) {
      if (s == step) continue;
      Result<std::shared_ptr<const Manifest>> m =
          root_.manifests.Summary(s, oi);
      if (!m.ok()) continue;
      const auto& deps = (*m)->depends_on;
      if (std::find(deps.begin(), deps.end(), step) != deps.end())
        dependants.push_back(s);
      for (const auto& o : (*m)->objects) named_by[o.key].push_back(s);
    }
  }
  std::sort(dependants.begin(), dependants.end());
  // 3. Refuse, or rewrite the dependants first (oldest first; each rewrite
  // is complete, new object durable then manifest replaced, before the next).
  if (!dependants.empty() && !rewrite_dependants) {
    const bool one = dependants.size() == 1;
    return FailedPreconditionError(op + (one ? ": step " : ": steps ") +
                                   ListSteps(dependants) +
                                   (one ? " depends on it; delete it first"
                                        : " depend on it; delete them first"));
  }
  if (!dependants.empty() && !dry_run) {
    CKPT_RETURN_IF_ERROR(root_.CheckLeaseBeforeDeleting(op));
    // One wait, one warning.
    CatalogRecorder::Batch catalog_batch(root_.catalog);
    for (int64_t d : dependants) {
      Result<uint64_t> copied = RewriteDependant(d, step);
      if (!copied.ok()) return copied.status().WithContext(op);
      report->rewritten.push_back({d, *copied});
    }
    return Delete(step, run, report, dry_run, false);
  }
  if (!dependants.empty()) {
    // A dry run: rewritten, the dependants would name none of this step's
    // objects.
    for (int64_t d : dependants) {
      Result<uint64_t> copied = BytesToRewrite(d, step);
      if (!copied.ok()) return copied.status().WithContext(op);
      report->rewritten.push_back({d, *copied});
    }
    for (auto& [key, steps] : named_by) {
      std::erase_if(steps, [&](int64_t s) {
        return std::binary_search(dependants.begin(), dependants.end(), s);
      });
    }
  }
  std::vector<ObjectInfo> listed_objects;
  if (run) {
    if (auto it = run->objects.find(step); it != run->objects.end()) {
      listed_objects = it->second;
    }
  } else {
    CKPT_ASSIGN_OR_RETURN(listed_objects,
                          root_.storage->List(format::StepDirName(step) + "/"));
  }
  std::vector<ObjectInfo> doomed;
  for (const ObjectInfo& o : listed_objects) {
    if (o.key == manifest_key) continue;
    const auto named = named_by.find(o.key);
    if (named != named_by.end() && !named->second.empty()) {
      report->kept.push_back(
          {o.key, o.size, kDeleteNamedByCheckpoint, named->second});
    } else if (run && run->named_by_staying.count(o.key)) {
      report->kept.push_back({o.key, o.size, kDeleteNamedByCheckpoint, {}});
    } else if (format::IsCkptObjectKey(o.key) ||
               IsTemporaryOf(*root_.storage, o.key)) {
      doomed.push_back(o);  // ckpt's own; anything else is left alone
    } else {
      report->kept.push_back({o.key, o.size, kDeleteNotCkptObject, {}});
    }
  }
  // 4. The manifest first, once the lease is known to be still ours: what
  // was judged above from the listings holds only while no other party
  // writes.
  bool manifest_gone = false;
  if (!dry_run) {
    CKPT_RETURN_IF_ERROR(root_.CheckLeaseBeforeDeleting(op));
    // Another party deleting the same step may have removed it first: the
    // outcome is the same, so that is no error.
    Status s = root_.storage->Delete(manifest_key);
    if (!s.ok() && s.code() != ErrorCode::kNotFound) return s.WithContext(op);
    manifest_gone = s.code() == ErrorCode::kNotFound;
    root_.manifests.Forget(step);
    root_.catalog.Deleted(step);
  }
  Record(report, DeleteReport::Object{manifest_key, info->size, "", {}},
         manifest_gone);
  report->manifest_deleted = !manifest_gone;
  // 5. Its objects.
  for (const ObjectInfo& o : doomed) {
    bool gone = false;
    if (!dry_run) {
      Status s = root_.storage->Delete(o.key);
      if (!s.ok() && s.code() != ErrorCode::kNotFound) return s.WithContext(op);
      gone = s.code() == ErrorCode::kNotFound;
    }
    Record(report, DeleteReport::Object{o.key, o.size, "", {}}, gone);
  }
  if (!dry_run && !run) root_.manifests.UpdateLatestHint();
  return Status();
}

Result<uint64_t> Deleter::RewriteDependant(int64_t dependant, int64_t step) {
  const std::string op = RewriteOp(dependant, step);
  CKPT_ASSIGN_OR_RETURN(std::shared_ptr<const Manifest> old,
                        root_.manifests.Read(dependant));
  Manifest m = *old;
  // The chunks to copy, each a piece of its own in the new object, under a
  // name none of the dependant's tensors has.
  std::set<std::string> names;
  for (const auto& e : m.entries) names.insert(e.name);
  struct Moved {
    const format::EntryRecord* entry;
    format::ChunkRecord* chunk;
  };
  std::vector<Moved> moved;
  std::vector<format::TensorLayout> tensors;
  uint64_t largest = 1;
  uint64_t copied = 0;
  for (auto& e : m.entries) {
    for (auto& p : e.pieces) {
      for (auto& c : p.chunks) {
        if (format::StepOfKey(m.objects[c.object].key) != step) continue;
        std::string name;
        for (size_t n = tensors.size();; ++n) {
          name = format::RunTensorName(e.name, n);
          if (!names.count(name)) break;
        }
        names.insert(name);
        tensors.push_back(format::TensorLayout{
            name, DType::kU8, {static_cast<int64_t>(c.length)}});
        moved.push_back(Moved{&e, &c});
        largest = std::max(largest, c.length);
        copied += c.length;
      }
    }
  }
  if (!moved.empty()) {
    // The rewrite is a new attempt at the step's manifest: the manifest
    // names it, so `attempt` and the newest object's name agree.
    m.attempt = NewAttemptId();
    const std::string key = format::DataObjectKey(dependant, 0, m.attempt);
    // One chunk at a time through one buffer, each checked as it is read:
    // the memory a rewrite takes is one chunk, however much it copies.
    CKPT_ASSIGN_OR_RETURN(DataObjectStream out,
                          DataObjectStream::Start(*root_.storage, key,
                                                  std::move(tensors), largest));
    const auto buffer = std::make_unique_for_overwrite<std::byte[]>(largest);
    for (const Moved& mv : moved) {
      const std::span<std::byte> bytes(buffer.get(), mv.chunk->length);
      CKPT_RETURN_IF_ERROR_CTX(
          ReadChunk(*root_.storage, *old, *mv.entry, *mv.chunk, bytes), op);
      CKPT_RETURN_IF_ERROR_CTX(out.Append(bytes), op);
    }
    CKPT_ASSIGN_OR_RETURN(WrittenObject written, out.Close());
    const uint32_t index = static_cast<uint32_t>(m.objects.size());
    m.objects.push_back(format::ObjectRecord{key, written.size, 0});
    // ReadChunk handed over the chunks' bytes, decompressed: the copies are
    // raw whatever the originals were.
    for (size_t i = 0; i < moved.size(); ++i) {
      moved[i].chunk->object = index;
      moved[i].chunk->offset = written.chunks[i][0].offset;
      moved[i].chunk->SetRaw();
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
    const int64_t s = format::StepOfKey(m.objects[i].key);
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
  // Rewritten as one JSON manifest whatever it was: a version 3 dependant's
  // directory and indexes name the old attempt and become garbage.
  if (m.version == format::kScalableManifestVersion) {
    m.version = format::kIncrementalManifestVersion;
    m.metadata_objects.clear();
    m.data_bytes = m.own_data_bytes = 0;
    m.directory = {};
  }
  if (m.depends_on.empty()) {
    m.version = format::kManifestVersion;
    m.parent = -1;
    m.chain = 0;
  }
  CKPT_RETURN_IF_ERROR_CTX(format::ValidateManifest(m), op);
  // Replacing a committed manifest is atomic on every backend; until it
  // happens the old one, whose bytes are all still there, stands.
  const std::string encoded = format::EncodeManifest(m);
  CKPT_RETURN_IF_ERROR_CTX(
      root_.storage->PutString(format::ManifestKey(dependant), encoded), op);
  root_.manifests.Forget(dependant);
  // A version 3 dependant's directory and indexes are named by nothing now.
  // Best effort: what stays is garbage a collection removes.
  for (const format::ObjectRecord& o : old->metadata_objects) {
    if (Status s = root_.storage->Delete(o.key);
        !s.ok() && s.code() != ErrorCode::kNotFound) {
      LogWarning(op + ": could not remove " + o.key + ": " + s.ToString());
    }
  }
  // Its row must name the new manifest (checksum, bytes), or a reader that
  // checks rows against storage skips it.
  root_.catalog.Committed(InfoFromManifest(m), encoded);
  return copied;
}

}  // namespace ckpt

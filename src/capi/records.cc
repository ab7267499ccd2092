#include "capi/records.h"

#include <string>

#include "format/json.h"

namespace ckpt::records {

using nlohmann::json;

json InfoJson(const CheckpointInfo& info) {
  json timing = nullptr;  // not recorded (an older checkpoint)
  if (info.timing.recorded) {
    const SaveTiming& t = info.timing;
    json ranks = json::array();
    for (const RankSaveTiming& r : t.ranks) {
      ranks.push_back(
          {{"rank", r.rank}, {"write_ms", r.write_ms}, {"wait_ms", r.wait_ms}});
    }
    timing = {{"save_ms", t.save_ms},
              {"commit_ms", t.commit_ms},
              {"stall_ms", t.stall_ms},
              {"async", t.async},
              {"ranks", std::move(ranks)}};
  }
  return {{"step", info.step},
          {"epoch", info.epoch},
          {"created_unix_ms", info.created_unix_ms},
          {"job_id", info.job_id},
          {"world_size", info.world_size},
          {"hosts", info.hosts},
          {"bytes", info.bytes},
          {"depends_on", info.depends_on},
          {"referenced_bytes", info.referenced_bytes},
          {"parent", info.parent},
          {"chain", info.chain},
          {"metrics", info.metrics},
          {"metadata", info.metadata},
          {"num_entries", info.num_entries},
          {"internal_entries", info.internal_entries},
          {"incomplete", info.incomplete},
          {"timing", std::move(timing)}};
}

json SaveResultJson(const SaveResult& result) {
  return {{"skipped", result.skipped},
          {"info", InfoJson(result.info)},
          {"deleted_steps", result.deleted_steps},
          {"replaced", result.replaced},
          {"replaced_because", result.replaced_because}};
}

json EntryJson(const EntryInfo& e) {
  json out = {{"name", e.name},
              {"owner", e.owner},
              {"kind", std::string(EntryKindName(e.kind))},
              {"dtype", std::string(DTypeName(e.dtype))},
              {"shape", e.shape},
              {"num_pieces", e.num_pieces},
              {"bytes", e.bytes}};
  if (e.kind == EntryKind::kMetadata) out["json"] = e.json;
  return out;
}

json DescriptionJson(const CheckpointDescription& desc) {
  json entries = json::array();
  for (const EntryInfo& e : desc.entries) entries.push_back(EntryJson(e));
  return {{"info", InfoJson(desc.info)}, {"entries", std::move(entries)}};
}

std::string DescriptionText(const CheckpointDescription& desc) {
  // The keys in the order Dump writes them (sorted): a test holds the two
  // texts equal.
  std::string out = "{\"entries\":[";
  for (size_t i = 0; i < desc.entries.size(); ++i) {
    const EntryInfo& e = desc.entries[i];
    out += i == 0 ? "{\"bytes\":" : ",{\"bytes\":";
    out += std::to_string(e.bytes);
    out += ",\"dtype\":";
    format::AppendJsonString(out, DTypeName(e.dtype));
    if (e.kind == EntryKind::kMetadata) {
      out += ",\"json\":";
      format::AppendJsonString(out, e.json);
    }
    out += ",\"kind\":";
    format::AppendJsonString(out, EntryKindName(e.kind));
    out += ",\"name\":";
    format::AppendJsonString(out, e.name);
    out += ",\"num_pieces\":" + std::to_string(e.num_pieces);
    out += ",\"owner\":" + std::to_string(e.owner);
    out += ",\"shape\":[";
    for (size_t d = 0; d < e.shape.size(); ++d) {
      if (d > 0) out += ',';
      out += std::to_string(e.shape[d]);
    }
    out += "]}";
  }
  out += "],\"info\":" + Dump(InfoJson(desc.info)) + "}";
  return out;
}

std::string DescriptionColumnsText(const CheckpointDescription& desc) {
  std::string names, kinds, dtypes, owners, ndims, shapes, bytes, pieces;
  std::string metadata;
  for (size_t i = 0; i < desc.entries.size(); ++i) {
    const EntryInfo& e = desc.entries[i];
    const char* sep = i == 0 ? "" : ",";
    names += sep;
    format::AppendJsonString(names, e.name);
    kinds += sep;
    format::AppendJsonString(kinds, EntryKindName(e.kind));
    dtypes += sep;
    format::AppendJsonString(dtypes, DTypeName(e.dtype));
    owners += sep + std::to_string(e.owner);
    ndims += sep + std::to_string(e.shape.size());
    for (int64_t d : e.shape) {
      if (!shapes.empty()) shapes += ',';
      shapes += std::to_string(d);
    }
    bytes += sep + std::to_string(e.bytes);
    pieces += sep + std::to_string(e.num_pieces);
    if (e.kind == EntryKind::kMetadata) {
      metadata += metadata.empty() ? "\"" : ",\"";
      metadata += std::to_string(i) + "\":";
      format::AppendJsonString(metadata, e.json);
    }
  }
  return "{\"bytes\":[" + bytes + "],\"dtypes\":[" + dtypes +
         "],\"info\":" + Dump(InfoJson(desc.info)) + ",\"kinds\":[" + kinds +
         "],\"metadata\":{" + metadata + "},\"names\":[" + names +
         "],\"ndims\":[" + ndims + "],\"num_pieces\":[" + pieces +
         "],\"owners\":[" + owners + "],\"shapes\":[" + shapes + "]}";
}

json VerifyJson(const VerifyReport& r) {
  return {{"step", r.step},
          {"chunks_checked", r.chunks_checked},
          {"bytes_checked", r.bytes_checked},
          {"problems", r.problems},
          {"unreadable", r.unreadable},
          {"header_only", r.header_only}};
}

json GcJson(const GcReport& r) {
  json steps = json::array();
  for (const DeleteReport& d : r.step_reports) steps.push_back(DeleteJson(d));
  return {{"deleted_steps", r.deleted_steps},
          {"deleted_objects", r.deleted_objects},
          {"bytes_freed", r.bytes_freed},
          {"step_reports", std::move(steps)}};
}

namespace {

json ObjectsJson(const std::vector<DeleteReport::Object>& objects,
                 bool with_reason) {
  json out = json::array();
  for (const DeleteReport::Object& o : objects) {
    json j = {{"key", o.key}, {"bytes", o.bytes}};
    if (with_reason) {
      j["reason"] = o.reason;
      j["named_by"] = o.named_by;
    }
    out.push_back(std::move(j));
  }
  return out;
}

}  // namespace

json DeleteJson(const DeleteReport& r) {
  std::vector<std::string> keys;
  for (const DeleteReport::Object& o : r.removed) keys.push_back(o.key);
  json rewritten = json::array();
  for (const DeleteReport::Rewritten& w : r.rewritten) {
    rewritten.push_back({{"step", w.step}, {"bytes_copied", w.bytes_copied}});
  }
  return {{"step", r.step},
          {"dry_run", r.dry_run},
          {"deleted_steps", json::array({r.step})},
          {"deleted_objects", keys},
          {"bytes_freed", r.bytes_freed},
          {"manifest_deleted", r.manifest_deleted},
          {"removed", ObjectsJson(r.removed, false)},
          {"kept", ObjectsJson(r.kept, true)},
          {"skipped", ObjectsJson(r.skipped, true)},
          {"rewritten", rewritten}};
}

json CatalogRowJson(const CatalogCheckpoint& c) {
  return {{"job_id", c.job_id},
          {"root", c.root},
          {"step", c.step},
          {"epoch", c.epoch},
          {"scheme", c.scheme},
          {"world_size", c.world_size},
          {"hosts", c.hosts},
          {"bytes", c.bytes},
          {"manifest_checksum", c.manifest_checksum},
          {"metrics", c.metrics},
          {"created_unix_ms", c.created_unix_ms},
          {"state", std::string(CheckpointStateName(c.state))},
          {"tier", std::string(CatalogTierName(c.tier))}};
}

json CatalogJobJson(const CatalogJob& j) {
  return {
      {"job_id", j.job_id},
      {"root", j.root},
      {"first_seen_unix_ms", j.first_seen_unix_ms},
      {"last_seen_unix_ms", j.last_seen_unix_ms},
      {"committed", j.committed},
      {"latest_step", j.latest_step ? json(*j.latest_step) : json(nullptr)}};
}

std::string Dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

nlohmann::json TierSaveResultJson(const TierSaveResult& r) {
  return {{"step", r.step},
          {"skipped", r.skipped},
          {"local", r.local},
          {"local_error", r.local_error},
          {"durable", r.durable},
          {"durable_result", r.durable ? SaveResultJson(r.durable_result)
                                       : nlohmann::json(nullptr)},
          {"local_bytes", r.local_bytes},
          {"replicated_bytes", r.replicated_bytes},
          {"local_seconds", r.local_seconds},
          {"durable_seconds", r.durable_seconds}};
}

nlohmann::json TierRestoreResultJson(const TierRestoreResult& r) {
  return {{"tier", TierName(r.tier)},
          {"step", r.step},
          {"info",
           r.tier == Tier::kNone ? nlohmann::json(nullptr) : InfoJson(r.info)},
          {"fetched_bytes", r.fetched_bytes},
          {"ranks_fetched", r.ranks_fetched},
          {"local_skipped", r.local_skipped},
          {"durable_has_step", r.durable_has_step}};
}

nlohmann::json LocalShareJson(const LocalShareInfo& s) {
  return {{"rank", s.rank},
          {"step", s.step},
          {"marked", s.marked},
          {"world_size", s.world_size},
          {"bytes", s.bytes}};
}

}  // namespace ckpt::records

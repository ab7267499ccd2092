// The JSON form of records with many fields: what the C API returns
// (include/ckpt/c.h documents each object's fields), and what the ckpt
// command's --json output builds on, so that both speak of a checkpoint
// alike.
#pragma once

#include <nlohmann/json.hpp>

#include "ckpt/catalog.h"
#include "ckpt/checkpoint_manager.h"
#include "ckpt/tiered.h"

namespace ckpt::records {

nlohmann::json InfoJson(const CheckpointInfo& info);
nlohmann::json SaveResultJson(const SaveResult& result);
nlohmann::json EntryJson(const EntryInfo& entry);
nlohmann::json DescriptionJson(const CheckpointDescription& desc);
// Dump(DescriptionJson(desc)), written straight as text: for 10,000 entries
// the json values cost several times the description itself.
std::string DescriptionText(const CheckpointDescription& desc);
// The same entries as columns (include/ckpt/c.h,
// ckpt_manager_describe_columns): a list per field instead of an object per
// entry, which a binding parses several times faster.
std::string DescriptionColumnsText(const CheckpointDescription& desc);
nlohmann::json VerifyJson(const VerifyReport& report);
// With step_reports: DeleteJson of each deleted step, newest first (the
// order deleted), as `ckpt gc --json` prints them.
nlohmann::json GcJson(const GcReport& report);
// Also the keys `ckpt gc --json` prints (deleted_steps, deleted_objects,
// bytes_freed), for the one step.
nlohmann::json DeleteJson(const DeleteReport& report);
nlohmann::json CatalogRowJson(const CatalogCheckpoint& row);
nlohmann::json CatalogJobJson(const CatalogJob& job);
nlohmann::json TierSaveResultJson(const TierSaveResult& result);
nlohmann::json TierRestoreResultJson(const TierRestoreResult& result);
nlohmann::json LocalShareJson(const LocalShareInfo& share);

// Compact text; bytes that are not UTF-8 (which names and metadata cannot
// hold, but a damaged catalog row might) become U+FFFD instead of throwing.
std::string Dump(const nlohmann::json& j);

}  // namespace ckpt::records

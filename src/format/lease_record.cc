#include "format/lease_record.h"

#include <nlohmann/json.hpp>

#include "format/json.h"

namespace ckpt::format {

using nlohmann::json;

std::string EncodeLease(const LeaseRecord& l) {
  return json{{"version", kLeaseVersion},
              {"owner", l.owner},
              {"job_id", l.job_id},
              {"purpose", l.purpose},
              {"host", l.host},
              {"boot_id", l.boot_id},
              {"pid", l.pid},
              {"started_unix_ms", l.started_unix_ms},
              {"renewed_unix_ms", l.renewed_unix_ms},
              {"expires_unix_ms", l.expires_unix_ms},
              {"released", l.released}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

Result<LeaseRecord> DecodeLease(std::string_view bytes, std::string_view key) {
  const std::string what = "lease " + std::string(key);
  if (bytes.size() > kMaxLeaseBytes) {
    return DataLossError(what + ": " + std::to_string(bytes.size()) +
                         " bytes, more than a lease holds");
  }
  CKPT_ASSIGN_OR_RETURN(json j, ParseJsonStrict(bytes, what));
  if (!j.is_object()) return DataLossError(what + ": not a JSON object");
  auto field = [&](const char* name, json::value_t type) -> const json* {
    auto it = j.find(name);
    if (it == j.end()) return nullptr;
    // Unsigned and signed integers are both integers here.
    const bool integer =
        type == json::value_t::number_integer && it->is_number_integer();
    return integer || it->type() == type ? &*it : nullptr;
  };
  const json* version = field("version", json::value_t::number_integer);
  if (version == nullptr || *version != kLeaseVersion) {
    return DataLossError(what + ": not a version " +
                         std::to_string(kLeaseVersion) + " lease");
  }
  LeaseRecord l;
  for (auto [name, out] : {std::pair{"owner", &l.owner},
                           {"job_id", &l.job_id},
                           {"purpose", &l.purpose},
                           {"host", &l.host},
                           {"boot_id", &l.boot_id}}) {
    const json* f = field(name, json::value_t::string);
    if (f == nullptr) {
      return DataLossError(what + ": field \"" + name +
                           "\" is missing or not a string");
    }
    *out = f->get<std::string>();
  }
  for (auto [name, out] : {std::pair{"pid", &l.pid},
                           {"started_unix_ms", &l.started_unix_ms},
                           {"renewed_unix_ms", &l.renewed_unix_ms},
                           {"expires_unix_ms", &l.expires_unix_ms}}) {
    const json* f = field(name, json::value_t::number_integer);
    if (f == nullptr ||
        (f->is_number_unsigned() && f->get<uint64_t>() > uint64_t{INT64_MAX})) {
      return DataLossError(what + ": field \"" + name +
                           "\" is missing or not an integer");
    }
    *out = f->get<int64_t>();
    if (*out < 0) {
      return DataLossError(what + ": field \"" + name + "\" is negative");
    }
  }
  const json* released = field("released", json::value_t::boolean);
  if (released == nullptr) {
    return DataLossError(what +
                         ": field \"released\" is missing or not a boolean");
  }
  l.released = released->get<bool>();
  if (l.owner.empty()) return DataLossError(what + ": names no owner");
  if (l.expires_unix_ms < l.started_unix_ms ||
      l.renewed_unix_ms < l.started_unix_ms) {
    return DataLossError(what + ": expires or was renewed before it started");
  }
  return l;
}

}  // namespace ckpt::format

#include "format/json.h"

#include <set>
#include <string>
#include <vector>

#include "util/names.h"

namespace ckpt::format {

Result<nlohmann::json> ParseJsonStrict(std::string_view text,
                                       std::string_view what) {
  constexpr size_t kMaxDepth = 64;
  // nlohmann's lexer takes a NUL byte for the end of the input and ignores
  // everything after it, so "{...}\0garbage" would parse. JSON text never
  // holds a raw NUL (inside a string it must be escaped).
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    return DataLossError(std::string(what) +
                         ": not valid JSON: a NUL byte at offset " +
                         std::to_string(nul));
  }
  std::vector<std::set<std::string>> keys;  // one set per open object
  std::string problem;
  auto callback = [&](int depth, nlohmann::json::parse_event_t event,
                      nlohmann::json& parsed) -> bool {
    using E = nlohmann::json::parse_event_t;
    if (!problem.empty()) return false;
    if (static_cast<size_t>(depth) > kMaxDepth) {
      problem = "JSON nested deeper than 64 levels";
      return false;
    }
    switch (event) {
      case E::object_start:
        keys.emplace_back();
        break;
      case E::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case E::key: {
        const std::string& k = parsed.get_ref<const std::string&>();
        if (!keys.empty() && !keys.back().insert(k).second) {
          problem = "duplicate key " + Quote(k);
          return false;
        }
        break;
      }
      default:
        break;
    }
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end(), callback,
                              /*allow_exceptions=*/true);
  } catch (const nlohmann::json::exception& e) {
    if (problem.empty()) {
      // nlohmann quotes the offending input, which may hold bytes that are
      // not UTF-8; escape them (and shorten) as Quote does, so the message
      // is safe to print and to put into JSON.
      const std::string quoted = Quote(e.what());
      problem = "not valid JSON: " + quoted.substr(1, quoted.size() - 2);
    }
  }
  if (!problem.empty()) {
    return DataLossError(std::string(what) + ": " + problem);
  }
  if (j.is_discarded()) {
    return DataLossError(std::string(what) + ": not valid JSON");
  }
  return j;
}

}  // namespace ckpt::format

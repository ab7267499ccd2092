#include "format/json.h"

#include <string>
#include <utility>
#include <vector>

#include "util/names.h"

namespace ckpt::format {
namespace {

using nlohmann::json;

// Builds the tree from nlohmann's SAX events. nlohmann's own parser with a
// callback (which ckpt used to see each key) rescans the enclosing array each
// time a value closes, which made a manifest of n chunk rows take O(n^2).
// Here a duplicate key is found by the object's own map, and the depth is the
// stack's size, so each event costs O(log keys) at most.
class StrictBuilder {
 public:
  explicit StrictBuilder(const JsonFold& fold) : fold_(fold) {}

  // Depth as nlohmann's callback counts it: the number of containers around
  // an opening bracket, a key or a scalar.
  static constexpr size_t kMaxDepth = 64;

  bool null() { return Value(json(nullptr)); }
  bool boolean(bool v) { return Value(json(v)); }
  bool number_integer(json::number_integer_t v) { return Value(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return Value(json(v)); }
  bool number_float(json::number_float_t v, const std::string&) {
    return Value(json(v));
  }
  bool string(std::string& v) { return Value(json(std::move(v))); }
  bool binary(json::binary_t&) {
    problem_ = "not valid JSON: binary value";
    return false;
  }
  bool start_object(std::size_t) { return Open(json::value_t::object); }
  bool start_array(std::size_t) { return Open(json::value_t::array); }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }

  bool key(std::string& k) {
    if (!CheckDepth()) return false;
    auto& members = open_.back()->get_ref<json::object_t&>();
    auto [it, inserted] = members.try_emplace(std::move(k));
    if (!inserted) {
      problem_ = "duplicate key " + Quote(it->first);
      return false;
    }
    slot_ = &it->second;
    path_.back().key = it->first;
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const json::exception& e) {
    // nlohmann quotes the offending input, which may hold bytes that are not
    // UTF-8; escape them (and shorten) as Quote does, so the message is safe
    // to print and to put into JSON.
    const std::string quoted = Quote(e.what());
    problem_ = "not valid JSON: " + quoted.substr(1, quoted.size() - 2);
    return false;
  }

  const std::string& problem() const { return problem_; }
  json& root() { return root_; }

 private:
  bool CheckDepth() {
    if (open_.size() > kMaxDepth) {
      problem_ = "JSON nested deeper than 64 levels";
      return false;
    }
    return true;
  }

  // Where the next value goes: the root, the end of the open array, or the
  // member whose key came last.
  json* Place(json&& v) {
    if (open_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    json& top = *open_.back();
    if (top.is_array()) {
      auto& elements = top.get_ref<json::array_t&>();
      elements.push_back(std::move(v));
      return &elements.back();
    }
    *slot_ = std::move(v);
    return slot_;
  }

  bool Value(json&& v) {
    if (!CheckDepth()) return false;
    Place(std::move(v));
    return true;
  }

  bool Open(json::value_t type) {
    if (!CheckDepth()) return false;
    // An element's address is stable while it is open: its array grows only
    // after it closes.
    open_.push_back(Place(json(type)));
    path_.push_back({type == json::value_t::array, {}});
    return true;
  }

  bool Close() {
    json* closing = open_.back();
    open_.pop_back();
    path_.pop_back();
    if (fold_ && fold_(path_, *closing)) {
      *closing = json(json::value_t::discarded);
    }
    return true;
  }

  const JsonFold& fold_;
  json root_;
  std::vector<json*> open_;     // the open containers, outermost first
  std::vector<JsonStep> path_;  // where in each open container we are
  json* slot_ = nullptr;        // the member the last key named
  std::string problem_;
};

}  // namespace

Result<nlohmann::json> ParseJsonStrict(std::string_view text,
                                       std::string_view what,
                                       const JsonFold& fold) {
  // nlohmann's lexer takes a NUL byte for the end of the input and ignores
  // everything after it, so "{...}\0garbage" would parse. JSON text never
  // holds a raw NUL (inside a string it must be escaped).
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    return DataLossError(std::string(what) +
                         ": not valid JSON: a NUL byte at offset " +
                         std::to_string(nul));
  }
  StrictBuilder builder(fold);
  bool ok = false;
  try {
    ok = json::sax_parse(text.begin(), text.end(), &builder);
  } catch (const json::exception& e) {
    builder.parse_error(0, "", e);
  }
  if (!ok || !builder.problem().empty()) {
    return DataLossError(
        std::string(what) + ": " +
        (builder.problem().empty() ? "not valid JSON" : builder.problem()));
  }
  return std::move(builder.root());
}

void AppendJsonString(std::string& out, std::string_view s) {
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u > 0x7e || c == '"' || c == '\\') {
      out +=
          nlohmann::json(std::string(s))
              .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      return;
    }
  }
  out += '"';
  out += s;
  out += '"';
}

}  // namespace ckpt::format

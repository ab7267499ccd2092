#include "format/safetensors.h"

#include <algorithm>
#include <set>
#include <string_view>
#include <unordered_set>

#include "format/constants.h"
#include "format/json.h"
#include "util/bytes.h"
#include "util/names.h"

namespace ckpt::format {
namespace {

// Element count × dtype size, or an error on a negative dimension/overflow.
Result<uint64_t> ShapeBytes(DType dtype, const std::vector<int64_t>& shape) {
  uint64_t n = DTypeSize(dtype);
  for (int64_t d : shape) {
    if (d < 0) return InvalidArgumentError("negative dimension");
  }
  // A zero anywhere makes the tensor empty, whatever the other dimensions.
  if (std::find(shape.begin(), shape.end(), 0) != shape.end())
    return uint64_t{0};
  for (int64_t d : shape) {
    if (d != 0 && n > UINT64_MAX / static_cast<uint64_t>(d)) {
      return InvalidArgumentError("shape byte count overflows 64 bits");
    }
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

}  // namespace

Result<std::string> EncodeSafetensorsHeader(
    std::vector<TensorLayout>& tensors,
    const std::map<std::string, std::string>& metadata, uint64_t alignment) {
  if (alignment < kSafetensorsAlignment || (alignment & (alignment - 1))) {
    return InvalidArgumentError("safetensors data alignment " +
                                std::to_string(alignment) +
                                " is not a power of two of at least 8");
  }
  // Written as text: a json value per tensor costs several allocations, and
  // for 10,000 small tensors (an optimizer's state) building and dumping
  // them was a fifth of a save's CPU. Keys come in the data's order, with
  // __metadata__ first; readers look keys up, so the order means nothing.
  std::string json = "{";
  if (!metadata.empty()) {
    try {
      json += "\"__metadata__\":" + nlohmann::json(metadata).dump() + ",";
    } catch (const nlohmann::json::exception&) {
      // Names are checked to be UTF-8 below; metadata is the user's bytes,
      // and dump() throws on any that are not UTF-8. No exception leaves
      // ckpt.
      return InvalidArgumentError(
          "safetensors metadata holds a key or value that is not UTF-8");
    }
  }
  std::unordered_set<std::string_view> names;
  names.reserve(tensors.size());
  uint64_t offset = 0;
  for (TensorLayout& t : tensors) {
    CKPT_RETURN_IF_ERROR(ValidateEntryName(t.name));
    if (!names.insert(t.name).second) {
      return InvalidArgumentError("duplicate tensor name " + Quote(t.name));
    }
    Result<uint64_t> bytes = ShapeBytes(t.dtype, t.shape);
    if (!bytes.ok())
      return bytes.status().WithContext("tensor " + Quote(t.name));
    if (*bytes > UINT64_MAX - offset) {
      return InvalidArgumentError("data section overflows 64 bits");
    }
    t.begin = offset;
    t.end = offset + *bytes;
    offset = t.end;
    AppendJsonString(json, t.name);
    json += ":{\"dtype\":\"";
    json += DTypeName(t.dtype);
    json += "\",\"shape\":[";
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (d) json += ',';
      json += std::to_string(t.shape[d]);
    }
    json += "],\"data_offsets\":[" + std::to_string(t.begin) + "," +
            std::to_string(t.end) + "]},";
  }
  if (json.size() > 1) json.pop_back();  // the last comma
  json += '}';
  const size_t total = 8 + json.size();
  const size_t padded = (total + alignment - 1) / alignment * alignment;
  json.append(padded - total, ' ');
  if (json.size() > kMaxSafetensorsHeader) {
    return InvalidArgumentError(
        "safetensors header of " + std::to_string(json.size()) +
        " bytes exceeds the limit of " + std::to_string(kMaxSafetensorsHeader) +
        " (split the state over more data files)");
  }
  std::string out(8, '\0');
  EncodeU64LE(json.size(), out.data());
  out += json;
  return out;
}

Result<uint64_t> DecodeSafetensorsHeaderLength(
    std::span<const std::byte> prefix, uint64_t file_size,
    std::string_view what) {
  if (prefix.size() < 8 || file_size < 8) {
    return DataLossError(std::string(what) +
                         ": shorter than the 8-byte safetensors header length");
  }
  const uint64_t n = DecodeU64LE(prefix.data());
  if (n > kMaxSafetensorsHeader) {
    return DataLossError(std::string(what) + ": header length " +
                         std::to_string(n) + " exceeds the limit of " +
                         std::to_string(kMaxSafetensorsHeader) +
                         ": not a safetensors file, or a damaged one");
  }
  if (n > file_size - 8) {
    return DataLossError(
        std::string(what) + ": header length " + std::to_string(n) +
        " runs past the end of the file (" + std::to_string(file_size) +
        " bytes): not a safetensors file, or a truncated "
        "one");
  }
  return n;
}

Result<SafetensorsHeader> ParseSafetensorsHeader(std::string_view json,
                                                 uint64_t file_size,
                                                 std::string_view what) {
  const std::string w(what);
  auto bad = [&](const std::string& why) {
    return DataLossError(w + ": " + why);
  };
  if (json.size() > file_size || file_size - json.size() < 8) {
    return bad("header does not fit in the file");
  }
  CKPT_ASSIGN_OR_RETURN(nlohmann::json j, ParseJsonStrict(json, what));
  if (!j.is_object()) return bad("header is not a JSON object");

  SafetensorsHeader out;
  out.data_start = 8 + json.size();
  out.data_size = file_size - out.data_start;
  for (auto& [name, value] : j.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) return bad("__metadata__ is not an object");
      for (auto& [k, v] : value.items()) {
        if (!v.is_string()) {
          return bad("__metadata__ value " + Quote(k) + " is not a string");
        }
        out.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string tensor = "tensor " + Quote(name);
    if (Status s = ValidateEntryName(name); !s.ok()) {
      return bad(s.message());
    }
    if (!value.is_object()) return bad(tensor + " is not an object");
    for (auto& [k, v] : value.items()) {
      if (k != "dtype" && k != "shape" && k != "data_offsets") {
        return bad(tensor + " has an unknown field " + Quote(k));
      }
    }
    TensorLayout t;
    t.name = name;
    auto dt = value.find("dtype");
    if (dt == value.end() || !dt->is_string()) {
      return bad(tensor + " has no dtype string");
    }
    std::optional<DType> dtype = ParseDType(dt->get<std::string>());
    if (!dtype) {
      return bad(tensor + " has unknown dtype " +
                 Quote(dt->get<std::string>()));
    }
    t.dtype = *dtype;
    auto shape = value.find("shape");
    if (shape == value.end() || !shape->is_array()) {
      return bad(tensor + " has no shape array");
    }
    if (shape->size() > 64) return bad(tensor + " has more than 64 dimensions");
    for (const auto& d : *shape) {
      if (!d.is_number_unsigned()) {
        return bad(tensor + " has a shape that is not non-negative integers");
      }
      const uint64_t v = d.get<uint64_t>();
      if (v > static_cast<uint64_t>(INT64_MAX)) {
        return bad(tensor + " has a dimension out of range");
      }
      t.shape.push_back(static_cast<int64_t>(v));
    }
    auto offs = value.find("data_offsets");
    if (offs == value.end() || !offs->is_array() || offs->size() != 2 ||
        !(*offs)[0].is_number_unsigned() || !(*offs)[1].is_number_unsigned()) {
      return bad(tensor + " has no data_offsets [begin, end]");
    }
    t.begin = (*offs)[0].get<uint64_t>();
    t.end = (*offs)[1].get<uint64_t>();
    if (t.end < t.begin) return bad(tensor + " has data_offsets end < begin");
    Result<uint64_t> bytes = ShapeBytes(t.dtype, t.shape);
    if (!bytes.ok()) return bad(tensor + ": " + bytes.status().message());
    if (t.end - t.begin != *bytes) {
      return bad(tensor + " has data_offsets [" + std::to_string(t.begin) +
                 ", " + std::to_string(t.end) + ") of " +
                 std::to_string(t.end - t.begin) +
                 " bytes but its shape needs " + std::to_string(*bytes));
    }
    out.tensors.push_back(std::move(t));
  }
  std::sort(out.tensors.begin(), out.tensors.end(),
            [](const TensorLayout& a, const TensorLayout& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  uint64_t expect = 0;
  for (const TensorLayout& t : out.tensors) {
    if (t.begin < expect) {
      return bad("tensor " + Quote(t.name) + " overlaps the tensor before it");
    }
    if (t.begin > expect) {
      return bad("hole in the data section before tensor " + Quote(t.name));
    }
    expect = t.end;
  }
  if (expect > out.data_size) {
    return bad("tensors run past the end of the file (data section is " +
               std::to_string(out.data_size) + " bytes, tensors need " +
               std::to_string(expect) + ")");
  }
  if (expect < out.data_size) {
    return bad("data section has " + std::to_string(out.data_size - expect) +
               " trailing bytes that no tensor covers");
  }
  return out;
}

Result<SafetensorsHeader> ParseSafetensorsFile(std::string_view file,
                                               std::string_view what) {
  CKPT_ASSIGN_OR_RETURN(uint64_t n,
                        DecodeSafetensorsHeaderLength(
                            std::span<const std::byte>(
                                reinterpret_cast<const std::byte*>(file.data()),
                                std::min<size_t>(file.size(), 8)),
                            file.size(), what));
  return ParseSafetensorsHeader(file.substr(8, n), file.size(), what);
}

}  // namespace ckpt::format

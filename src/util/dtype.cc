#include "ckpt/dtype.h"

#include <array>
#include <string>

#include "util/dtype_text.h"

namespace ckpt {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
};

// Indexed by the enum value.
constexpr std::array<DTypeInfo, 15> kInfo = {{
    {DType::kBool, "BOOL", 1},
    {DType::kU8, "U8", 1},
    {DType::kI8, "I8", 1},
    {DType::kU16, "U16", 2},
    {DType::kI16, "I16", 2},
    {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2},
    {DType::kU32, "U32", 4},
    {DType::kI32, "I32", 4},
    {DType::kF32, "F32", 4},
    {DType::kU64, "U64", 8},
    {DType::kI64, "I64", 8},
    {DType::kF64, "F64", 8},
    {DType::kF8E4M3, "F8_E4M3", 1},
    {DType::kF8E5M2, "F8_E5M2", 1},
}};

constexpr std::array<DType, kInfo.size()> MakeAll() {
  std::array<DType, kInfo.size()> all{};
  for (size_t i = 0; i < kInfo.size(); ++i) all[i] = kInfo[i].dtype;
  return all;
}
constexpr std::array<DType, kInfo.size()> kAll = MakeAll();

}  // namespace

std::span<const DType> AllDTypes() { return kAll; }

size_t DTypeSize(DType dtype) { return kInfo[static_cast<size_t>(dtype)].size; }

std::string_view DTypeName(DType dtype) {
  return kInfo[static_cast<size_t>(dtype)].name;
}

std::optional<DType> ParseDType(std::string_view name) {
  for (const auto& info : kInfo) {
    if (info.name == name) return info.dtype;
  }
  return std::nullopt;
}

std::string DescribeTensorType(DType dtype, std::span<const int64_t> shape) {
  std::string s(DTypeName(dtype));
  s += " [";
  for (size_t i = 0; i < shape.size(); ++i) {
    s += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace ckpt

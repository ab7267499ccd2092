// Element types of tensors, named as safetensors names them ("F32", "BF16").
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace ckpt {

enum class DType : uint8_t {
  kBool,
  kU8,
  kI8,
  kU16,
  kI16,
  kF16,
  kBF16,
  kU32,
  kI32,
  kF32,
  kU64,
  kI64,
  kF64,
  kF8E4M3,
  kF8E5M2,
};

// Every dtype, in enum order (for tests and for iteration).
std::span<const DType> AllDTypes();

// Size of one element in bytes.
size_t DTypeSize(DType dtype);

// The safetensors name: "BOOL", "U8", ..., "F8_E4M3".
std::string_view DTypeName(DType dtype);

// Parses a safetensors name; nullopt for a name ckpt does not know.
std::optional<DType> ParseDType(std::string_view name);

}  // namespace ckpt

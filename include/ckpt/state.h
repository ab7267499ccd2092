// What a job saves: named entries in a stable (insertion) order.
//
// An entry is a tensor (dtype, shape, bytes), a blob (opaque bytes: an RNG
// state, a serialized optimizer) or metadata (a JSON object, for example a
// string-to-string map). A State usually *borrows* the caller's buffers: Save
// streams straight from them and Load writes straight into them, so no second
// copy of the model is ever made. A State can also own buffers (LoadAll fills
// an empty State that way).
//
// Adding is a builder: a bad name, a duplicate or an overflowing shape does not
// throw and is not lost; the first such error sticks in `status()` and every
// Save or Load of the State returns it. A State is not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "ckpt/device.h"
#include "ckpt/dtype.h"
#include "ckpt/status.h"

namespace ckpt {

// A non-owning view of a dense, row-major tensor.
struct TensorView {
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;  // empty: a 0-d (scalar) tensor
  std::byte* data = nullptr;   // may be null when the tensor has no bytes
  bool writable = false;       // Load may write into it
  // Where `data` points. On a CUDA device it is the device address (a
  // CUdeviceptr): Save copies the bytes into page-locked host memory first,
  // Load copies them in from there (State::SetCudaStream says when). Last,
  // so that aggregate initializers of the fields above keep working.
  MemoryLocation location;

  // Number of elements and of bytes, with overflow checked.
  Result<uint64_t> NumElements() const;
  Result<uint64_t> ByteSize() const;
};

// Views over typed memory. The element type picks the dtype (float -> F32,
// int64_t -> I64, bool -> BOOL, ...); use TensorView directly for F16, BF16
// and F8 data kept in uint16_t / uint8_t buffers.
template <typename T>
constexpr DType DTypeOf();
template <>
constexpr DType DTypeOf<bool>() {
  return DType::kBool;
}
template <>
constexpr DType DTypeOf<uint8_t>() {
  return DType::kU8;
}
template <>
constexpr DType DTypeOf<int8_t>() {
  return DType::kI8;
}
template <>
constexpr DType DTypeOf<uint16_t>() {
  return DType::kU16;
}
template <>
constexpr DType DTypeOf<int16_t>() {
  return DType::kI16;
}
template <>
constexpr DType DTypeOf<uint32_t>() {
  return DType::kU32;
}
template <>
constexpr DType DTypeOf<int32_t>() {
  return DType::kI32;
}
template <>
constexpr DType DTypeOf<float>() {
  return DType::kF32;
}
template <>
constexpr DType DTypeOf<uint64_t>() {
  return DType::kU64;
}
template <>
constexpr DType DTypeOf<int64_t>() {
  return DType::kI64;
}
template <>
constexpr DType DTypeOf<double>() {
  return DType::kF64;
}

// A writable view of `data` with the given shape (Save reads it, Load fills
// it).
template <typename T>
TensorView View(std::span<T> data, std::vector<int64_t> shape) {
  using U = std::remove_const_t<T>;
  return TensorView{DTypeOf<U>(), std::move(shape),
                    reinterpret_cast<std::byte*>(const_cast<U*>(data.data())),
                    !std::is_const_v<T>};
}
// A 1-d view of a whole vector.
template <typename T>
TensorView View(std::vector<T>& v) {
  return View(std::span<T>(v), {static_cast<int64_t>(v.size())});
}
template <typename T>
TensorView View(const std::vector<T>& v) {
  return View(std::span<const T>(v), {static_cast<int64_t>(v.size())});
}

enum class EntryKind { kTensor, kBlob, kMetadata };
std::string_view EntryKindName(EntryKind kind);

struct Entry {
  std::string name;
  EntryKind kind = EntryKind::kTensor;
  // kTensor: the tensor (or this rank's piece of it). kBlob: U8 bytes, shape
  // {n}. kMetadata: unused.
  TensorView tensor;
  // kMetadata: a JSON object, as text.
  std::string json;
  // A piece of a sharded tensor: the global shape, and where the box
  // `tensor` holds starts in it. Both empty for a whole tensor.
  std::vector<int64_t> global_shape;
  std::vector<int64_t> offsets;
  // Belongs to this rank alone (a data-loader position, an RNG state): saved
  // per rank and restored to the same rank.
  bool rank_local = false;

  bool is_piece() const { return !global_shape.empty() || !offsets.empty(); }
  // The global shape, whether this is a piece or the whole tensor.
  const std::vector<int64_t>& full_shape() const {
    return is_piece() ? global_shape : tensor.shape;
  }
};

class State {
 public:
  State() = default;
  State(State&&) = default;
  State& operator=(State&&) = default;
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  // Borrows `view`; it must stay valid until Save or Load returns. With many
  // ranks, a whole tensor added on several ranks is replicated: it is
  // written once, by one of them.
  State& AddTensor(std::string name, TensorView view);
  // This rank's piece of a tensor sharded across ranks: `view` holds the box
  // of the global tensor (of `global_shape`) that starts at `offsets`; its
  // shape is the box's lengths. Across the ranks the distinct boxes must tile
  // the global shape. Load fills the box from whatever pieces were saved,
  // with any world size and any split.
  State& AddTensorPiece(std::string name, std::vector<int64_t> global_shape,
                        std::vector<int64_t> offsets, TensorView view);
  // Entries that belong to this rank alone. Every rank may add its own value
  // under the same name; at the same world size Load gives each rank its
  // own value back, at another world size LoadRankLocal hands over all.
  State& AddRankLocalTensor(std::string name, TensorView view);
  State& AddRankLocalBlob(std::string name, std::string bytes);
  // A blob borrowed from the caller.
  State& AddBlob(std::string name, std::span<const std::byte> bytes);
  // A blob the State owns (a copy or a moved string).
  State& AddBlob(std::string name, std::string bytes);
  // Metadata from a string map, or from JSON text (must be a JSON object
  // at most kMaxMetadataDepth levels deep, each array or object a level and
  // a value inside one a level more: the manifest that holds it adds its
  // own levels, and its parser refuses JSON deeper than 64).
  static constexpr size_t kMaxMetadataDepth = 62;
  State& AddMetadata(std::string name,
                     const std::map<std::string, std::string>& values);
  State& AddMetadataJson(std::string name, std::string json_object);

  // Adds a tensor whose bytes the State owns (uninitialized), and returns it.
  Result<TensorView> AllocateTensor(std::string name, DType dtype,
                                    std::vector<int64_t> shape);

  // The first error made while adding; Ok when every Add succeeded.
  const Status& status() const { return status_; }
  // Records `error` (not Ok) as if an Add had failed; an earlier error
  // stays. A rank that cannot build its state still calls Save with it, so
  // that every rank fails with the error instead of waiting for this one.
  void SetError(Status error);

  // The caller's CUDA stream (a CUstream) that orders ckpt's device copies,
  // for a state with tensors on a device. Save, and SaveAsync until it
  // returns, copy from the device after the work queued on it so far; Load
  // copies into the device after it too, and has finished its copies when
  // it returns. Null (the default): ckpt synchronizes each device it
  // touches first (cuCtxSynchronize), which waits for all its streams.
  void SetCudaStream(void* stream) { cuda_stream_ = stream; }
  void* cuda_stream() const { return cuda_stream_; }
  // Whether any tensor lives on a device: the device paths run only then.
  bool HasDeviceTensors() const;

  const std::vector<Entry>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }
  const Entry* Find(std::string_view name) const;
  Entry* Find(std::string_view name);

  // Typed access to what Load filled in.
  Result<std::span<const std::byte>> Blob(std::string_view name) const;
  Result<std::string> BlobString(std::string_view name) const;
  Result<std::map<std::string, std::string>> Metadata(
      std::string_view name) const;

  // Replaces a blob's bytes with `bytes`, owned by the State (used by Load).
  Status SetBlob(std::string_view name, std::string bytes);
  // Replaces a metadata entry's JSON (used by Load).
  Status SetMetadataJson(std::string_view name, std::string json);

 private:
  Entry* Add(std::string name, EntryKind kind);
  std::span<std::byte> Own(size_t bytes);

  std::vector<Entry> entries_;
  std::unordered_map<std::string, size_t> index_;
  std::vector<std::unique_ptr<std::byte[]>> owned_;
  Status status_;
  void* cuda_stream_ = nullptr;
};

}  // namespace ckpt

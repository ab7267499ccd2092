// interop_helper: the C++ side of python/tests/test_interop.py.
//
//   interop_helper save ROOT STEP    saves the known state as STEP
//   interop_helper check ROOT STEP   loads STEP and compares it with the
//                                    known state; prints every difference
//
// The known state is defined twice, here and in test_interop.py; the test
// saves it from each language and checks it in the other.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ckpt/ckpt.h"

namespace {

struct KnownTensor {
  std::string name;
  ckpt::DType dtype;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;
};

// Tensors of every dtype NumPy or PyTorch can hold, with bytes that exercise
// every bit (float bytes may spell NaNs: the comparison is of bytes).
std::vector<KnownTensor> KnownTensors() {
  const std::pair<const char*, ckpt::DType> kTypes[] = {
      {"bool", ckpt::DType::kBool},     {"uint8", ckpt::DType::kU8},
      {"int8", ckpt::DType::kI8},       {"uint16", ckpt::DType::kU16},
      {"int16", ckpt::DType::kI16},     {"uint32", ckpt::DType::kU32},
      {"int32", ckpt::DType::kI32},     {"uint64", ckpt::DType::kU64},
      {"int64", ckpt::DType::kI64},     {"float16", ckpt::DType::kF16},
      {"bfloat16", ckpt::DType::kBF16}, {"float32", ckpt::DType::kF32},
      {"float64", ckpt::DType::kF64},
  };
  std::vector<KnownTensor> out;
  int i = 0;
  for (const auto& [key, dtype] : kTypes) {
    KnownTensor t{std::string("tensors.") + key, dtype, {2, 3}, {}};
    const size_t n = 6 * ckpt::DTypeSize(dtype);
    for (size_t k = 0; k < n; ++k) {
      t.bytes.push_back(static_cast<std::byte>(
          dtype == ckpt::DType::kBool ? k % 2 : (k * 37 + i * 11 + 5) & 0xff));
    }
    out.push_back(std::move(t));
    ++i;
  }
  out.push_back({"empty", ckpt::DType::kF32, {0, 4}, {}});
  const int64_t answer = 42;
  std::vector<std::byte> scalar(sizeof answer);
  std::memcpy(scalar.data(), &answer, sizeof answer);
  out.push_back({"scalar", ckpt::DType::kI64, {}, scalar});
  return out;
}

std::string KnownBlob() {
  std::string blob;
  for (int b = 0; b < 256; ++b) blob.push_back(static_cast<char>(b));
  return blob;
}

// Metadata entries as canonical JSON text (what the manifest holds).
const std::pair<const char*, const char*> kKnownMetadata[] = {
    {"meta.count", R"({"python_type":"int","value":7})"},
    {"meta.name", "{\"python_type\":\"str\",\"value\":\"h\xc3\xa9llo\"}"},
    {"meta.ratio", R"({"python_type":"float","value":0.25})"},
    {"config", R"({"lr":"0.1"})"},
};

int Fail(const ckpt::Status& s) {
  std::fprintf(stderr, "interop_helper: %s\n", s.ToString().c_str());
  return 1;
}

int Save(ckpt::CheckpointManager& mgr, int64_t step) {
  std::vector<KnownTensor> tensors = KnownTensors();
  ckpt::State state;
  for (KnownTensor& t : tensors) {
    state.AddTensor(t.name, {t.dtype, t.shape, t.bytes.data(), false});
  }
  state.AddBlob("blob", KnownBlob());
  for (const auto& [name, json] : kKnownMetadata) {
    state.AddMetadataJson(name, json);
  }
  auto saved = mgr.Save(step, state, {.epoch = 3});
  if (!saved.ok()) return Fail(saved.status());
  std::printf("saved step %lld\n", static_cast<long long>(step));
  return 0;
}

int Check(ckpt::CheckpointManager& mgr, int64_t step) {
  const std::vector<KnownTensor> expected = KnownTensors();
  std::vector<std::vector<std::byte>> buffers;
  for (const KnownTensor& t : expected) {
    buffers.emplace_back(t.bytes.size(), std::byte{0xee});
  }
  ckpt::State state;
  for (size_t i = 0; i < expected.size(); ++i) {
    state.AddTensor(expected[i].name, {expected[i].dtype, expected[i].shape,
                                       buffers[i].data(), true});
  }
  state.AddBlob("blob", std::string());
  for (const auto& [name, json] : kKnownMetadata) {
    state.AddMetadataJson(name, "{}");
  }
  auto loaded = mgr.Load(step, state);
  if (!loaded.ok()) return Fail(loaded.status());
  int problems = 0;
  auto problem = [&](const std::string& what) {
    std::printf("mismatch: %s\n", what.c_str());
    ++problems;
  };
  for (size_t i = 0; i < expected.size(); ++i) {
    if (buffers[i] != expected[i].bytes) problem(expected[i].name);
  }
  if (state.BlobString("blob").value() != KnownBlob()) problem("blob");
  for (const auto& [name, json] : kKnownMetadata) {
    const std::string got = state.Find(name)->json;
    if (got != json) problem(std::string(name) + ": " + got);
  }
  if (loaded->epoch != 3) problem("epoch " + std::to_string(loaded->epoch));
  if (problems == 0) std::printf("ok\n");
  return problems == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: interop_helper save|check ROOT STEP\n");
    return 2;
  }
  const std::string command = argv[1];
  auto mgr = ckpt::CheckpointManager::Open(argv[2]);
  if (!mgr.ok()) return Fail(mgr.status());
  const int64_t step = std::strtoll(argv[3], nullptr, 10);
  if (command == "save") return Save(**mgr, step);
  if (command == "check") return Check(**mgr, step);
  std::fprintf(stderr, "interop_helper: unknown command %s\n", argv[1]);
  return 2;
}

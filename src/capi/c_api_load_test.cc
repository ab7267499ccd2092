// ckpt_manager_load through the C API: a failed load changes nothing of
// the state (tensor bytes, blobs, metadata); CKPT_NEWEST falls back past a
// damaged step; ckpt_manager_load_ex's streaming mode names what it changed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt/c.h"
#include "testing/temp_dir.h"

namespace {

using ::testing::HasSubstr;

struct Err {
  char* text = nullptr;
  ~Err() { ckpt_free(text); }
  std::string str() const { return text ? text : ""; }
};

// A blob "rng", one tensor "w" (3000 floats) and metadata "info";
// for a load, `w` is where the bytes go and the others are placeholders.
ckpt_state_t* MakeState(std::vector<float>& w, const std::string& rng,
                        const std::string& info, int for_load) {
  static const int64_t shape[] = {3000};
  ckpt_entry_t e[3] = {};
  // The blob first, so that the data object ends with the tensor's bytes.
  e[0] = {"rng",
          CKPT_KIND_BLOB,
          CKPT_PLACE_WHOLE,
          nullptr,
          0,
          nullptr,
          const_cast<char*>(rng.data()),
          rng.size()};
  e[1] = {"w",   CKPT_KIND_TENSOR, CKPT_PLACE_WHOLE,        "F32", 1,
          shape, w.data(),         w.size() * sizeof(float)};
  e[2] = {"info",
          CKPT_KIND_METADATA,
          CKPT_PLACE_WHOLE,
          nullptr,
          0,
          nullptr,
          const_cast<char*>(info.data()),
          info.size()};
  ckpt_state_t* s = ckpt_state_create();
  Err err;
  EXPECT_EQ(ckpt_state_add(s, e, 3, for_load, &err.text), CKPT_OK) << err.str();
  return s;
}

// The bytes of entry i of `s`.
std::string EntryBytes(const ckpt_state_t* s, size_t i) {
  ckpt_entry_t e;
  Err err;
  EXPECT_EQ(ckpt_state_get(s, i, &e, &err.text), CKPT_OK) << err.str();
  if (e.data == nullptr) return "";
  return std::string(static_cast<const char*>(e.data), e.nbytes);
}

TEST(CApiLoadTest, AFailedLoadChangesNothing) {
  const ckpt::testing::TempDir tmp("c-api-load");
  const std::filesystem::path& dir = tmp.path();
  const std::string root = (dir / "root").string();
  ckpt_manager_t* m = nullptr;
  Err err;
  ASSERT_EQ(ckpt_manager_open(root.c_str(), nullptr, &m, &err.text), CKPT_OK)
      << err.str();
  for (int step = 1; step <= 2; ++step) {
    std::vector<float> w(3000, static_cast<float>(step));
    // The state borrows the blob's and the metadata's bytes until the save.
    const std::string rng = "rng-" + std::to_string(step);
    const std::string info = "{\"seed\":" + std::to_string(step) + "}";
    ckpt_state_t* s = MakeState(w, rng, info, 0);
    char* result = nullptr;
    ASSERT_EQ(ckpt_manager_save(m, step, s, nullptr, &result, &err.text),
              CKPT_OK)
        << err.str();
    ckpt_free(result);
    ckpt_state_destroy(s);
  }
  // Flip the last byte of step 2's data object (its largest file).
  std::filesystem::path data;
  for (const auto& f : std::filesystem::directory_iterator(
           dir / "root" / "step-000000000002")) {
    if (data.empty() || f.file_size() > std::filesystem::file_size(data)) {
      data = f.path();
    }
  }
  {
    std::fstream io(data, std::ios::in | std::ios::out | std::ios::binary);
    const auto at =
        static_cast<std::streamoff>(std::filesystem::file_size(data)) - 1;
    char c = 0;
    io.seekg(at);
    io.get(c);
    io.seekp(at);
    io.put(static_cast<char>(c ^ 0x5a));
  }

  std::vector<float> w(3000, 99.0f);
  const std::string no_rng, no_info = "{}";  // outlive the state
  ckpt_state_t* s = MakeState(w, no_rng, no_info, 1);
  const std::string rng_before = EntryBytes(s, 0);
  const std::string info_before = EntryBytes(s, 2);
  EXPECT_EQ(ckpt_manager_load(m, 2, s, 0, nullptr, &err.text), CKPT_DATA_LOSS);
  EXPECT_EQ(w, std::vector<float>(3000, 99.0f));
  EXPECT_EQ(EntryBytes(s, 0), rng_before);
  EXPECT_EQ(EntryBytes(s, 2), info_before);

  // Streaming: the same failure, naming what it may have written.
  Err streamed;
  EXPECT_EQ(ckpt_manager_load_ex(m, 2, s, 0, 0, nullptr, &streamed.text),
            CKPT_DATA_LOSS);
  EXPECT_THAT(streamed.str(),
              HasSubstr("entries changed before the failure: \"w\""));
  EXPECT_EQ(EntryBytes(s, 0), rng_before);

  // A resume falls back to step 1, whole.
  char* info = nullptr;
  ASSERT_EQ(ckpt_manager_load(m, CKPT_NEWEST, s, 0, &info, &err.text), CKPT_OK)
      << err.str();
  EXPECT_EQ(nlohmann::json::parse(info)["step"], 1);
  ckpt_free(info);
  EXPECT_EQ(w, std::vector<float>(3000, 1.0f));
  EXPECT_EQ(EntryBytes(s, 0), "rng-1");
  ckpt_state_destroy(s);
  ckpt_manager_close(m);
}

}  // namespace

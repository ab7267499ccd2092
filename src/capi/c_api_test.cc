// The C API as a program binding libckpt.so sees it: nothing but
// include/ckpt/c.h, no C++ type of the library (this test links the shared
// library alone, so that the hidden C++ inside it is what runs).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/c.h"
#include "testing/temp_dir.h"

namespace {

using ::testing::HasSubstr;

// A folder for one test, removed after it unless the test failed.
class Folder {
 public:
  std::string Sub(const char* name) const { return dir_.string() + "/" + name; }

 private:
  ckpt::testing::TempDir dir_{"c-api"};
};

// The message of a failed call, freed.
struct Err {
  char* text = nullptr;
  ~Err() { ckpt_free(text); }
  std::string str() const { return text ? text : ""; }
};

std::string Take(char* text) {
  std::string s = text ? text : "";
  ckpt_free(text);
  return s;
}

ckpt_manager_t* Open(const std::string& root, ckpt_options_t* o = nullptr) {
  Err err;
  ckpt_manager_t* m = nullptr;
  EXPECT_EQ(ckpt_manager_open(root.c_str(), o, &m, &err.text), CKPT_OK)
      << err.str();
  return m;
}

TEST(CApiTest, VersionsAndCodeNames) {
  EXPECT_STREQ(ckpt_version(), "0.1.0");
  EXPECT_EQ(ckpt_abi_version(), CKPT_ABI_VERSION);
  EXPECT_STREQ(ckpt_code_name(CKPT_OK), "OK");
  EXPECT_STREQ(ckpt_code_name(CKPT_DATA_LOSS), "DataLoss");
  EXPECT_STREQ(ckpt_code_name(CKPT_FAILED_PRECONDITION), "FailedPrecondition");
  EXPECT_STREQ(ckpt_code_name(42), "Unknown");
}

TEST(CApiTest, OptionsAreCheckedByNameAndValue) {
  ckpt_options_t* o = ckpt_options_create();
  Err err;
  EXPECT_EQ(ckpt_options_set(o, "keep_last", "3", &err.text), CKPT_OK);
  EXPECT_EQ(ckpt_options_set(o, "keep_lats", "3", &err.text),
            CKPT_INVALID_ARGUMENT);
  EXPECT_THAT(err.str(), HasSubstr("unknown option \"keep_lats\""));
  EXPECT_THAT(err.str(), HasSubstr("keep_last"));  // the known ones
  EXPECT_EQ(ckpt_options_set(o, "keep_last", "-1", &err.text),
            CKPT_INVALID_ARGUMENT);
  EXPECT_THAT(err.str(), HasSubstr("option keep_last: \"-1\""));
  EXPECT_EQ(ckpt_options_set(o, "keep_last", "3x", &err.text),
            CKPT_INVALID_ARGUMENT);
  EXPECT_EQ(ckpt_options_set(o, "create", "maybe", &err.text),
            CKPT_INVALID_ARGUMENT);
  EXPECT_THAT(err.str(), HasSubstr("true or false"));
  EXPECT_EQ(ckpt_options_set(o, "lease_seconds", "nan", &err.text),
            CKPT_INVALID_ARGUMENT);
  EXPECT_EQ(ckpt_options_set(o, "min_referenced_fraction", "1.5", &err.text),
            CKPT_INVALID_ARGUMENT);
  EXPECT_EQ(ckpt_options_set(o, "lease_seconds", "0.5", &err.text), CKPT_OK);
  EXPECT_EQ(ckpt_options_set(o, "compression", "zstd", &err.text), CKPT_OK);
  EXPECT_EQ(ckpt_options_set(o, "compression", "auto", &err.text), CKPT_OK);
  EXPECT_EQ(ckpt_options_set(o, "compression", "gzip", &err.text),
            CKPT_INVALID_ARGUMENT);
  EXPECT_THAT(err.str(), HasSubstr("\"off\", \"zstd\" or \"auto\""));
  EXPECT_EQ(ckpt_options_set(o, "compression_level", "-3", &err.text), CKPT_OK);
  EXPECT_EQ(ckpt_options_set(o, "compression_level", "-9", &err.text),
            CKPT_INVALID_ARGUMENT);
  EXPECT_EQ(ckpt_options_set(nullptr, "x", "y", &err.text),
            CKPT_INVALID_ARGUMENT);
  ckpt_options_destroy(o);
  ckpt_options_destroy(nullptr);
}

TEST(CApiTest, OpeningABadRootSaysWhy) {
  Err err;
  ckpt_manager_t* m = nullptr;
  EXPECT_EQ(ckpt_manager_open("nope://x", nullptr, &m, &err.text),
            CKPT_INVALID_ARGUMENT);
  EXPECT_EQ(m, nullptr);
  EXPECT_THAT(err.str(), HasSubstr("nope://x"));
  Folder dir;
  ckpt_options_t* o = ckpt_options_create();
  ASSERT_EQ(ckpt_options_set(o, "create", "false", &err.text), CKPT_OK);
  EXPECT_EQ(ckpt_manager_open(dir.Sub("absent").c_str(), o, &m, &err.text),
            CKPT_NOT_FOUND);
  ckpt_options_destroy(o);
}

// A mistyped root is an error to read, not an empty job: opening creates
// nothing, the first save creates the root, create_root creates it at open.
TEST(CApiTest, AMissingRootIsNotFoundToReadUntilASaveCreatesIt) {
  Folder dir;
  const std::string root = dir.Sub("tpyo");
  ckpt_manager_t* m = Open(root);
  ASSERT_NE(m, nullptr);
  Err err;
  int64_t latest = 0;
  EXPECT_EQ(ckpt_manager_latest(m, &latest, &err.text), CKPT_NOT_FOUND);
  EXPECT_THAT(err.str(), HasSubstr("root " + root + " does not exist"));
  EXPECT_THAT(err.str(), HasSubstr("create_root"));
  char* json = nullptr;
  EXPECT_EQ(ckpt_manager_list(m, &json, &err.text), CKPT_NOT_FOUND);
  EXPECT_FALSE(std::filesystem::exists(root));

  float x[2] = {1, 2};
  int64_t shape[1] = {2};
  ckpt_entry_t e = {.name = "x",
                    .kind = CKPT_KIND_TENSOR,
                    .dtype = "F32",
                    .ndim = 1,
                    .shape = shape,
                    .data = x,
                    .nbytes = sizeof x};
  ckpt_state_t* s = ckpt_state_create();
  ASSERT_EQ(ckpt_state_add(s, &e, 1, 0, &err.text), CKPT_OK) << err.str();
  ASSERT_EQ(ckpt_manager_save(m, 3, s, nullptr, nullptr, &err.text), CKPT_OK)
      << err.str();
  ckpt_state_destroy(s);
  EXPECT_TRUE(std::filesystem::is_directory(root));
  ASSERT_EQ(ckpt_manager_latest(m, &latest, &err.text), CKPT_OK);
  EXPECT_EQ(latest, 3);
  ckpt_manager_close(m);

  ckpt_options_t* o = ckpt_options_create();
  ASSERT_EQ(ckpt_options_set(o, "create_root", "true", &err.text), CKPT_OK);
  m = Open(dir.Sub("new"), o);
  ckpt_options_destroy(o);
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(std::filesystem::is_directory(dir.Sub("new")));
  ASSERT_EQ(ckpt_manager_latest(m, &latest, &err.text), CKPT_OK) << err.str();
  EXPECT_EQ(latest, -1);
  ckpt_manager_close(m);
}

// A call that fails leaves part of its entries in the state: a save or
// load with that state fails with the same error, whoever ignored the
// return code, and commits nothing.
TEST(CApiTest, AStateAnAddFailedOnSavesAndLoadsNothing) {
  Folder dir;
  ckpt_manager_t* m = Open(dir.Sub("root"));
  float good[4] = {1, 2, 3, 4}, bad[4] = {};
  int64_t shape[1] = {4};
  ckpt_entry_t entries[2] = {{.name = "good",
                              .kind = CKPT_KIND_TENSOR,
                              .dtype = "F32",
                              .ndim = 1,
                              .shape = shape,
                              .data = good,
                              .nbytes = sizeof good},
                             {.name = "bad",
                              .kind = CKPT_KIND_TENSOR,
                              .dtype = "F32",
                              .ndim = 1,
                              .shape = shape,
                              .data = bad,
                              .nbytes = 4}};
  Err err;
  ckpt_state_t* whole = ckpt_state_create();
  ASSERT_EQ(ckpt_state_add(whole, entries, 1, 0, &err.text), CKPT_OK);
  char* result = nullptr;
  ASSERT_EQ(ckpt_manager_save(m, 1, whole, nullptr, &result, &err.text),
            CKPT_OK)
      << err.str();
  ckpt_free(result);
  ckpt_state_destroy(whole);
  ckpt_state_t* s = ckpt_state_create();
  ASSERT_EQ(ckpt_state_add(s, entries, 2, 0, &err.text), CKPT_INVALID_ARGUMENT);
  EXPECT_EQ(ckpt_state_size(s), 1u);  // "good" went in
  Err save_err;
  result = nullptr;
  EXPECT_EQ(ckpt_manager_save(m, 2, s, nullptr, &result, &save_err.text),
            CKPT_INVALID_ARGUMENT);
  EXPECT_THAT(save_err.str(), HasSubstr("entry \"bad\""));
  Err load_err;
  EXPECT_EQ(ckpt_manager_load(m, CKPT_NEWEST, s, 0, &result, &load_err.text),
            CKPT_INVALID_ARGUMENT);
  EXPECT_THAT(load_err.str(), HasSubstr("entry \"bad\""));
  Err latest_err;
  int64_t latest = 0;
  ASSERT_EQ(ckpt_manager_latest(m, &latest, &latest_err.text), CKPT_OK)
      << latest_err.str();
  EXPECT_EQ(latest, 1);  // step 2 was not committed
  ckpt_state_destroy(s);
  ckpt_manager_close(m);
  // And a NULL catalog URL is refused like every NULL, not the default.
  ckpt_catalog_t* c = nullptr;
  Err cat_err;
  EXPECT_EQ(ckpt_catalog_open(nullptr, &c, &cat_err.text),
            CKPT_INVALID_ARGUMENT);
  EXPECT_EQ(c, nullptr);
}

TEST(CApiTest, BadEntriesAreRefusedNamingThem) {
  ckpt_state_t* s = ckpt_state_create();
  float x[4] = {};
  int64_t shape[1] = {4};
  ckpt_entry_t e = {.name = "w",
                    .kind = CKPT_KIND_TENSOR,
                    .dtype = "F32",
                    .ndim = 1,
                    .shape = shape,
                    .data = x,
                    .nbytes = 12};
  Err err;
  EXPECT_EQ(ckpt_state_add(s, &e, 1, 0, &err.text), CKPT_INVALID_ARGUMENT);
  EXPECT_THAT(err.str(), HasSubstr("entry \"w\""));
  EXPECT_THAT(err.str(), HasSubstr("16 bytes, but nbytes is 12"));
  ckpt_state_destroy(s);

  s = ckpt_state_create();
  e.nbytes = sizeof x;
  e.dtype = "F33";
  EXPECT_EQ(ckpt_state_add(s, &e, 1, 0, &err.text), CKPT_INVALID_ARGUMENT);
  EXPECT_THAT(err.str(), HasSubstr("unknown dtype \"F33\""));
  ckpt_state_destroy(s);

  s = ckpt_state_create();
  e.dtype = "F32";
  e.name = "a/../b";
  EXPECT_EQ(ckpt_state_add(s, &e, 1, 0, &err.text), CKPT_INVALID_ARGUMENT);
  ckpt_state_destroy(s);

  s = ckpt_state_create();
  ckpt_entry_t m = {.name = "cfg",
                    .kind = CKPT_KIND_METADATA,
                    .data = const_cast<char*>("[1]"),
                    .nbytes = 3};
  EXPECT_EQ(ckpt_state_add(s, &m, 1, 0, &err.text), CKPT_INVALID_ARGUMENT);
  EXPECT_THAT(err.str(), HasSubstr("cfg"));
  ckpt_entry_t k = {.name = "k", .kind = 7};
  EXPECT_EQ(ckpt_state_add(s, &k, 1, 0, &err.text), CKPT_INVALID_ARGUMENT);
  EXPECT_THAT(err.str(), HasSubstr("unknown kind 7"));
  ckpt_entry_t out;
  EXPECT_EQ(ckpt_state_get(s, 5, &out, &err.text), CKPT_NOT_FOUND);
  ckpt_state_destroy(s);
}

// ckpt_state_add_tensors: the arrays become the same entries as
// ckpt_state_add's, save and load back bit for bit, and what does not add up
// (strings or lengths too few or too many, a bad entry) is refused.
TEST(CApiTest, TensorsAddedFromArraysSaveAndLoadAlike) {
  Folder dir;
  ckpt_manager_t* m = Open(dir.Sub("root"));
  ASSERT_NE(m, nullptr);
  std::vector<float> w = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 7.0f};
  int64_t step_count = 42;
  uint16_t h[2] = {0x3f80, 0xc000};
  const char names[] = "w\0step\0h";  // the last NUL is the literal's
  const char dtypes[] = "F32\0I64\0BF16";
  int ndims[] = {2, 0, 1};
  int64_t shapes[] = {2, 3, 2};
  void* data[] = {w.data(), &step_count, h};
  uint64_t nbytes[] = {24, 8, 4};
  Err err;
  ckpt_state_t* s = ckpt_state_create();
  ASSERT_EQ(
      ckpt_state_add_tensors(s, 3, names, sizeof names, dtypes, sizeof dtypes,
                             ndims, shapes, 3, data, nbytes, 0, &err.text),
      CKPT_OK)
      << err.str();
  ASSERT_EQ(ckpt_state_size(s), 3u);
  ckpt_entry_t e;
  ASSERT_EQ(ckpt_state_get(s, 0, &e, &err.text), CKPT_OK);
  EXPECT_STREQ(e.name, "w");
  EXPECT_STREQ(e.dtype, "F32");
  EXPECT_EQ(e.ndim, 2);
  EXPECT_EQ(e.shape[1], 3);
  EXPECT_EQ(e.data, w.data());
  ASSERT_EQ(ckpt_state_get(s, 1, &e, &err.text), CKPT_OK);
  EXPECT_STREQ(e.name, "step");
  EXPECT_EQ(e.ndim, 0);
  char* result = nullptr;
  ASSERT_EQ(ckpt_manager_save(m, 1, s, nullptr, &result, &err.text), CKPT_OK)
      << err.str();
  ckpt_free(result);
  ckpt_state_destroy(s);

  std::vector<float> w2(6);
  int64_t step2 = 0;
  uint16_t h2[2] = {};
  void* into[] = {w2.data(), &step2, h2};
  s = ckpt_state_create();
  ASSERT_EQ(
      ckpt_state_add_tensors(s, 3, names, sizeof names, dtypes, sizeof dtypes,
                             ndims, shapes, 3, into, nbytes, 1, &err.text),
      CKPT_OK)
      << err.str();
  ASSERT_EQ(ckpt_manager_load(m, 1, s, 1, &result, &err.text), CKPT_OK)
      << err.str();
  ckpt_free(result);
  ckpt_state_destroy(s);
  EXPECT_EQ(std::memcmp(w2.data(), w.data(), 24), 0);
  EXPECT_EQ(step2, 42);
  EXPECT_EQ(std::memcmp(h2, h, 4), 0);

  auto refused = [&](size_t n, size_t names_size, size_t shapes_size,
                     const uint64_t* sizes) {
    ckpt_state_t* bad = ckpt_state_create();
    int code = ckpt_state_add_tensors(bad, n, names, names_size, dtypes,
                                      sizeof dtypes, ndims, shapes, shapes_size,
                                      data, sizes, 0, &err.text);
    ckpt_state_destroy(bad);
    return code == CKPT_INVALID_ARGUMENT ? err.str() : "accepted";
  };
  EXPECT_THAT(refused(3, sizeof names - 1, 3, nbytes),
              HasSubstr("names holds 2 NUL-terminated strings in its 8 bytes, "
                        "not 3"));
  EXPECT_THAT(refused(2, sizeof names, 2, nbytes),
              HasSubstr("names holds 2 bytes after its 2 strings"));
  EXPECT_THAT(refused(3, sizeof names, 2, nbytes),
              HasSubstr("tensor 2 (\"h\") has 1 dimensions, but shapes holds "
                        "0 more lengths"));
  EXPECT_THAT(refused(3, sizeof names, 4, nbytes),
              HasSubstr("the 3 tensors have 3 dimensions, but shapes holds 4"));
  EXPECT_THAT(refused(1, 2, 2, nbytes),
              HasSubstr("dtypes holds 9 bytes after its 1 strings"));
  uint64_t short_w[] = {20, 8, 4};
  EXPECT_THAT(refused(3, sizeof names, 3, short_w),
              HasSubstr("entry \"w\": its shape and dtype make 24 bytes, but "
                        "nbytes is 20"));
  EXPECT_EQ(ckpt_state_add_tensors(nullptr, 0, nullptr, 0, nullptr, 0, nullptr,
                                   nullptr, 0, nullptr, nullptr, 0, &err.text),
            CKPT_INVALID_ARGUMENT);
  ckpt_manager_close(m);
}

TEST(CApiTest, SaveLoadDescribeVerifyDeleteGc) {
  Folder dir;
  ckpt_manager_t* m = Open(dir.Sub("root"));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(ckpt_manager_rank(m), 0);
  EXPECT_EQ(ckpt_manager_world_size(m), 1);
  EXPECT_THAT(ckpt_manager_url(m), HasSubstr("root"));

  std::vector<int32_t> ids = {7, -8, 9};
  uint16_t bf16[2] = {0x3f80, 0xc000};
  int64_t s3[1] = {3}, s2[1] = {2};
  std::string blob("\0bytes\xff", 7);
  std::string local = "rank zero's";
  ckpt_entry_t entries[] = {
      {.name = "ids",
       .kind = CKPT_KIND_TENSOR,
       .dtype = "I32",
       .ndim = 1,
       .shape = s3,
       .data = ids.data(),
       .nbytes = 12},
      {.name = "h",
       .kind = CKPT_KIND_TENSOR,
       .dtype = "BF16",
       .ndim = 1,
       .shape = s2,
       .data = bf16,
       .nbytes = 4},
      {.name = "blob",
       .kind = CKPT_KIND_BLOB,
       .data = blob.data(),
       .nbytes = blob.size()},
      {.name = "pos",
       .kind = CKPT_KIND_BLOB,
       .placement = CKPT_PLACE_RANK_LOCAL,
       .data = local.data(),
       .nbytes = local.size()},
      {.name = "meta",
       .kind = CKPT_KIND_METADATA,
       .data = const_cast<char*>("{\"a\":1}"),
       .nbytes = 7},
  };
  ckpt_state_t* s = ckpt_state_create();
  Err err;
  ASSERT_EQ(ckpt_state_add(s, entries, 5, 0, &err.text), CKPT_OK) << err.str();
  EXPECT_EQ(ckpt_state_size(s), 5u);
  ckpt_save_options_t* so = ckpt_save_options_create();
  ckpt_save_options_set_epoch(so, 4);
  ASSERT_EQ(ckpt_save_options_set_metric(so, "loss", 0.25, &err.text), CKPT_OK);
  ASSERT_EQ(ckpt_save_options_set_metadata(so, "git", "abc", &err.text),
            CKPT_OK);
  // Taken, and left out by the save with a warning (a diverged loss must
  // not cost the checkpoint): the result's metrics below hold only "loss".
  EXPECT_EQ(ckpt_save_options_set_metric(so, "bad", 1.0 / 0.0, &err.text),
            CKPT_OK);
  EXPECT_EQ(ckpt_save_options_set_compression(so, "lz4", 1, &err.text),
            CKPT_INVALID_ARGUMENT);
  ASSERT_EQ(ckpt_save_options_set_compression(so, "zstd", 3, &err.text),
            CKPT_OK);
  char* result = nullptr;
  ASSERT_EQ(ckpt_manager_save(m, 5, s, so, &result, &err.text), CKPT_OK)
      << err.str();
  const std::string r = Take(result);
  EXPECT_THAT(r, HasSubstr("\"skipped\":false"));
  EXPECT_THAT(r, HasSubstr("\"step\":5"));
  EXPECT_THAT(r, HasSubstr("\"epoch\":4"));
  EXPECT_THAT(r, HasSubstr("\"metrics\":{\"loss\":0.25}"));
  EXPECT_THAT(r, HasSubstr("\"metadata\":{\"git\":\"abc\"}"));
  // The same step again: AlreadyExists, with the library's message.
  EXPECT_EQ(ckpt_manager_save(m, 5, s, nullptr, nullptr, &err.text),
            CKPT_ALREADY_EXISTS);
  EXPECT_THAT(err.str(), HasSubstr("step 5"));
  ckpt_save_options_destroy(so);
  ckpt_state_destroy(s);

  // Load into fresh buffers.
  std::vector<int32_t> ids2(3, 0);
  uint16_t bf2[2] = {};
  ckpt_entry_t targets[] = {
      {.name = "ids",
       .kind = CKPT_KIND_TENSOR,
       .dtype = "I32",
       .ndim = 1,
       .shape = s3,
       .data = ids2.data(),
       .nbytes = 12},
      {.name = "h",
       .kind = CKPT_KIND_TENSOR,
       .dtype = "BF16",
       .ndim = 1,
       .shape = s2,
       .data = bf2,
       .nbytes = 4},
      {.name = "blob", .kind = CKPT_KIND_BLOB},
      {.name = "pos",
       .kind = CKPT_KIND_BLOB,
       .placement = CKPT_PLACE_RANK_LOCAL},
      {.name = "meta", .kind = CKPT_KIND_METADATA},
  };
  ckpt_state_t* t = ckpt_state_create();
  ASSERT_EQ(ckpt_state_add(t, targets, 5, 1, &err.text), CKPT_OK) << err.str();
  char* info = nullptr;
  ASSERT_EQ(ckpt_manager_load(m, CKPT_NEWEST, t, 1, &info, &err.text), CKPT_OK)
      << err.str();
  EXPECT_THAT(Take(info), HasSubstr("\"step\":5"));
  EXPECT_EQ(ids2, ids);
  EXPECT_EQ(std::memcmp(bf2, bf16, 4), 0);
  ckpt_entry_t got;
  ASSERT_EQ(ckpt_state_get(t, 2, &got, &err.text), CKPT_OK);
  EXPECT_EQ(got.kind, CKPT_KIND_BLOB);
  EXPECT_EQ(std::string(static_cast<char*>(got.data), got.nbytes), blob);
  ASSERT_EQ(ckpt_state_get(t, 3, &got, &err.text), CKPT_OK);
  EXPECT_EQ(got.placement, CKPT_PLACE_RANK_LOCAL);
  EXPECT_EQ(std::string(static_cast<char*>(got.data), got.nbytes), local);
  ASSERT_EQ(ckpt_state_get(t, 4, &got, &err.text), CKPT_OK);
  EXPECT_EQ(std::string(static_cast<char*>(got.data), got.nbytes), "{\"a\":1}");
  ASSERT_EQ(ckpt_state_get(t, 0, &got, &err.text), CKPT_OK);
  EXPECT_STREQ(got.dtype, "I32");
  EXPECT_EQ(got.ndim, 1);
  EXPECT_EQ(got.shape[0], 3);
  ckpt_state_destroy(t);

  // A load whose buffer has the wrong shape writes nothing.
  int32_t wrong[2] = {11, 11};
  ckpt_entry_t w = {.name = "ids",
                    .kind = CKPT_KIND_TENSOR,
                    .dtype = "I32",
                    .ndim = 1,
                    .shape = s2,
                    .data = wrong,
                    .nbytes = 8};
  t = ckpt_state_create();
  ASSERT_EQ(ckpt_state_add(t, &w, 1, 1, &err.text), CKPT_OK);
  EXPECT_EQ(ckpt_manager_load(m, 5, t, 0, nullptr, &err.text),
            CKPT_INVALID_ARGUMENT);
  EXPECT_THAT(err.str(), HasSubstr("ids"));
  EXPECT_EQ(wrong[0], 11);
  ckpt_state_destroy(t);

  // Every saving rank's rank-local value.
  ckpt_state_t* locals = nullptr;
  ASSERT_EQ(
      ckpt_manager_load_rank_local(m, 5, "pos", &locals, nullptr, &err.text),
      CKPT_OK)
      << err.str();
  ASSERT_EQ(ckpt_state_size(locals), 1u);
  ASSERT_EQ(ckpt_state_get(locals, 0, &got, &err.text), CKPT_OK);
  EXPECT_STREQ(got.name, "0");
  EXPECT_EQ(std::string(static_cast<char*>(got.data), got.nbytes), local);
  ckpt_state_destroy(locals);

  char* json = nullptr;
  ASSERT_EQ(ckpt_manager_describe(m, 5, &json, &err.text), CKPT_OK);
  const std::string d = Take(json);
  EXPECT_THAT(d, HasSubstr("\"name\":\"ids\""));
  EXPECT_THAT(d, HasSubstr("\"dtype\":\"BF16\""));
  EXPECT_THAT(d, HasSubstr("\"json\":\"{\\\"a\\\":1}\""));
  // The same entries as columns: each list in entry order, one item per
  // entry, shapes one after another.
  ASSERT_EQ(ckpt_manager_describe_columns(m, 5, &json, &err.text), CKPT_OK);
  const nlohmann::json c = nlohmann::json::parse(Take(json));
  const nlohmann::json rows = nlohmann::json::parse(d);
  const nlohmann::json& described = rows["entries"];
  ASSERT_EQ(c["names"].size(), described.size());
  EXPECT_EQ(c["info"], rows["info"]);
  size_t dim = 0;
  for (size_t i = 0; i < described.size(); ++i) {
    const nlohmann::json& e = described[i];
    EXPECT_EQ(c["names"][i], e["name"]);
    EXPECT_EQ(c["kinds"][i], e["kind"]);
    EXPECT_EQ(c["dtypes"][i], e["dtype"]);
    EXPECT_EQ(c["owners"][i], e["owner"]);
    EXPECT_EQ(c["bytes"][i], e["bytes"]);
    EXPECT_EQ(c["num_pieces"][i], e["num_pieces"]);
    ASSERT_EQ(c["ndims"][i], e["shape"].size());
    for (const auto& extent : e["shape"]) EXPECT_EQ(c["shapes"][dim++], extent);
    if (e["kind"] == "metadata") {
      EXPECT_EQ(c["metadata"][std::to_string(i)], e["json"]);
    } else {
      EXPECT_FALSE(c["metadata"].contains(std::to_string(i)));
    }
  }
  EXPECT_EQ(dim, c["shapes"].size());
  EXPECT_EQ(ckpt_manager_describe_columns(m, 77, &json, &err.text),
            CKPT_NOT_FOUND);
  ASSERT_EQ(ckpt_manager_verify(m, CKPT_NEWEST, &json, &err.text), CKPT_OK);
  EXPECT_THAT(Take(json), HasSubstr("\"problems\":[]"));

  int64_t latest = -7;
  ASSERT_EQ(ckpt_manager_latest(m, &latest, &err.text), CKPT_OK);
  EXPECT_EQ(latest, 5);
  EXPECT_EQ(ckpt_manager_delete(m, 9, 0, &err.text), CKPT_NOT_FOUND);
  EXPECT_THAT(err.str(), HasSubstr("9"));
  ASSERT_EQ(ckpt_manager_delete(m, 5, 0, &err.text), CKPT_OK) << err.str();
  ASSERT_EQ(ckpt_manager_latest(m, &latest, &err.text), CKPT_OK);
  EXPECT_EQ(latest, -1);
  ASSERT_EQ(ckpt_manager_list(m, &json, &err.text), CKPT_OK);
  EXPECT_EQ(Take(json), "[]");
  ASSERT_EQ(ckpt_manager_gc(m, 1, &json, &err.text), CKPT_OK);
  EXPECT_THAT(Take(json), HasSubstr("\"bytes_freed\""));
  ckpt_manager_close(m);
  ckpt_manager_close(nullptr);
}

TEST(CApiTest, AsyncSaveReturnsOnceCopiedAndWaitsAlike) {
  Folder dir;
  ckpt_manager_t* m = Open(dir.Sub("root"));
  std::vector<double> v(1 << 16, 1.5);
  int64_t shape[1] = {static_cast<int64_t>(v.size())};
  ckpt_entry_t e = {.name = "v",
                    .kind = CKPT_KIND_TENSOR,
                    .dtype = "F64",
                    .ndim = 1,
                    .shape = shape,
                    .data = v.data(),
                    .nbytes = v.size() * sizeof(double)};
  ckpt_state_t* s = ckpt_state_create();
  Err err;
  ASSERT_EQ(ckpt_state_add(s, &e, 1, 0, &err.text), CKPT_OK);
  ckpt_save_t* h = ckpt_manager_save_async(m, 1, s, nullptr);
  ASSERT_NE(h, nullptr);
  // The state was copied: the caller may change and free its memory.
  ckpt_state_destroy(s);
  std::fill(v.begin(), v.end(), -1.0);
  EXPECT_EQ(ckpt_save_step(h), 1);
  char* r1 = nullptr;
  char* r2 = nullptr;
  ASSERT_EQ(ckpt_save_wait(h, &r1, &err.text), CKPT_OK) << err.str();
  EXPECT_TRUE(ckpt_save_done(h));
  ASSERT_EQ(ckpt_save_wait(h, &r2, &err.text), CKPT_OK);
  EXPECT_EQ(Take(r1), Take(r2));
  ckpt_save_destroy(h);

  std::vector<double> back(v.size());
  e.data = back.data();
  s = ckpt_state_create();
  ASSERT_EQ(ckpt_state_add(s, &e, 1, 1, &err.text), CKPT_OK);
  ASSERT_EQ(ckpt_manager_load(m, 1, s, 0, nullptr, &err.text), CKPT_OK);
  EXPECT_EQ(back[0], 1.5);
  EXPECT_EQ(back.back(), 1.5);
  ckpt_state_destroy(s);
  ckpt_manager_close(m);
}

TEST(CApiTest, IncrementalSaveWithDirtyRows) {
  Folder dir;
  // Chunks of 64 KiB, so that one changed row leaves 15 of 16 unchanged.
  ckpt_options_t* o = ckpt_options_create();
  char* e0 = nullptr;
  ASSERT_EQ(ckpt_options_set(o, "chunk_size", "65536", &e0), CKPT_OK);
  ckpt_manager_t* m = Open(dir.Sub("root"), o);
  ckpt_options_destroy(o);
  std::vector<float> table(4096 * 64, 0.5f);
  int64_t shape[2] = {4096, 64};
  ckpt_entry_t e = {.name = "emb",
                    .kind = CKPT_KIND_TENSOR,
                    .dtype = "F32",
                    .ndim = 2,
                    .shape = shape,
                    .data = table.data(),
                    .nbytes = table.size() * 4};
  Err err;
  for (int64_t step = 1; step <= 2; ++step) {
    if (step == 2) table[0] = 9.0f;
    ckpt_state_t* s = ckpt_state_create();
    ASSERT_EQ(ckpt_state_add(s, &e, 1, 0, &err.text), CKPT_OK);
    ckpt_save_options_t* so = ckpt_save_options_create();
    ckpt_save_options_set_incremental(so, 1);
    const int64_t rows[2] = {0, 1};
    ASSERT_EQ(ckpt_save_options_set_dirty_rows(so, "emb", rows, 1, &err.text),
              CKPT_OK);
    char* r = nullptr;
    ASSERT_EQ(ckpt_manager_save(m, step, s, so, &r, &err.text), CKPT_OK)
        << err.str();
    const std::string result = Take(r);
    if (step == 2) {
      EXPECT_THAT(result, HasSubstr("\"parent\":1"));
      EXPECT_THAT(result, HasSubstr("\"depends_on\":[1]"));
    }
    ckpt_save_options_destroy(so);
    ckpt_state_destroy(s);
  }
  // A parent with a dependant is refused, unless its dependants are
  // rewritten first.
  EXPECT_EQ(ckpt_manager_delete(m, 1, 0, &err.text), CKPT_FAILED_PRECONDITION);
  EXPECT_THAT(err.str(), HasSubstr("2"));
  // The report says which dependant is rewritten with how many bytes, and
  // what goes; a dry run says the same and changes nothing.
  char* json = nullptr;
  ASSERT_EQ(ckpt_manager_delete_report(m, 1, 1, 1, &json, &err.text), CKPT_OK)
      << err.str();
  const nlohmann::json planned = nlohmann::json::parse(Take(json));
  EXPECT_EQ(planned["dry_run"], true);
  ASSERT_EQ(planned["rewritten"].size(), 1u) << planned.dump();
  EXPECT_EQ(planned["rewritten"][0]["step"], 2);
  // Every chunk of step 1 but the one row 0 lies in.
  EXPECT_GT(planned["rewritten"][0]["bytes_copied"].get<uint64_t>(), 0u);
  EXPECT_LT(planned["rewritten"][0]["bytes_copied"].get<uint64_t>(),
            table.size() * 4);
  ASSERT_FALSE(planned["removed"].empty());
  EXPECT_EQ(planned["removed"][0]["key"], "step-000000000001/MANIFEST.json");
  ASSERT_EQ(ckpt_manager_delete(m, 1, 0, &err.text), CKPT_FAILED_PRECONDITION)
      << "the dry run rewrote nothing";
  ASSERT_EQ(ckpt_manager_delete_report(m, 1, 1, 0, &json, &err.text), CKPT_OK)
      << err.str();
  const nlohmann::json done = nlohmann::json::parse(Take(json));
  EXPECT_EQ(done["dry_run"], false);
  EXPECT_EQ(done["manifest_deleted"], true);
  EXPECT_EQ(done["rewritten"], planned["rewritten"]);
  EXPECT_EQ(done["removed"], planned["removed"]);
  EXPECT_EQ(done["kept"], nlohmann::json::array());
  int64_t latest = -1;
  ASSERT_EQ(ckpt_manager_latest(m, &latest, &err.text), CKPT_OK);
  EXPECT_EQ(latest, 2);
  json = nullptr;
  EXPECT_EQ(ckpt_manager_delete_report(m, 1, 0, 0, &json, &err.text),
            CKPT_NOT_FOUND);
  EXPECT_EQ(json, nullptr) << "an error returns no report";
  std::vector<float> back(table.size());
  e.data = back.data();
  ckpt_state_t* s = ckpt_state_create();
  ASSERT_EQ(ckpt_state_add(s, &e, 1, 1, &err.text), CKPT_OK);
  ASSERT_EQ(ckpt_manager_load(m, 2, s, 0, nullptr, &err.text), CKPT_OK);
  EXPECT_EQ(back, table);
  ckpt_state_destroy(s);
  ckpt_manager_close(m);
}

// A communicator of `size` ranks as threads of this process, written against
// the C table alone (as one in another language would be).
struct Group {
  explicit Group(int n) : size(n), parts(n) {}
  int size;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> parts;
  int arrived = 0;
  int64_t generation = 0;

  std::vector<std::string> Gather(int rank, std::string mine) {
    std::unique_lock<std::mutex> lock(mu);
    // Wait until the previous round's parts were taken by everyone.
    const int64_t gen = generation;
    parts[rank] = std::move(mine);
    if (++arrived == size) {
      result = parts;
      arrived = 0;
      ++generation;
      cv.notify_all();
    } else {
      cv.wait(lock, [&] { return generation != gen; });
    }
    return result;
  }
  std::vector<std::string> result;

  // Point to point: one queue per (from, to), as MPI_Sendrecv behaves.
  std::string SendRecv(int rank, std::string data, int dest, int source) {
    std::unique_lock<std::mutex> lock(mu);
    if (dest >= 0) {
      mail[{rank, dest}].push_back(std::move(data));
      cv.notify_all();
    }
    if (source < 0) return "";
    auto& box = mail[{source, rank}];
    cv.wait(lock, [&] { return !box.empty(); });
    std::string got = std::move(box.front());
    box.pop_front();
    return got;
  }
  std::map<std::pair<int, int>, std::deque<std::string>> mail;
};

struct RankCtx {
  Group* group;
  int rank;
};

RankCtx* Ctx(void* p) { return static_cast<RankCtx*>(p); }

const ckpt_communicator_ops_t kGroupOps = {
    .rank = [](void* c) -> int { return Ctx(c)->rank; },
    .size = [](void* c) -> int { return Ctx(c)->group->size; },
    .host_name = [](void* c, char* buf, size_t len) -> int {
      std::snprintf(buf, len, "host-%d", Ctx(c)->rank);
      return CKPT_OK;
    },
    .barrier = [](void* c, char*, size_t) -> int {
      Ctx(c)->group->Gather(Ctx(c)->rank, "");
      return CKPT_OK;
    },
    .all_gather = [](void* c, const void* mine, size_t size,
                     ckpt_bytes_list_t* out, char*, size_t) -> int {
      auto all = Ctx(c)->group->Gather(
          Ctx(c)->rank, std::string(static_cast<const char*>(mine), size));
      for (const auto& p : all) ckpt_bytes_list_push(out, p.data(), p.size());
      return CKPT_OK;
    },
    .broadcast = [](void* c, const void* data, size_t size, int root,
                    ckpt_bytes_list_t* out, char*, size_t) -> int {
      auto all = Ctx(c)->group->Gather(
          Ctx(c)->rank, std::string(static_cast<const char*>(data), size));
      ckpt_bytes_list_push(out, all[root].data(), all[root].size());
      return CKPT_OK;
    },
    .abort = nullptr,
    .destroy = [](void* c) { delete Ctx(c); },
};

// Rank's box of the 2-d F32 tensor "w": `row` at `offsets` of `global`.
ckpt_entry_t PieceOfW(std::vector<float>& row, int64_t* box, int64_t* global,
                      int64_t* offsets) {
  return {.name = "w",
          .kind = CKPT_KIND_TENSOR,
          .placement = CKPT_PLACE_PIECE,
          .dtype = "F32",
          .ndim = 2,
          .shape = box,
          .data = row.data(),
          .nbytes = row.size() * sizeof(float),
          .global_shape = global,
          .offsets = offsets};
}

// Saves `s` as step 3 of `root` as `rank` of `group`: "" or the error, as
// "<code>: <message>".
std::string SaveOnRank(Group& group, const std::string& root, int rank,
                       ckpt_state_t* s) {
  ckpt_communicator_t* comm =
      ckpt_communicator_create(&kGroupOps, new RankCtx{&group, rank});
  ckpt_options_t* o = ckpt_options_create();
  ckpt_options_set_communicator(o, comm);
  // The manager keeps the communicator alive.
  ckpt_communicator_destroy(comm);
  ckpt_manager_t* m = nullptr;
  Err err;
  const int opened = ckpt_manager_open(root.c_str(), o, &m, &err.text);
  ckpt_options_destroy(o);
  if (opened != CKPT_OK) return err.str();
  char* r = nullptr;
  std::string outcome;
  if (int code = ckpt_manager_save(m, 3, s, nullptr, &r, &err.text);
      code != CKPT_OK) {
    outcome = std::string(ckpt_code_name(code)) + ": " + err.str();
  } else if (Take(r).find("\"world_size\":2") == std::string::npos) {
    outcome = "world size not 2";
  }
  ckpt_manager_close(m);
  return outcome;
}

TEST(CApiTest, ACommunicatorFromAFunctionTableShardsASave) {
  Folder dir;
  const std::string root = dir.Sub("root");
  Group group(2);
  std::vector<std::vector<float>> halves = {{1, 2, 3, 4}, {5, 6, 7, 8}};
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      int64_t box[2] = {1, 4}, global[2] = {2, 4}, offsets[2] = {rank, 0};
      ckpt_entry_t e = PieceOfW(halves[rank], box, global, offsets);
      ckpt_state_t* s = ckpt_state_create();
      Err err;
      errors[rank] = ckpt_state_add(s, &e, 1, 0, &err.text) == CKPT_OK
                         ? SaveOnRank(group, root, rank, s)
                         : err.str();
      ckpt_state_destroy(s);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");

  // One process loads the whole tensor.
  ckpt_manager_t* m = Open(root);
  std::vector<float> whole(8);
  int64_t shape[2] = {2, 4};
  ckpt_entry_t e = {.name = "w",
                    .kind = CKPT_KIND_TENSOR,
                    .dtype = "F32",
                    .ndim = 2,
                    .shape = shape,
                    .data = whole.data(),
                    .nbytes = 32};
  ckpt_state_t* s = ckpt_state_create();
  Err err;
  ASSERT_EQ(ckpt_state_add(s, &e, 1, 1, &err.text), CKPT_OK);
  char* info = nullptr;
  ASSERT_EQ(ckpt_manager_load(m, 3, s, 0, &info, &err.text), CKPT_OK)
      << err.str();
  EXPECT_THAT(Take(info), HasSubstr("\"hosts\":[\"host-0\",\"host-1\"]"));
  EXPECT_EQ(whole, (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
  ckpt_state_destroy(s);
  ckpt_manager_close(m);
}

// A binding that finds bad input on one rank marks that rank's state
// failed and still saves: every rank gets the error, none waits forever.
TEST(CApiTest, AStateMarkedFailedOnOneRankFailsTheSaveOnEveryRank) {
  Folder dir;
  const std::string root = dir.Sub("root");
  Group group(2);
  std::vector<std::string> outcomes(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      std::vector<float> x = {1, 2};
      int64_t shape[1] = {2};
      ckpt_entry_t e = {.name = "x",
                        .kind = CKPT_KIND_TENSOR,
                        .dtype = "F32",
                        .ndim = 1,
                        .shape = shape,
                        .data = x.data(),
                        .nbytes = 8};
      ckpt_state_t* s = ckpt_state_create();
      Err err;
      if (ckpt_state_add(s, &e, 1, 0, &err.text) != CKPT_OK) {
        outcomes[rank] = "add: " + err.str();
      } else if (rank == 1 && ckpt_state_set_error(s, CKPT_INVALID_ARGUMENT,
                                                   "entry \"y\": not a tensor",
                                                   &err.text) != CKPT_OK) {
        outcomes[rank] = "set_error: " + err.str();
      } else {
        outcomes[rank] = SaveOnRank(group, root, rank, s);
      }
      ckpt_state_destroy(s);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_THAT(outcomes[0], testing::StartsWith("InvalidArgument: save step 3"));
  EXPECT_THAT(outcomes[0],
              testing::EndsWith(": rank 1: entry \"y\": not a tensor"));
  EXPECT_EQ(outcomes[1], outcomes[0]);
  // create_root: the failed save may have left no root to read.
  Err err;
  ckpt_options_t* o = ckpt_options_create();
  ASSERT_EQ(ckpt_options_set(o, "create_root", "true", &err.text), CKPT_OK);
  ckpt_manager_t* m = Open(root, o);
  ckpt_options_destroy(o);
  int64_t latest = 0;
  ASSERT_EQ(ckpt_manager_latest(m, &latest, &err.text), CKPT_OK);
  EXPECT_EQ(latest, -1) << "step " << latest << " was committed";
  ckpt_manager_close(m);

  ckpt_state_t* s = ckpt_state_create();
  EXPECT_EQ(ckpt_state_set_error(s, CKPT_OK, "fine", &err.text),
            CKPT_INVALID_ARGUMENT);
  EXPECT_THAT(err.str(), HasSubstr("0 is not an error code"));
  EXPECT_EQ(ckpt_state_set_error(s, CKPT_DATA_LOSS, "first", &err.text),
            CKPT_OK);
  EXPECT_EQ(ckpt_state_set_error(s, CKPT_ABORTED, "second", &err.text),
            CKPT_OK);
  ckpt_manager_t* single = Open(dir.Sub("single"));
  char* r = nullptr;
  EXPECT_EQ(ckpt_manager_save(single, 1, s, nullptr, &r, &err.text),
            CKPT_DATA_LOSS);
  EXPECT_THAT(err.str(), testing::EndsWith(": first"));
  ckpt_manager_close(single);
  ckpt_state_destroy(s);
}

int GroupSendRecv(void* c, const void* data, size_t size, int dest, int source,
                  ckpt_bytes_list_t* out, char*, size_t) {
  std::string got = Ctx(c)->group->SendRecv(
      Ctx(c)->rank, std::string(static_cast<const char*>(data), size), dest,
      source);
  if (source >= 0) ckpt_bytes_list_push(out, got.data(), got.size());
  return CKPT_OK;
}

// Two ranks on two nodes save to their local tiers with one replica each;
// node 1 loses its memory, and its rank restores from node 0's replica.
TEST(CApiTest, TiersReplicateAndRestoreALostNodeFromItsPeer) {
  Folder dir;
  const std::string durable = dir.Sub("durable");
  const std::string local = "file://" + dir.Sub("node{node}");
  Group group(2);
  auto run = [&](int rank, auto&& body) {
    ckpt_communicator_t* comm =
        ckpt_communicator_create(&kGroupOps, new RankCtx{&group, rank});
    Err err;
    EXPECT_EQ(ckpt_communicator_set_send_recv(comm, GroupSendRecv, &err.text),
              CKPT_OK);
    ckpt_options_t* o = ckpt_options_create();
    ckpt_options_set_communicator(o, comm);
    ckpt_communicator_destroy(comm);
    ckpt_manager_t* m = Open(durable, o);
    ckpt_options_destroy(o);
    const int nodes[2] = {0, 1};
    ckpt_tiered_t* t = nullptr;
    ASSERT_EQ(ckpt_tiered_open(m, local.c_str(), 1, 0, 0, 1, 0, nodes, 2, &t,
                               &err.text),
              CKPT_OK)
        << err.str();
    EXPECT_EQ(ckpt_tiered_node(t), rank);
    body(t);
    ckpt_tiered_close(t);
    ckpt_manager_close(m);
  };
  auto state = [](int for_load, std::vector<float>& row, int64_t* box,
                  int64_t* global, int64_t* offsets) {
    ckpt_entry_t e = PieceOfW(row, box, global, offsets);
    ckpt_state_t* s = ckpt_state_create();
    Err err;
    EXPECT_EQ(ckpt_state_add(s, &e, 1, for_load, &err.text), CKPT_OK)
        << err.str();
    return s;
  };
  std::vector<std::string> saved(2), restored(2);
  std::vector<std::vector<float>> rows(2);
  auto ranks = [&](auto&& each) {
    std::vector<std::thread> threads;
    for (int rank = 0; rank < 2; ++rank) {
      threads.emplace_back(
          [&, rank] { run(rank, [&](ckpt_tiered_t* t) { each(rank, t); }); });
    }
    for (auto& th : threads) th.join();
  };
  ranks([&](int rank, ckpt_tiered_t* t) {
    std::vector<float> row = {1.0f + rank, 2, 3};
    int64_t box[2] = {1, 3}, global[2] = {2, 3}, offsets[2] = {rank, 0};
    ckpt_state_t* s = state(0, row, box, global, offsets);
    Err err;
    char* r = nullptr;
    EXPECT_EQ(ckpt_tiered_save(t, 4, s, nullptr, 7, &r, &err.text),
              CKPT_INVALID_ARGUMENT);
    ckpt_tier_save_t* h =
        ckpt_tiered_save_async(t, 5, s, nullptr, CKPT_TIER_BY_INTERVAL);
    ckpt_state_destroy(s);  // copied by the time it returns
    if (ckpt_tier_save_wait(h, &r, &err.text) == CKPT_OK) {
      saved[rank] = Take(r);
    } else {
      saved[rank] = err.str();
    }
    EXPECT_TRUE(ckpt_tier_save_done(h));
    ckpt_tier_save_destroy(h);
  });
  for (const auto& r : saved) {
    EXPECT_THAT(r, HasSubstr("\"local\":true"));
    EXPECT_THAT(r, HasSubstr("\"durable\":false"));
  }
  // Node 0 holds rank 0's share and rank 1's replica.
  char* listed = nullptr;
  Err err;
  ASSERT_EQ(ckpt_local_tier_list(("file://" + dir.Sub("node0")).c_str(),
                                 &listed, &err.text),
            CKPT_OK)
      << err.str();
  auto shares = nlohmann::json::parse(Take(listed));
  ASSERT_EQ(shares.size(), 2u) << shares.dump();
  EXPECT_EQ(shares[1]["rank"], 1);
  EXPECT_EQ(shares[1]["marked"], true);

  std::filesystem::remove_all(dir.Sub("node1"));
  ranks([&](int rank, ckpt_tiered_t* t) {
    rows[rank].assign(3, 0.0f);
    int64_t box[2] = {1, 3}, global[2] = {2, 3}, offsets[2] = {rank, 0};
    ckpt_state_t* s = state(1, rows[rank], box, global, offsets);
    Err err;
    char* r = nullptr;
    restored[rank] = ckpt_tiered_restore(t, s, 0, &r, &err.text) == CKPT_OK
                         ? Take(r)
                         : err.str();
    ckpt_state_destroy(s);
  });
  for (int rank = 0; rank < 2; ++rank) {
    auto r = nlohmann::json::parse(restored[rank]);
    EXPECT_EQ(r["tier"], "local") << restored[rank];
    EXPECT_EQ(r["step"], 5);
    EXPECT_EQ(r["ranks_fetched"], 1);
    EXPECT_EQ(rows[rank], (std::vector<float>{1.0f + rank, 2, 3}));
  }
}

TEST(CApiTest, ATableWithoutItsFunctionsIsRefused) {
  ckpt_communicator_ops_t ops = {};
  EXPECT_EQ(ckpt_communicator_create(&ops, nullptr), nullptr);
  EXPECT_EQ(ckpt_communicator_create(nullptr, nullptr), nullptr);
}

TEST(CApiTest, CatalogRecordsAndAnswers) {
  Folder dir;
  const std::string url = dir.Sub("catalog.sqlite");
  Err err;
  ckpt_catalog_t* c = nullptr;
  ASSERT_EQ(ckpt_catalog_open(url.c_str(), &c, &err.text), CKPT_OK)
      << err.str();
  EXPECT_THAT(ckpt_catalog_url(c), HasSubstr("catalog.sqlite"));
  ckpt_options_t* o = ckpt_options_create();
  ckpt_options_set_catalog(o, c);
  ASSERT_EQ(ckpt_options_set(o, "job_id", "job-c", &err.text), CKPT_OK);
  ckpt_manager_t* m = Open(dir.Sub("root"), o);
  ckpt_options_destroy(o);
  int64_t one[1] = {1};
  uint8_t byte = 1;
  ckpt_entry_t e = {.name = "b",
                    .kind = CKPT_KIND_TENSOR,
                    .dtype = "U8",
                    .ndim = 1,
                    .shape = one,
                    .data = &byte,
                    .nbytes = 1};
  ckpt_state_t* s = ckpt_state_create();
  ASSERT_EQ(ckpt_state_add(s, &e, 1, 0, &err.text), CKPT_OK);
  for (int64_t step : {10, 20}) {
    ckpt_save_options_t* so = ckpt_save_options_create();
    ASSERT_EQ(ckpt_save_options_set_metric(so, "acc", step == 10 ? 0.9 : 0.5,
                                           &err.text),
              CKPT_OK);
    ASSERT_EQ(ckpt_manager_save(m, step, s, so, nullptr, &err.text), CKPT_OK)
        << err.str();
    ckpt_save_options_destroy(so);
  }
  ckpt_state_destroy(s);
  ckpt_manager_close(m);

  char* json = nullptr;
  ASSERT_EQ(ckpt_catalog_latest(c, "job-c", &json, &err.text), CKPT_OK);
  EXPECT_THAT(Take(json), HasSubstr("\"step\":20"));
  ASSERT_EQ(ckpt_catalog_best(c, "job-c", "acc", 1, &json, &err.text), CKPT_OK);
  EXPECT_THAT(Take(json), HasSubstr("\"step\":10"));
  // Every row with the metric, best first: the next where the best is gone.
  for (const int higher : {1, 0}) {
    ASSERT_EQ(ckpt_catalog_ranked(c, "job-c", "acc", higher, &json, &err.text),
              CKPT_OK);
    const nlohmann::json ranked = nlohmann::json::parse(Take(json));
    ASSERT_EQ(ranked.size(), 2u) << ranked.dump();
    EXPECT_EQ(ranked[0]["step"], higher ? 10 : 20);
    EXPECT_EQ(ranked[1]["step"], higher ? 20 : 10);
  }
  ASSERT_EQ(ckpt_catalog_ranked(c, "job-c", "loss", 0, &json, &err.text),
            CKPT_OK);
  EXPECT_EQ(Take(json), "[]");
  ASSERT_EQ(ckpt_catalog_latest(c, "no-such-job", &json, &err.text), CKPT_OK);
  EXPECT_EQ(Take(json), "null");
  ASSERT_EQ(ckpt_catalog_list(c, "job-c", nullptr, 0, 1, &json, &err.text),
            CKPT_OK);
  const std::string list = Take(json);
  EXPECT_THAT(list, HasSubstr("\"step\":20"));
  EXPECT_THAT(list, ::testing::Not(HasSubstr("\"step\":10")));
  ASSERT_EQ(ckpt_catalog_jobs(c, &json, &err.text), CKPT_OK);
  EXPECT_THAT(Take(json), HasSubstr("\"latest_step\":20"));

  // A row checked against storage: step 20 is there as committed; gone,
  // it is NotFound; another commit's checksum is FailedPrecondition.
  ASSERT_EQ(ckpt_catalog_latest(c, "job-c", &json, &err.text), CKPT_OK);
  const nlohmann::json row = nlohmann::json::parse(Take(json));
  const std::string root = row["root"], sum = row["manifest_checksum"];
  EXPECT_EQ(
      ckpt_catalog_check("job-c", root.c_str(), 20, sum.c_str(), &err.text),
      CKPT_OK)
      << err.str();
  EXPECT_EQ(ckpt_catalog_check("job-c", root.c_str(), 20, "0", &err.text),
            CKPT_FAILED_PRECONDITION);
  EXPECT_THAT(err.str(), HasSubstr("ckpt catalog sync"));
  std::filesystem::remove_all(dir.Sub("root/step-000000000020"));
  EXPECT_EQ(
      ckpt_catalog_check("job-c", root.c_str(), 20, sum.c_str(), &err.text),
      CKPT_NOT_FOUND);
  ckpt_catalog_close(c);

  // Opened without create, a file that is not there is NotFound naming
  // it, and nothing is made.
  const std::string absent = dir.Sub("absent/catalog.sqlite");
  c = nullptr;
  EXPECT_EQ(ckpt_catalog_open_ex(absent.c_str(), 0, &c, &err.text),
            CKPT_NOT_FOUND);
  EXPECT_THAT(err.str(), HasSubstr("absent/catalog.sqlite"));
  EXPECT_EQ(c, nullptr);
  EXPECT_FALSE(std::filesystem::exists(dir.Sub("absent")));
  ASSERT_EQ(ckpt_catalog_open_ex(url.c_str(), 0, &c, &err.text), CKPT_OK);
  ckpt_catalog_close(c);
}

}  // namespace

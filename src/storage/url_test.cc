#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "ckpt/storage.h"
#include "storage/memory/memory_storage.h"
#include "util/names.h"

namespace ckpt {
namespace {

bool Contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(ParseUrlTest, FileUrl) {
  Result<ParsedUrl> url = ParseUrl("file:///data/run42");
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  EXPECT_EQ(url->url, "file:///data/run42");
  EXPECT_EQ(url->scheme, "file");
  EXPECT_EQ(url->host, "");
  EXPECT_EQ(url->path, "/data/run42");
}

TEST(ParseUrlTest, BareAbsolutePathIsAFileUrl) {
  Result<ParsedUrl> url = ParseUrl("/data/./x/../run42/");
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  EXPECT_EQ(url->url, "/data/./x/../run42/");
  EXPECT_EQ(url->scheme, "file");
  EXPECT_EQ(url->host, "");
  EXPECT_EQ(url->path, "/data/run42");
}

TEST(ParseUrlTest, RelativePathIsMadeAbsolute) {
  Result<ParsedUrl> url = ParseUrl("runs/42");
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  EXPECT_EQ(url->scheme, "file");
  EXPECT_EQ(url->path, (std::filesystem::current_path() / "runs/42")
                           .lexically_normal()
                           .string());
}

TEST(ParseUrlTest, MemoryUrl) {
  Result<ParsedUrl> url = ParseUrl("mem://test");
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  EXPECT_EQ(url->scheme, "mem");
  EXPECT_EQ(url->host, "test");
  EXPECT_EQ(url->path, "");
}

TEST(ParseUrlTest, SchemeIsLowerCasedAndHostKept) {
  Result<ParsedUrl> url = ParseUrl("S3://Bucket/run42/x");
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  EXPECT_EQ(url->scheme, "s3");
  EXPECT_EQ(url->host, "Bucket");
  EXPECT_EQ(url->path, "/run42/x");
}

TEST(ParseUrlTest, MalformedUrlsAreInvalidAndQuoted) {
  for (const std::string& url : std::vector<std::string>{
           "", "://x", "file:///a\nb", std::string("file:///a\0b", 10),
           "file:///a\x7f", "file:///a?x=1", "s3://bucket/key#frag",
           "fi le://x", "f/s://x"}) {
    SCOPED_TRACE(Quote(url));
    Result<ParsedUrl> parsed = ParseUrl(url);
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_TRUE(Contains(parsed.status().message(), Quote(url)))
        << parsed.status().ToString();
    EXPECT_EQ(OpenStorage(url).status().code(), ErrorCode::kInvalidArgument);
  }
}

TEST(StorageRegistryTest, UnknownSchemeIsInvalidAndNamesTheUrl) {
  Result<std::unique_ptr<Storage>> storage = OpenStorage("foo://x");
  ASSERT_FALSE(storage.ok());
  EXPECT_EQ(storage.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(Contains(storage.status().message(), "foo://x"))
      << storage.status().ToString();
  EXPECT_TRUE(Contains(storage.status().message(), "unknown scheme"))
      << storage.status().ToString();
}

TEST(StorageRegistryTest, DefaultHasTheBuiltinBackends) {
  std::vector<std::string> schemes = StorageRegistry::Default().Schemes();
  EXPECT_NE(std::find(schemes.begin(), schemes.end(), "file"), schemes.end());
  EXPECT_NE(std::find(schemes.begin(), schemes.end(), "mem"), schemes.end());

  StorageRegistry fresh;
  EXPECT_TRUE(fresh.Schemes().empty());
  RegisterBuiltinBackends(fresh);
  EXPECT_EQ(fresh.Schemes(), schemes);
}

TEST(StorageRegistryTest, CustomSchemeCanBeRegisteredAndReplaced) {
  StorageRegistry registry;
  ParsedUrl seen;
  registry.Register(
      "custom", [&](const ParsedUrl& url, const StorageOptions& options) {
        seen = url;
        return Result<std::unique_ptr<Storage>>(NewMemoryStorage(url.url));
      });
  Result<std::unique_ptr<Storage>> storage =
      registry.Open("CUSTOM://host/some/path");
  ASSERT_TRUE(storage.ok()) << storage.status().ToString();
  EXPECT_EQ((*storage)->url(), "CUSTOM://host/some/path");
  EXPECT_EQ(seen.scheme, "custom");
  EXPECT_EQ(seen.host, "host");
  EXPECT_EQ(seen.path, "/some/path");
  ASSERT_TRUE((*storage)->PutString("k", "v").ok());

  registry.Register(
      "custom", [](const ParsedUrl& url, const StorageOptions& options) {
        return Result<std::unique_ptr<Storage>>(
            UnavailableError("open " + url.url + ": down for maintenance"));
      });
  EXPECT_EQ(registry.Open("custom://x").status().code(),
            ErrorCode::kUnavailable);
  // A private registry does not leak into the default one.
  EXPECT_EQ(OpenStorage("custom://x").status().code(),
            ErrorCode::kInvalidArgument);
}

TEST(StorageRegistryTest, OptionsReachTheBackend) {
  StorageRegistry registry;
  bool create = true;
  registry.Register(
      "opt", [&](const ParsedUrl& url, const StorageOptions& options) {
        create = options.create;
        return Result<std::unique_ptr<Storage>>(NewMemoryStorage(url.url));
      });
  StorageOptions options;
  options.create = false;
  ASSERT_TRUE(registry.Open("opt://x", options).ok());
  EXPECT_FALSE(create);
}

}  // namespace
}  // namespace ckpt

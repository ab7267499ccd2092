// SigV4 against AWS's published known answers, so that a signing bug fails a
// test even where the test server (moto) does not check signatures.
//
// The cases are in testdata/aws-sigv4 (its README says where they come
// from), whose path CMake passes in as CKPT_SIGV4_TESTDATA. A missing or
// short folder fails the test: it is part of the repository.
#include "storage/s3/sigv4.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "testing/files.h"

namespace ckpt::s3 {
namespace {

namespace fs = std::filesystem;
using ckpt::testing::ReadFile;

// The cases of the suite, all of which the test checks.
constexpr size_t kAwsCases = 38;

std::time_t ParseIsoTime(const std::string& s) {
  std::tm tm{};
  std::istringstream in(s);
  in >> std::get_time(&tm, "%Y-%m-%dT%H:%M:%SZ");
  return timegm(&tm);
}

// A request.txt: the request line and header lines verbatim (for the
// signed request), and the parsed request.
struct RawRequest {
  std::vector<std::string> head_lines;
  std::string body;
  SigV4Request request;
};

RawRequest ParseRequest(const std::string& text) {
  RawRequest raw;
  size_t pos = 0;
  bool in_body = false;
  while (pos < text.size() && !in_body) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty()) {
      in_body = true;
      break;
    }
    raw.head_lines.push_back(line);
  }
  if (in_body && pos <= text.size()) raw.body = text.substr(pos);

  const std::string& first = raw.head_lines.at(0);
  const size_t sp1 = first.find(' ');
  const size_t sp2 = first.rfind(' ');
  raw.request.method = first.substr(0, sp1);
  const std::string target = first.substr(sp1 + 1, sp2 - sp1 - 1);
  const size_t q = target.find('?');
  raw.request.path = target.substr(0, q);
  if (q != std::string::npos) {
    std::string_view query = std::string_view(target).substr(q + 1);
    while (!query.empty()) {
      size_t amp = query.find('&');
      std::string_view pair = query.substr(0, amp);
      const size_t eq = pair.find('=');
      raw.request.query.emplace_back(
          UriDecode(pair.substr(0, eq)),
          eq == std::string_view::npos ? "" : UriDecode(pair.substr(eq + 1)));
      query = amp == std::string_view::npos ? "" : query.substr(amp + 1);
    }
  }
  for (size_t i = 1; i < raw.head_lines.size(); ++i) {
    const std::string& line = raw.head_lines[i];
    if (line[0] == ' ' || line[0] == '\t') {  // a folded continuation
      raw.request.headers.back().second += "\n" + line;
      continue;
    }
    const size_t colon = line.find(':');
    raw.request.headers.emplace_back(line.substr(0, colon),
                                     line.substr(colon + 1));
  }
  raw.request.payload_hash = Sha256Hex(raw.body);
  return raw;
}

TEST(SigV4Test, AwsKnownAnswers) {
  const fs::path dir = CKPT_SIGV4_TESTDATA;
  ASSERT_TRUE(fs::is_directory(dir))
      << "the AWS SigV4 test suite is not at " << dir
      << " (src/storage/s3/testdata/aws-sigv4 in the repository)";
  std::vector<fs::path> cases;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_directory() && fs::exists(e.path() / "context.json")) {
      cases.push_back(e.path());
    }
  }
  std::sort(cases.begin(), cases.end());
  ASSERT_FALSE(cases.empty()) << "no cases under " << dir;
  EXPECT_EQ(cases.size(), kAwsCases) << "cases under " << dir;
  for (const fs::path& c : cases) {
    SCOPED_TRACE(c.filename().string());
    const nlohmann::json ctx =
        nlohmann::json::parse(ReadFile(c / "context.json"));
    SigV4Credentials creds;
    creds.access_key_id = ctx["credentials"]["access_key_id"];
    creds.secret_access_key = ctx["credentials"]["secret_access_key"];
    creds.session_token = ctx["credentials"].value("token", "");
    SigV4Params params;
    params.region = ctx["region"];
    params.service = ctx["service"];
    params.time = ParseIsoTime(ctx["timestamp"]);
    params.normalize_path = ctx.value("normalize", true);
    params.payload_hash_header = ctx.value("sign_body", false);
    params.omit_session_token_from_signature =
        ctx.value("omit_session_token", false);

    const RawRequest raw = ParseRequest(ReadFile(c / "request.txt"));
    const SigV4Signature sig = SignV4(raw.request, creds, params);
    EXPECT_EQ(sig.canonical_request,
              ReadFile(c / "header-canonical-request.txt"));
    EXPECT_EQ(sig.string_to_sign, ReadFile(c / "header-string-to-sign.txt"));
    EXPECT_EQ(sig.signature, ReadFile(c / "header-signature.txt"));
    std::string signed_request;
    for (const std::string& line : raw.head_lines)
      signed_request += line + "\n";
    for (const auto& [name, value] : sig.headers_to_add) {
      signed_request += name + ":" + value + "\n";
    }
    signed_request += "\n" + raw.body;
    EXPECT_EQ(signed_request, ReadFile(c / "header-signed-request.txt"));
  }
  std::cout << "checked " << cases.size() << " AWS SigV4 cases from " << dir
            << "\n";
}

TEST(SigV4Test, UriEncodeKeepsOnlyUnreservedBytes) {
  EXPECT_EQ(UriEncode("a-b_c.d~e/f g+h%i", false), "a-b_c.d~e/f%20g%2Bh%25i");
  EXPECT_EQ(UriEncode("a/b", true), "a%2Fb");
  EXPECT_EQ(UriEncode("\xe1\x88\xb4", false), "%E1%88%B4");
  EXPECT_EQ(UriEncode(std::string("\0", 1), false), "%00");
}

TEST(SigV4Test, UriDecodeUndoesEncodeAndKeepsMalformedEscapes) {
  EXPECT_EQ(UriDecode("%E1%88%B4=x%2fy"), "\xe1\x88\xb4=x/y");
  EXPECT_EQ(UriDecode("100%"), "100%");
  EXPECT_EQ(UriDecode("%zz%4"), "%zz%4");
}

TEST(SigV4Test, DigestsOfKnownStrings) {
  EXPECT_EQ(Sha256Hex(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const std::string hello = "hello world";
  EXPECT_EQ(Md5Hex(std::as_bytes(std::span(hello.data(), hello.size()))),
            "5eb63bbbe01eeed093cb22bb8f5acdc3");
  EXPECT_EQ(AmzDate(1440938160), "20150830T123600Z");
}

// S3 signs the path as it is: no dot-segment removal, one encoding.
TEST(SigV4Test, S3PathsAreNotNormalized) {
  SigV4Request r;
  r.method = "GET";
  r.path = "/bucket/a/../b//c d";
  r.headers = {{"Host", "s3.amazonaws.com"}};
  r.payload_hash = Sha256Hex("");
  SigV4Params p;
  p.region = "us-east-1";
  p.service = "s3";
  p.time = 1440938160;
  const SigV4Signature sig = SignV4(r, {"AKID", "SECRET", ""}, p);
  EXPECT_EQ(
      sig.canonical_request.substr(0, sig.canonical_request.find('\n', 4)),
      "GET\n/bucket/a/../b//c%20d");
  EXPECT_NE(sig.canonical_request.find("x-amz-content-sha256:e3b0c442"),
            std::string::npos);
  ASSERT_EQ(sig.headers_to_add.size(), 3u);
  EXPECT_EQ(sig.headers_to_add[2].first, "Authorization");
  EXPECT_NE(sig.headers_to_add[2].second.find(
                "SignedHeaders=host;x-amz-content-sha256;x-amz-date"),
            std::string::npos);
}

}  // namespace
}  // namespace ckpt::s3

// AWS Signature Version 4: the request signing every S3 request carries.
//
// Written against AWS's published test suite (the known-answer tests in
// sigv4_test.cc): canonical request, string to sign, signature and the
// headers a signed request gains. Signing is a pure function of its inputs
// (the time included), so a test can replay a published case exactly.
//
// Thread safety: every function here is thread-safe.
#pragma once

#include <cstddef>
#include <ctime>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ckpt::s3 {

struct SigV4Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // empty unless temporary credentials
};

// What is signed: the request as it will be sent.
struct SigV4Request {
  std::string method;  // "GET", "PUT", ...
  // The path as bytes, not percent-encoded ("/a b/\xe1\x88\xb4"); signing
  // encodes it once, as S3 expects.
  std::string path;
  // Query parameters, decoded, in any order.
  std::vector<std::pair<std::string, std::string>> query;
  // Headers as they will be sent (any case, duplicates allowed); "host" must
  // be among them. Every one is signed.
  std::vector<std::pair<std::string, std::string>> headers;
  // Hex SHA-256 of the body, or "UNSIGNED-PAYLOAD".
  std::string payload_hash;
};

struct SigV4Params {
  std::string region;   // "us-east-1"
  std::string service;  // "s3"
  std::time_t time = 0;
  // Remove "." and ".." segments and repeated slashes from the path before
  // signing (every service but S3; S3 signs the path as it is).
  bool normalize_path = false;
  // Send the payload hash as the x-amz-content-sha256 header (S3 requires
  // it) and sign it.
  bool payload_hash_header = true;
  // Send the session token unsigned (some services want it added after
  // signing).
  bool omit_session_token_from_signature = false;
};

struct SigV4Signature {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signature;  // lower-case hex
  // Headers to add to the request, in this order; the last is
  // Authorization.
  std::vector<std::pair<std::string, std::string>> headers_to_add;
};

SigV4Signature SignV4(const SigV4Request& request,
                      const SigV4Credentials& credentials,
                      const SigV4Params& params);

// "20150830T123600Z".
std::string AmzDate(std::time_t time);

// Percent-encodes every byte but A-Z a-z 0-9 - . _ ~ (and '/' unless
// `encode_slash`), with upper-case hex digits, as SigV4 and S3 require.
std::string UriEncode(std::string_view s, bool encode_slash);

// Decodes %XX escapes; a malformed escape is kept as it is.
std::string UriDecode(std::string_view s);

// Lower-case hex SHA-256 and MD5 of `data`, and raw HMAC-SHA256.
std::string Sha256Hex(std::span<const std::byte> data);
std::string Sha256Hex(std::string_view data);
std::string Md5Hex(std::span<const std::byte> data);
std::string HmacSha256(std::string_view key, std::string_view data);

}  // namespace ckpt::s3

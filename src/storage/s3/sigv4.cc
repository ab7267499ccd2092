// SigV4, step by step (AWS's "Signature Version 4 signing process"):
//
//   1. Canonical request: method, the URI-encoded path, the sorted and
//      encoded query, the canonical headers (lower-case names, values with
//      whitespace runs collapsed, duplicates joined by ','), the list of
//      signed header names, and the payload hash — one per line.
//   2. String to sign: the algorithm, the time, the credential scope
//      (date/region/service/aws4_request) and the SHA-256 of step 1.
//   3. Signing key: HMAC-SHA256 chained over "AWS4" + secret, the date, the
//      region, the service and "aws4_request".
//   4. Signature: hex HMAC-SHA256 of step 2 under step 3's key; it goes in
//      the Authorization header with the scope and the signed header names.
#include "storage/s3/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <map>

namespace ckpt::s3 {
namespace {

constexpr char kHexLower[] = "0123456789abcdef";
constexpr char kHexUpper[] = "0123456789ABCDEF";

std::string Hex(const unsigned char* data, size_t n) {
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kHexLower[data[i] >> 4];
    out[2 * i + 1] = kHexLower[data[i] & 15];
  }
  return out;
}

std::string DigestHex(const EVP_MD* md, const void* data, size_t n) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data, n, out, &len, md, nullptr);
  return Hex(out, len);
}

bool IsUnreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
         (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~';
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string ToLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Trims the value and collapses each run of whitespace into one space.
std::string CanonicalHeaderValue(std::string_view v) {
  std::string out;
  bool pending_space = false;
  for (char c : v) {
    if (IsSpace(c)) {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out += ' ';
    pending_space = false;
    out += c;
  }
  return out;
}

// Removes "." and ".." segments and empty segments (repeated slashes),
// keeping a trailing slash.
std::string NormalizePath(std::string_view path) {
  std::vector<std::string_view> segments;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view seg = path.substr(start, end - start);
    if (seg == "..") {
      if (!segments.empty()) segments.pop_back();
    } else if (!seg.empty() && seg != ".") {
      segments.push_back(seg);
    }
    start = end + 1;
  }
  std::string out;
  for (std::string_view seg : segments) {
    out += '/';
    out += seg;
  }
  if (out.empty()) return "/";
  if (path.ends_with('/')) out += '/';
  return out;
}

std::string Date(std::time_t time) { return AmzDate(time).substr(0, 8); }

}  // namespace

std::string AmzDate(std::time_t time) {
  std::tm tm{};
  gmtime_r(&time, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

std::string UriEncode(std::string_view s, bool encode_slash) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (IsUnreserved(c) || (c == '/' && !encode_slash)) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHexUpper[c >> 4];
      out += kHexUpper[c & 15];
    }
  }
  return out;
}

std::string UriDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      const int hi = HexValue(s[i + 1]), lo = HexValue(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

std::string Sha256Hex(std::span<const std::byte> data) {
  return DigestHex(EVP_sha256(), data.data(), data.size());
}

std::string Sha256Hex(std::string_view data) {
  return DigestHex(EVP_sha256(), data.data(), data.size());
}

std::string Md5Hex(std::span<const std::byte> data) {
  return DigestHex(EVP_md5(), data.data(), data.size());
}

std::string HmacSha256(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out,
       &len);
  return std::string(reinterpret_cast<const char*>(out), len);
}

SigV4Signature SignV4(const SigV4Request& request,
                      const SigV4Credentials& credentials,
                      const SigV4Params& params) {
  SigV4Signature out;
  const std::string amz_date = AmzDate(params.time);
  const bool token = !credentials.session_token.empty();
  if (token) {
    out.headers_to_add.emplace_back("X-Amz-Security-Token",
                                    credentials.session_token);
  }
  out.headers_to_add.emplace_back("X-Amz-Date", amz_date);
  if (params.payload_hash_header) {
    out.headers_to_add.emplace_back("x-amz-content-sha256",
                                    request.payload_hash);
  }

  // 1. The canonical request.
  std::map<std::string, std::string> headers;  // sorted by lower-case name
  auto add_header = [&](std::string_view name, std::string_view value) {
    std::string& v = headers[ToLower(name)];
    if (!v.empty()) v += ',';
    v += CanonicalHeaderValue(value);
  };
  for (const auto& [name, value] : request.headers) add_header(name, value);
  for (const auto& [name, value] : out.headers_to_add) {
    if (name == "X-Amz-Security-Token" &&
        params.omit_session_token_from_signature) {
      continue;
    }
    add_header(name, value);
  }
  std::string canonical_headers, signed_headers;
  for (const auto& [name, value] : headers) {
    canonical_headers += name + ":" + value + "\n";
    signed_headers += (signed_headers.empty() ? "" : ";") + name;
  }
  std::vector<std::pair<std::string, std::string>> query;
  for (const auto& [k, v] : request.query) {
    query.emplace_back(UriEncode(k, true), UriEncode(v, true));
  }
  std::sort(query.begin(), query.end());
  std::string canonical_query;
  for (const auto& [k, v] : query) {
    canonical_query += (canonical_query.empty() ? "" : "&") + k + "=" + v;
  }
  const std::string path = params.normalize_path
                               ? NormalizePath(request.path)
                               : (request.path.empty() ? "/" : request.path);
  out.canonical_request = request.method + "\n" + UriEncode(path, false) +
                          "\n" + canonical_query + "\n" + canonical_headers +
                          "\n" + signed_headers + "\n" + request.payload_hash;

  // 2. The string to sign.
  const std::string date = Date(params.time);
  const std::string scope =
      date + "/" + params.region + "/" + params.service + "/aws4_request";
  out.string_to_sign = "AWS4-HMAC-SHA256\n" + amz_date + "\n" + scope + "\n" +
                       Sha256Hex(out.canonical_request);

  // 3-4. The signing key and the signature.
  std::string key = HmacSha256("AWS4" + credentials.secret_access_key, date);
  key = HmacSha256(key, params.region);
  key = HmacSha256(key, params.service);
  key = HmacSha256(key, "aws4_request");
  const std::string mac = HmacSha256(key, out.string_to_sign);
  out.signature =
      Hex(reinterpret_cast<const unsigned char*>(mac.data()), mac.size());
  out.headers_to_add.emplace_back(
      "Authorization",
      "AWS4-HMAC-SHA256 Credential=" + credentials.access_key_id + "/" + scope +
          ", SignedHeaders=" + signed_headers + ", Signature=" + out.signature);
  return out;
}

}  // namespace ckpt::s3

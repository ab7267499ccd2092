#include "storage/s3/s3_client.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <ctime>
#include <random>
#include <thread>

#include "util/names.h"

namespace ckpt::s3 {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(c));
  return out;
}

bool IsIpv4(std::string_view host) {
  int dots = 0;
  for (char c : host) {
    if (c == '.') {
      ++dots;
    } else if (!std::isdigit(static_cast<unsigned char>(c))) {
      return false;
    }
  }
  return dots == 3;
}

// The first of `names` set to a non-empty value in the environment.
std::string FromEnv(const GetEnv& getenv,
                    std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const char* v = getenv(name);
    if (v != nullptr && *v != '\0') return v;
  }
  return "";
}

void AppendUtf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

std::string XmlDecode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    const size_t semi = s.find(';', i);
    if (semi == std::string_view::npos) {
      out += s[i];
      continue;
    }
    const std::string_view name = s.substr(i + 1, semi - i - 1);
    if (name == "amp") {
      out += '&';
    } else if (name == "lt") {
      out += '<';
    } else if (name == "gt") {
      out += '>';
    } else if (name == "quot") {
      out += '"';
    } else if (name == "apos") {
      out += '\'';
    } else if (name.size() > 1 && name[0] == '#') {
      const bool hex = name[1] == 'x' || name[1] == 'X';
      const std::string digits(name.substr(hex ? 2 : 1));
      char* end = nullptr;
      const unsigned long cp =
          std::strtoul(digits.c_str(), &end, hex ? 16 : 10);
      if (digits.empty() || *end != '\0' || cp > 0x10ffff) {
        out += s[i];
        continue;
      }
      AppendUtf8(out, static_cast<uint32_t>(cp));
    } else {
      out += s[i];
      continue;
    }
    i = semi;
  }
  return out;
}

}  // namespace

Status ValidateBucketName(std::string_view bucket, std::string_view url) {
  auto bad = [&](std::string_view why) {
    return InvalidArgumentError("URL " + Quote(url) + ": bucket name " +
                                Quote(bucket) + " " + std::string(why));
  };
  if (bucket.empty()) return bad("is empty (s3://BUCKET/PREFIX)");
  if (bucket.size() < 3 || bucket.size() > 63) {
    return bad("must be 3 to 63 characters long");
  }
  for (char c : bucket) {
    if (!(c >= 'a' && c <= 'z') && !(c >= '0' && c <= '9') && c != '.' &&
        c != '-') {
      return bad(
          "may hold only lower-case letters, digits, '.' and '-' (S3 bucket "
          "naming rules)");
    }
  }
  auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
  };
  if (!alnum(bucket.front()) || !alnum(bucket.back())) {
    return bad("must start and end with a letter or a digit");
  }
  if (bucket.find("..") != std::string_view::npos) {
    return bad("must not hold \"..\"");
  }
  if (IsIpv4(bucket)) return bad("must not be an IP address");
  return Status();
}

Result<S3Config> ResolveS3Config(const ParsedUrl& url, const S3Options& options,
                                 const GetEnv& getenv) {
  auto bad = [&](std::string_view why) {
    return InvalidArgumentError("URL " + Quote(url.url) + ": " +
                                std::string(why));
  };
  S3Config c;
  c.url = url.url;
  c.options = options;
  c.bucket = url.host;
  CKPT_RETURN_IF_ERROR(ValidateBucketName(c.bucket, url.url));
  std::string_view prefix = url.path;
  while (prefix.starts_with('/')) prefix.remove_prefix(1);
  while (prefix.ends_with('/')) prefix.remove_suffix(1);
  if (!prefix.empty()) {
    if (Status s = ValidateKey(prefix); !s.ok()) {
      return bad("prefix " + Quote(prefix) + ": " + s.message());
    }
    c.prefix = std::string(prefix) + "/";
  }

  std::string& region = c.options.region;
  if (region.empty()) {
    region = FromEnv(getenv, {"AWS_REGION", "AWS_DEFAULT_REGION"});
  }
  if (region.empty()) region = "us-east-1";
  for (char ch : region) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-') {
      return bad("region " + Quote(region) + " is malformed");
    }
  }

  std::string endpoint =
      !options.endpoint.empty()
          ? options.endpoint
          : FromEnv(getenv, {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"});
  if (endpoint.empty()) endpoint = "https://s3." + region + ".amazonaws.com";
  const size_t sep = endpoint.find("://");
  if (sep == std::string::npos) {
    return bad("endpoint " + Quote(endpoint) +
               " needs a scheme (http:// or https://)");
  }
  c.scheme = Lower(endpoint.substr(0, sep));
  if (c.scheme != "http" && c.scheme != "https") {
    return bad("endpoint " + Quote(endpoint) + " is not http:// or https://");
  }
  std::string_view host = std::string_view(endpoint).substr(sep + 3);
  while (host.ends_with('/')) host.remove_suffix(1);
  if (host.empty()) return bad("endpoint " + Quote(endpoint) + " has no host");
  for (char ch : host) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) &&
        std::string_view(".-:[]").find(ch) == std::string_view::npos) {
      return bad("endpoint " + Quote(endpoint) +
                 " must be scheme://host[:port] only");
    }
  }
  c.host = Lower(host);
  c.options.endpoint = c.scheme + "://" + c.host;

  if (options.access_key_id.empty()) {
    c.options.access_key_id = FromEnv(getenv, {"AWS_ACCESS_KEY_ID"});
    c.options.secret_access_key = FromEnv(getenv, {"AWS_SECRET_ACCESS_KEY"});
    c.options.session_token = FromEnv(getenv, {"AWS_SESSION_TOKEN"});
  }
  if (!c.options.access_key_id.empty() && c.options.secret_access_key.empty()) {
    return bad("an access key id is given but no secret access key");
  }

  bool path_style = false;
  switch (options.addressing) {
    case S3Options::Addressing::kPath:
      path_style = true;
      break;
    case S3Options::Addressing::kVirtualHosted:
      path_style = false;
      break;
    case S3Options::Addressing::kAuto: {
      const std::string style = FromEnv(getenv, {"CKPT_S3_ADDRESSING_STYLE"});
      if (style == "path") {
        path_style = true;
      } else if (style == "virtual") {
        path_style = false;
      } else if (!style.empty()) {
        return bad("CKPT_S3_ADDRESSING_STYLE=" + Quote(style) +
                   " is neither \"path\" nor \"virtual\"");
      } else {
        const std::string_view name =
            c.host.front() == '['
                ? std::string_view(c.host)
                : std::string_view(c.host).substr(0, c.host.rfind(':'));
        path_style = c.host.front() == '[' || IsIpv4(name) ||
                     name == "localhost" ||
                     c.bucket.find('.') != std::string::npos;
      }
    }
  }
  if (!path_style && c.bucket.find('.') != std::string::npos &&
      c.scheme == "https") {
    return bad(
        "a bucket name with dots needs path-style addressing over "
        "https (its certificate would not match)");
  }
  c.options.addressing = path_style ? S3Options::Addressing::kPath
                                    : S3Options::Addressing::kVirtualHosted;

  if (!options.conditional_writes) {
    const std::string v =
        Lower(FromEnv(getenv, {"CKPT_S3_CONDITIONAL_WRITES"}));
    if (v.empty() || v == "1" || v == "true" || v == "on") {
      c.options.conditional_writes = true;
    } else if (v == "0" || v == "false" || v == "off") {
      c.options.conditional_writes = false;
    } else {
      return bad("CKPT_S3_CONDITIONAL_WRITES=" + Quote(v) + " is not 0 or 1");
    }
  }

  // AWS_MAX_ATTEMPTS, as AWS's own tools read it, where the caller left the
  // default: the one way a `ckpt` command or a Python job shortens what an
  // unreachable store costs (6 tries of up to 2 minutes each).
  if (options.max_attempts == S3Options().max_attempts) {
    const std::string v = FromEnv(getenv, {"AWS_MAX_ATTEMPTS"});
    if (!v.empty()) {
      int n = 0;
      const auto [end, error] =
          std::from_chars(v.data(), v.data() + v.size(), n);
      if (error != std::errc() || end != v.data() + v.size() || n < 1 ||
          n > 100) {
        return bad("AWS_MAX_ATTEMPTS=" + Quote(v) +
                   " is not a whole number from 1 to 100");
      }
      c.options.max_attempts = n;
    }
  }
  if (c.options.max_attempts < 1) {
    return bad("max_attempts must be at least 1");
  }
  if (options.initial_backoff_ms < 0 || options.max_backoff_ms < 0) {
    return bad("backoff times must not be negative");
  }
  if (options.request_timeout_ms <= 0 || options.connect_timeout_ms <= 0) {
    return bad("timeouts must be positive");
  }
  if (options.part_size < kMinPartSize || options.part_size > kMaxPartSize) {
    return bad("part_size " + std::to_string(options.part_size) +
               " is outside S3's limits of 5 MiB to 5 GiB");
  }
  if (options.max_concurrency < 1 || options.max_concurrency > 64) {
    return bad("max_concurrency must be 1 to 64");
  }
  return c;
}

S3Client::S3Client(S3Config config, std::shared_ptr<HttpTransport> transport)
    : config_(std::move(config)),
      credentials_{config_.options.access_key_id,
                   config_.options.secret_access_key,
                   config_.options.session_token},
      transport_(std::move(transport)) {}

std::string S3Client::Url(const S3Request& request) const {
  std::string url = config_.scheme + "://";
  std::string path = "/";
  if (config_.path_style()) {
    url += config_.host;
    path += config_.bucket;
    if (!request.key.empty()) path += "/" + request.key;
  } else {
    url += config_.bucket + "." + config_.host;
    path += request.key;
  }
  url += UriEncode(path, false);
  char sep = '?';
  for (const auto& [k, v] : request.query) {
    url += sep + UriEncode(k, true) + "=" + UriEncode(v, true);
    sep = '&';
  }
  return url;
}

Result<S3Response> S3Client::Send(const S3Request& request,
                                  std::string_view what) {
  const std::string payload_hash =
      config_.options.sign_payload || request.body.empty()
          ? Sha256Hex(request.body)
          : "UNSIGNED-PAYLOAD";
  HttpRequest http;
  http.method = request.method;
  http.url = Url(request);
  http.body = request.body;
  http.into = request.into;
  http.skip = request.skip;
  http.timeout_ms = config_.options.request_timeout_ms;
  http.connect_timeout_ms = config_.options.connect_timeout_ms;
  SigV4Request to_sign;
  to_sign.method = request.method;
  to_sign.path = "/";
  if (config_.path_style()) {
    to_sign.path += config_.bucket;
    if (!request.key.empty()) to_sign.path += "/" + request.key;
  } else {
    to_sign.path += request.key;
  }
  to_sign.query = request.query;
  to_sign.headers = request.headers;
  to_sign.headers.emplace_back(
      "Host", config_.path_style() ? config_.host
                                   : config_.bucket + "." + config_.host);
  to_sign.payload_hash = payload_hash;
  SigV4Params params;
  params.region = config_.options.region;
  params.service = "s3";

  thread_local std::mt19937_64 jitter(std::random_device{}());
  S3Response out;
  Status last_error;
  bool have_response = false;
  bool last_was_response = false;
  for (int attempt = 1; attempt <= config_.options.max_attempts; ++attempt) {
    if (attempt > 1) {
      const int64_t cap = std::min<int64_t>(
          config_.options.max_backoff_ms,
          config_.options.initial_backoff_ms << std::min(attempt - 2, 20));
      std::uniform_int_distribution<int64_t> d(cap / 2,
                                               std::max<int64_t>(cap, 0));
      std::this_thread::sleep_for(std::chrono::milliseconds(d(jitter)));
    }
    http.headers = to_sign.headers;
    if (!credentials_.access_key_id.empty()) {
      params.time = std::time(nullptr);
      SigV4Signature sig = SignV4(to_sign, credentials_, params);
      for (auto& h : sig.headers_to_add) http.headers.push_back(std::move(h));
    } else {
      http.headers.emplace_back("x-amz-content-sha256", payload_hash);
    }
    requests_.fetch_add(1);
    Result<HttpResponse> r = transport_->Send(http);
    out.attempts = attempt;
    if (!r.ok()) {
      last_error = r.status();
      last_was_response = false;
      out.ambiguous = true;
      continue;
    }
    const long status = r->status;
    out.http = std::move(r).value();
    have_response = true;
    last_was_response = true;
    // 501 (not implemented) and 505 (HTTP version) answer the same every
    // time; every other 5xx, and 429, may pass.
    if ((status >= 500 && status != 501 && status != 505) || status == 429) {
      out.ambiguous |= status >= 500;
      continue;
    }
    // A body cut short is a lost connection, unless the server itself says
    // the range it answers lies past the object's end (then it answers the
    // same every time).
    if (out.http.truncated && !ContentRangePastEnd(out.http.headers)) {
      last_error = UnavailableError(
          "the connection closed before the whole body arrived (" +
          DescribeHttpError(out.http) + ")");
      last_was_response = false;
      continue;
    }
    return out;
  }
  if (last_was_response) return out;
  if (have_response) {
    // The last attempt failed to connect; an earlier one got an answer.
    return UnavailableError(std::string(what) + ": " +
                            DescribeHttpError(out.http) + ", then " +
                            last_error.message() + ", after " +
                            std::to_string(out.attempts) + " attempts");
  }
  return UnavailableError(std::string(what) + ": no response from " +
                          config_.scheme + "://" + config_.host + " after " +
                          std::to_string(out.attempts) + " attempts (" +
                          last_error.message() + ")");
}

std::string DescribeHttpError(const HttpResponse& response) {
  std::string out = "HTTP " + std::to_string(response.status);
  const std::string code = XmlValue(response.body, "Code");
  const std::string message = XmlValue(response.body, "Message");
  if (!code.empty()) out += " " + code;
  if (!message.empty()) out += ": " + message;
  auto id = response.headers.find("x-amz-request-id");
  if (id != response.headers.end()) out += " (request id " + id->second + ")";
  return out;
}

std::vector<std::string_view> XmlElements(std::string_view xml,
                                          std::string_view tag) {
  std::vector<std::string_view> out;
  const std::string open = "<" + std::string(tag);
  const std::string close = "</" + std::string(tag) + ">";
  size_t pos = 0;
  while ((pos = xml.find(open, pos)) != std::string_view::npos) {
    const size_t after = pos + open.size();
    if (after >= xml.size()) break;
    if (xml[after] == '/' && after + 1 < xml.size() && xml[after + 1] == '>') {
      out.emplace_back();  // <tag/>
      pos = after + 2;
      continue;
    }
    if (xml[after] != '>' && xml[after] != ' ') {
      pos = after;  // a longer tag name with the same beginning
      continue;
    }
    const size_t start = xml.find('>', after);
    if (start == std::string_view::npos) break;
    const size_t end = xml.find(close, start + 1);
    if (end == std::string_view::npos) break;
    out.push_back(xml.substr(start + 1, end - start - 1));
    pos = end + close.size();
  }
  return out;
}

std::string XmlValue(std::string_view xml, std::string_view tag) {
  std::vector<std::string_view> e = XmlElements(xml, tag);
  return e.empty() ? "" : XmlDecode(e[0]);
}

int64_t ParseS3Time(std::string_view s) {
  const std::string str(s);
  std::tm tm{};
  const char* rest = strptime(str.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  int64_t ms = 0;
  if (rest != nullptr) {
    if (*rest == '.') {
      int digits = 0;
      for (++rest; std::isdigit(static_cast<unsigned char>(*rest)); ++rest) {
        if (digits++ < 3) ms = ms * 10 + (*rest - '0');
      }
      while (digits++ < 3) ms *= 10;
    }
  } else {
    tm = {};
    rest = strptime(str.c_str(), "%a, %d %b %Y %H:%M:%S", &tm);
    if (rest == nullptr) return 0;
  }
  return static_cast<int64_t>(timegm(&tm)) * 1000 + ms;
}

}  // namespace ckpt::s3

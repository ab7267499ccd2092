#include "util/log.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace ckpt {
namespace {

LogLevel LevelFromEnv() {
  const char* v = std::getenv("CKPT_LOG");
  if (v == nullptr) return LogLevel::kWarning;
  if (std::strcmp(v, "debug") == 0) return LogLevel::kDebug;
  if (std::strcmp(v, "info") == 0) return LogLevel::kInfo;
  if (std::strcmp(v, "error") == 0) return LogLevel::kError;
  if (std::strcmp(v, "off") == 0) return LogLevel::kOff;
  return LogLevel::kWarning;
}

const char* Tag(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    default:
      return "error";
  }
}

}  // namespace

bool LogEnabled(LogLevel level) {
  static const LogLevel threshold = LevelFromEnv();
  return level >= threshold && level != LogLevel::kOff;
}

void Log(LogLevel level, std::string_view message) {
  if (!LogEnabled(level)) return;
  static std::mutex mu;
  std::string line = "ckpt ";
  line += Tag(level);
  line += ": ";
  line += message;
  line += '\n';
  std::lock_guard<std::mutex> lock(mu);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace ckpt

#include "util/log.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "util/mutex.h"

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
  // One fwrite per line, and one line at a time, so lines of several threads
  // never interleave.
  static Mutex mu;
  std::string line = "ckpt ";
  line += Tag(level);
  line += ": ";
  line += message;
  line += '\n';
  MutexLock lock(&mu);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace ckpt

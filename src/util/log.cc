#include "util/log.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "util/mutex.h"

namespace ckpt {
namespace {

// $CKPT_LOG, in any case ("INFO" is info). A value that names no level
// is said once, on stderr: a user who asked for more and sees nothing more
// should learn why.
LogLevel LevelFromEnv() {
  const char* v = std::getenv("CKPT_LOG");
  if (v == nullptr || *v == '\0') return LogLevel::kWarning;
  std::string level(v);
  for (char& c : level) c = static_cast<char>(std::tolower(c));
  if (level == "debug") return LogLevel::kDebug;
  if (level == "info") return LogLevel::kInfo;
  if (level == "warning" || level == "warn") return LogLevel::kWarning;
  if (level == "error") return LogLevel::kError;
  if (level == "off") return LogLevel::kOff;
  std::string line = "ckpt warning: CKPT_LOG=" + std::string(v).substr(0, 40) +
                     " names no level (debug, info, warning, error, off): "
                     "warnings and errors are logged\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
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

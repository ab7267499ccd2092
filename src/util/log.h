// Minimal leveled logging to stderr. The level comes from $CKPT_LOG
// (debug, info, warning, error, off; default warning), so a library that is
// embedded in a training job stays quiet unless something needs attention.
//
// Thread-safe: any thread may log; lines never interleave.
#pragma once

#include <string_view>

namespace ckpt {

enum class LogLevel { kDebug = 0, kInfo, kWarning, kError, kOff };

bool LogEnabled(LogLevel level);
void Log(LogLevel level, std::string_view message);

inline void LogInfo(std::string_view m) { Log(LogLevel::kInfo, m); }
inline void LogWarning(std::string_view m) { Log(LogLevel::kWarning, m); }

}  // namespace ckpt

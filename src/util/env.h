// How ckpt reads a switch from the environment (CKPT_FILE_DIRECT_IO,
// CKPT_READ_ONCE): one rule for every switch, so that "off" means off
// wherever "0" does.
#pragma once

#include <cctype>
#include <cstdlib>
#include <string>

namespace ckpt {

// Whether the variable `name` turns its switch off: "0", "off", "false" or
// "no", in any case. Unset, empty or anything else leaves it on.
inline bool EnvSwitchOff(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return false;
  std::string s(v);
  for (char& c : s) c = static_cast<char>(std::tolower(c));
  return s == "0" || s == "off" || s == "false" || s == "no";
}

}  // namespace ckpt

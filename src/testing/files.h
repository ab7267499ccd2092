// Files and folders for tests and the test servers: read or write a whole
// file, show the end of a log, make a temporary folder. No GoogleTest here,
// so that the S3 benchmark can start moto without it; a test wants
// TempDir (temp_dir.h), which also cleans up.
#pragma once

#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

namespace ckpt::testing {

// $TMPDIR, or /tmp where it is unset or empty.
inline std::filesystem::path TempParent() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp != nullptr && *tmp != '\0' ? std::filesystem::path(tmp)
                                        : std::filesystem::path("/tmp");
}

// Makes PARENT/ckpt-NAME-XXXXXX with mkdtemp(3) and returns its path, or ""
// with errno set.
inline std::string MakeTempDir(std::string_view name,
                               const std::filesystem::path& parent) {
  std::string pattern =
      (parent / ("ckpt-" + std::string(name) + "-XXXXXX")).string();
  return ::mkdtemp(pattern.data()) != nullptr ? pattern : "";
}

// A whole file's bytes ("" if it cannot be read).
inline std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Replaces the file's contents with `data`; false when that failed:
//   ASSERT_TRUE(WriteFile(path, data)) << path;
[[nodiscard]] inline bool WriteFile(const std::filesystem::path& path,
                                    std::string_view data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  out.close();
  return !out.fail();
}

// The last `max_bytes` of a log, "..." in front where it was cut: enough of
// a server's log to say why it stopped.
inline std::string LogTail(const std::filesystem::path& path,
                           size_t max_bytes = 2000) {
  std::string text = ReadFile(path);
  if (text.size() > max_bytes) {
    text = "..." + text.substr(text.size() - max_bytes);
  }
  return text;
}

// Flips the last byte (tensor bytes, past the file's header) of every data
// object (*.safetensors) under `dir`, at any depth; returns how many.
inline int FlipLastByteOfDataObjects(const std::filesystem::path& dir) {
  int flipped = 0;
  for (const auto& f : std::filesystem::recursive_directory_iterator(dir)) {
    if (!f.is_regular_file() || f.path().extension() != ".safetensors") {
      continue;
    }
    std::fstream io(f.path(), std::ios::in | std::ios::out | std::ios::binary);
    const auto at = static_cast<std::streamoff>(f.file_size()) - 1;
    char c = 0;
    io.seekg(at);
    io.get(c);
    io.seekp(at);
    io.put(static_cast<char>(c ^ 0x5a));
    ++flipped;
  }
  return flipped;
}

}  // namespace ckpt::testing

#pragma once
// Test support: a fresh directory under the temp dir that no other process has, made by
// mkdtemp. A name built from the pid is not enough: in a fresh container pids repeat from one
// test process to the next, and a later test found an earlier one's database in "its" dir
// (CI, session 18: ReservationTest saw two hosts where it had added one). Header-only.
#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace gpucloud::testing {

// `prefix` names what the directory is for ("gpucloud-billing"); the caller removes it.
inline std::filesystem::path unique_temp_dir(const std::string& prefix) {
  std::string pattern = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr)
    throw std::runtime_error("mkdtemp " + pattern + ": " + std::strerror(errno));
  return pattern;
}

// Same, under `base` (a tmpfs such as /dev/shm where a test wants one).
inline std::filesystem::path unique_temp_dir(const std::filesystem::path& base, const std::string& prefix) {
  std::string pattern = (base / (prefix + "-XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr)
    throw std::runtime_error("mkdtemp " + pattern + ": " + std::strerror(errno));
  return pattern;
}

}  // namespace gpucloud::testing

#pragma once
// Test support: a fake NVIDIA driver tree and a fake /dev in a directory, for the injection
// plan's unit tests and the integration tests that create containers with them (the engine
// passes the nodes, which are /dev/null's 1:3 under NVIDIA's names). Header-only.
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

namespace gpucloud::gpu::testing {

inline constexpr const char* kFakeDriverVersion = "580.159.04";

// ROOT/lib64 with the driver's libraries (<lib>.so.<ver> files, their .so.1 links; `skip`
// leaves libraries out) and ROOT/bin/nvidia-smi (a shell script printing its arguments).
inline void make_fake_driver_tree(const std::filesystem::path& root, const std::set<std::string>& skip = {}) {
  namespace fs = std::filesystem;
  fs::create_directories(root / "lib64");
  fs::create_directories(root / "bin");
  const std::string ver = kFakeDriverVersion;
  struct Lib { const char* stem; const char* link; };
  for (Lib lib : {Lib{"libcuda", "libcuda.so.1"}, Lib{"libnvidia-ml", "libnvidia-ml.so.1"},
                  Lib{"libnvidia-ptxjitcompiler", "libnvidia-ptxjitcompiler.so.1"},
                  Lib{"libnvidia-nvvm", "libnvidia-nvvm.so.4"}, Lib{"libcudadebugger", "libcudadebugger.so.1"},
                  Lib{"libnvidia-gpucomp", nullptr}}) {
    if (skip.count(lib.stem)) continue;
    const std::string file = std::string(lib.stem) + ".so." + ver;
    std::ofstream(root / "lib64" / file) << "fake " << file << "\n";
    if (lib.link != nullptr) {
      std::error_code ec;
      fs::remove(root / "lib64" / lib.link, ec);
      fs::create_symlink(file, root / "lib64" / lib.link);
    }
  }
  if (!skip.count("nvidia-smi")) {
    std::ofstream(root / "bin" / "nvidia-smi") << "#!/bin/sh\necho \"fake nvidia-smi $*\"\n";
    fs::permissions(root / "bin" / "nvidia-smi", fs::perms(0755));
  }
}

// DIR/nvidia0..nvidia<gpus-1>, nvidiactl, nvidia-uvm, nvidia-uvm-tools and
// nvidia-caps/nvidia-cap1, all character devices 1:3 (what /dev/null is). Returns "" or why
// not (mknod needs CAP_MKNOD).
inline std::string make_fake_dev(const std::filesystem::path& dir, int gpus) {
  namespace fs = std::filesystem;
  fs::create_directories(dir / "nvidia-caps");
  auto node = [](const fs::path& p) -> std::string {
    std::error_code ec;
    fs::remove(p, ec);
    if (::mknod(p.c_str(), S_IFCHR | 0666, ::makedev(1, 3)) != 0) return "mknod " + p.string() + ": " + std::strerror(errno);
    return {};
  };
  for (int i = 0; i < gpus; ++i) {
    if (auto e = node(dir / ("nvidia" + std::to_string(i))); !e.empty()) return e;
  }
  for (const char* n : {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}) {
    if (auto e = node(dir / n); !e.empty()) return e;
  }
  return node(dir / "nvidia-caps" / "nvidia-cap1");
}

}  // namespace gpucloud::gpu::testing

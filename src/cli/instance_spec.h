#pragma once
// The flags of `create` and `estimate`, checked and turned into the body of POST /instances
// (and POST /billing/estimate) before anything is sent.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include "cli/app.h"

namespace CLI {
class App;
}

namespace gpucloud::cli {

struct InstanceArgs {
  std::string name;
  std::string gpu;  // "MODEL:COUNT"
  bool no_gpu = false;
  std::string image;
  std::string zone;
  std::string system_disk;  // GiB
  std::vector<std::string> ports;
  std::vector<std::string> keys;
  bool password_stdin = false;
  std::string billing;  // hourly | weekly | monthly
  bool no_auto_renew = false;
  std::string autostop_idle;  // minutes
  std::vector<std::string> data_disks;  // SIZE[:PATH]
  std::vector<std::string> attach;      // DISK[:PATH]
  std::string security_group;
  bool no_wait = false;
};

struct GpuSpec {
  std::string model;
  int count = 0;
};

// "RTX 4090:1" → {RTX 4090, 1}. The count is required.
Expected<GpuSpec> parse_gpu_spec(std::string_view text);

// --port values (8888, 53/udp) → the API's `ports` list: 22 first, then each port once;
// at most 10 in all. Bad syntax is a usage error naming the value.
Expected<boost::json::array> build_port_list(const std::vector<std::string>& port_flags);

// Declares the shared flags on `create` / `estimate`.
void add_instance_flags(CLI::App& command, InstanceArgs& args, bool for_create);

// Validates the flags (usage errors, exit 2) and builds the request body. `password` is the
// one read with --password-stdin.
Expected<boost::json::object> build_instance_body(const InstanceArgs& args,
                                                  const std::optional<std::string>& password);

}  // namespace gpucloud::cli

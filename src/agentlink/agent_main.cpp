// gpucloud-agent: a GPU host's agent, dialling out to its control plane (issue 26).
//   gpucloud-agent --config agent.toml --join https://CONTROL:8443 --token TOKEN   (once)
//   gpucloud-agent --config agent.toml                                               (every start)
// It runs the same agent code as gpucloudd's in-process hosts; restarting it never restarts
// a container (it re-attaches and reconciles), and while its control plane is away its
// instances keep running.
#include <sodium.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include <CLI/CLI.hpp>
#include <boost/asio.hpp>
#include <spdlog/spdlog.h>

#include "agent/agent_assembly.h"
#include "agentlink/agent_file.h"
#include "agentlink/link_client.h"

namespace asio = boost::asio;
namespace fs = std::filesystem;
using namespace gpucloud;

namespace {

// The id that names this agent's containers and networks (gpucloud-<id>-...): its own, kept
// in its data directory, so two agents (or an agent and a control plane) on one engine never
// take each other's.
Result<std::string> installation_id(const fs::path& data_dir) {
  const fs::path path = data_dir / "installation-id";
  if (std::ifstream in(path); in) {
    std::string id;
    std::getline(in, id);
    if (!id.empty()) return id;
  }
  unsigned char raw[5];
  randombytes_buf(raw, sizeof raw);
  static const char* hex = "0123456789abcdef";
  std::string id = "a";
  for (unsigned char b : raw) id += std::string{hex[b >> 4], hex[b & 15]};
  std::error_code ec;
  fs::create_directories(data_dir, ec);
  std::ofstream out(path);
  out << id << "\n";
  if (!out.flush()) return fail(ErrorCode::internal, "cannot write " + path.string());
  return id;
}

template <class T>
std::optional<T> run_until(asio::io_context& io, asio::awaitable<T> work) {
  std::optional<T> result;
  asio::co_spawn(io, std::move(work), [&](std::exception_ptr e, T r) {
    if (!e) result = std::move(r);
  });
  while (!result && io.run_one() > 0) {
  }
  io.restart();
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App cli{"gpucloud-agent: a GPU host's agent for a gpucloud control plane"};
  std::string config_path, join_url, token;
  cli.add_option("--config", config_path, "the agent's TOML file (data_dir, [host], [agent])")->required()->check(CLI::ExistingFile);
  cli.add_option("--join", join_url, "join this control plane (https://HOST:PORT), once");
  cli.add_option("--token", token, "the join token (gpucloud admin host join-token NAME)");
  cli.set_version_flag("--version", GPUCLOUD_VERSION);
  CLI11_PARSE(cli, argc, argv);
  if (join_url.empty() != token.empty()) {
    std::fprintf(stderr, "gpucloud-agent: --join and --token go together\n");
    return 2;
  }
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%fZ %l %v", spdlog::pattern_time_type::utc);
  if (sodium_init() < 0) {
    std::fprintf(stderr, "gpucloud-agent: libsodium failed to initialise\n");
    return 1;
  }
  auto config = agentlink::load_agent_file(config_path);
  if (!config) {
    std::fprintf(stderr, "gpucloud-agent: configuration: %s\n", config.error().detail.c_str());
    return 2;
  }
  std::error_code ec;
  config->data_dir = fs::absolute(config->data_dir, ec).lexically_normal().string();
  fs::create_directories(config->data_dir, ec);
  const fs::path identity_dir = fs::path(config->data_dir) / "identity";
  const std::string host_name = config->hosts.front().name;

  asio::io_context io(1);
  std::optional<agentlink::AgentIdentity> identity;
  if (!join_url.empty()) {
    auto joined = run_until(io, agentlink::join_control_plane(io.get_executor(), join_url, token, host_name));
    if (!joined || !*joined) {
      std::fprintf(stderr, "gpucloud-agent: join: %s\n", joined ? (*joined).error().detail.c_str() : "did not finish");
      return 1;
    }
    if (auto s = agentlink::save_identity(identity_dir, **joined); !s) {
      std::fprintf(stderr, "gpucloud-agent: %s\n", s.error().detail.c_str());
      return 1;
    }
    std::printf("gpucloud-agent joined %s as host %s\n", join_url.c_str(), host_name.c_str());
    std::fflush(stdout);
    identity = std::move(**joined);
  } else {
    auto loaded = agentlink::load_identity(identity_dir);
    if (!loaded) {
      std::fprintf(stderr, "gpucloud-agent: %s\n", loaded.error().detail.c_str());
      return 1;
    }
    identity = std::move(*loaded);
  }
  if (identity->host != host_name) {
    std::fprintf(stderr, "gpucloud-agent: this agent joined as host %s; its config says host %s\n",
                 identity->host.c_str(), host_name.c_str());
    return 2;
  }
  auto id = installation_id(config->data_dir);
  if (!id) {
    std::fprintf(stderr, "gpucloud-agent: %s\n", id.error().detail.c_str());
    return 1;
  }
  auto stack = agent::build_agent_stack(io, *config, *id);
  if (!stack) {
    std::fprintf(stderr, "gpucloud-agent: %s\n", stack.error().detail.c_str());
    return 1;
  }
  agentlink::LinkClient link(io.get_executor(), *identity, identity_dir, *stack->agent, {});
  auto started = run_until(io, link.start());
  if (!started || !*started) {
    std::fprintf(stderr, "gpucloud-agent: %s\n", started ? (*started).error().detail.c_str() : "did not start");
    return 1;
  }
  agent::report_runtime_changes(*stack->runtime, *stack->agent);
  std::printf("gpucloud-agent serving host %s for %s\n", host_name.c_str(), identity->url.c_str());
  std::fflush(stdout);
  spdlog::info(R"({{"event":"agent_started","host":"{}","control_plane":"{}"}})", host_name, identity->url);

  asio::signal_set signals(io, SIGTERM, SIGINT);
  signals.async_wait([&](boost::system::error_code e, int signal) {
    if (e) return;
    spdlog::info(R"({{"event":"agent_stopping","signal":{}}})", signal);
    link.stop();
    stack->runtime->stop_watching();
    io.stop();  // containers keep running: the next start re-attaches
  });
  std::signal(SIGPIPE, SIG_IGN);
  io.run();
  spdlog::info("{}", R"({"event":"agent_stopped"})");
  return 0;
}

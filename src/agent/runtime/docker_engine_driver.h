#pragma once
// RuntimeDriver over the Docker Engine API (engine_client.h). Instances are long-lived
// containers with the isolation the spec asks for: never privileged, no added capabilities
// and NET_RAW, MKNOD, SETPCAP dropped,
// the engine's default seccomp profile, its own init (Init=true) running gpucloud's init
// script, CPU/memory/PID limits with no swap, /dev/shm sized to half the memory, no restart
// policy, a fixed address on the gpucloud bridge network (inter-container traffic off),
// NVIDIA_VISIBLE_DEVICES always set, GPUs only by device request.
#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "agent/runtime/engine_client.h"
#include "agent/runtime/runtime_driver.h"

namespace gpucloud::agent {

// The engine's default capabilities an instance does not keep (see plan_create for why).
inline constexpr std::array<std::string_view, 3> kDroppedCapabilities = {"NET_RAW", "MKNOD", "SETPCAP"};

class DockerEngineDriver final : public RuntimeDriver {
 public:
  struct Options {
    docker::EngineClient::Options engine;
    // Host path of scripts/instance-init/gpucloud-init.sh; bind-mounted read-only at
    // /.gpucloud/init. Empty: no init mount (then a spec must give its own command).
    std::string init_path;
    int host_cpus = 0;                  // 0: std::thread::hardware_concurrency()
    std::int64_t nofile_hard_limit = 0; // 0: this process's RLIMIT_NOFILE hard limit
    std::chrono::milliseconds exec_timeout{30'000};  // exec_capture
  };

  // The engine's container-create request for a spec, and what was capped on the way.
  // Pure (no engine involved), public for tests.
  struct CreatePlan {
    boost::json::value body;
    CreatedContainer adjusted;  // id empty
  };

  DockerEngineDriver(boost::asio::any_io_executor executor, Options options);

  Result<CreatePlan> plan_create(const ContainerSpec& spec) const;
  docker::EngineClient& engine() { return engine_; }

  boost::asio::awaitable<Status> ping() override;
  boost::asio::awaitable<Result<DriverInfo>> fingerprint() override;
  boost::asio::awaitable<Result<NetworkInfo>> ensure_network(NetworkSpec spec) override;
  boost::asio::awaitable<Status> remove_network(std::string name) override;
  boost::asio::awaitable<Result<bool>> image_present(std::string ref) override;
  boost::asio::awaitable<Result<std::optional<ImageInfo>>> image_inspect(std::string ref) override;
  boost::asio::awaitable<Result<std::vector<std::string>>> list_images(std::map<std::string, std::string> labels) override;
  boost::asio::awaitable<Status> pull_image(std::string ref, std::chrono::milliseconds timeout) override;
  boost::asio::awaitable<Result<CreatedContainer>> create(ContainerSpec spec) override;
  boost::asio::awaitable<Status> start(std::string id) override;
  boost::asio::awaitable<Status> stop(std::string id, std::chrono::seconds grace) override;
  boost::asio::awaitable<Status> remove(std::string id) override;
  boost::asio::awaitable<Result<ContainerStatus>> inspect(std::string id) override;
  boost::asio::awaitable<Result<std::vector<ContainerStatus>>> list(
      std::map<std::string, std::string> label_filter) override;
  boost::asio::awaitable<Result<ContainerStatus>> recover(DriverState state) override;
  boost::asio::awaitable<Result<ContainerStatus>> wait(std::string id,
                                                        std::chrono::milliseconds timeout) override;
  boost::asio::awaitable<Result<std::string>> logs(std::string id, int tail) override;
  boost::asio::awaitable<Result<std::int64_t>> system_disk_used(std::string id) override;
  bool reports_events() const override { return true; }
  // GET /events filtered to containers with these labels and the actions a reconcile cares
  // about (start, die, oom, destroy).
  boost::asio::awaitable<Status> watch_events(std::map<std::string, std::string> labels,
                                              std::function<void(EngineEvent)> on_event,
                                              std::function<void()> connected) override;
  // One line of the engine's event stream; nothing when it is not a container event.
  static std::optional<EngineEvent> parse_event(std::string_view line);
  boost::asio::awaitable<Result<ExecResult>> exec_run(std::string id, std::vector<std::string> argv,
                                                      std::chrono::milliseconds timeout) override;
  boost::asio::awaitable<Result<std::string>> exec_capture(std::string id,
                                                           std::vector<std::string> argv) override;
  boost::asio::awaitable<Result<std::unique_ptr<TerminalSession>>> exec_tty(
      std::string id, std::vector<std::string> argv, int rows, int cols,
      std::vector<std::string> env) override;
  boost::asio::awaitable<Result<std::string>> commit(std::string id, std::string repo,
                                                     std::string tag,
                                                     std::map<std::string, std::string> labels) override;
  boost::asio::awaitable<Status> remove_image(std::string ref) override;
  boost::asio::awaitable<Result<double>> update(std::string id, double cpus,
                                                std::int64_t memory_bytes) override;
  boost::asio::awaitable<Result<std::string>> flatten(
      std::string id, std::string repo, std::string tag,
      std::map<std::string, std::string> labels) override;

  // Save-image's parts (image_saver.h): POST pause/unpause, GET changes, the container's own
  // files on the host (overlay2's upper dir, btrfs's subvolume), its base's config and layers,
  // POST /images/load streamed.
  boost::asio::awaitable<Status> pause(std::string id) override;
  boost::asio::awaitable<Status> unpause(std::string id) override;
  boost::asio::awaitable<Result<std::vector<FileChange>>> changes(std::string id) override;
  boost::asio::awaitable<Result<ContainerLayerDir>> layer_dir(std::string id) override;
  boost::asio::awaitable<Result<SaveBase>> save_base(std::string id, std::map<std::string, std::string> labels) override;
  boost::asio::awaitable<Result<std::string>> load_image(BodySource source, std::chrono::milliseconds timeout) override;

  // The `changes` (Dockerfile instructions) an import needs to carry an image config:
  // ENV, CMD, ENTRYPOINT, WORKDIR, USER, LABEL. Pure, public for tests.
  static std::vector<std::string> import_changes(const boost::json::object& image_config);

 private:
  // The CPUs a limit of `cpus` becomes on this host (the engine refuses more than it has).
  double capped_cpus(double cpus) const;
  // The config of the image container `id` was created from, with `labels` merged in and no
  // per-container label (installation, instance, holder, save); `for_commit`: the
  // container's own per-container labels given empty (the engine's commit merges them in).
  boost::asio::awaitable<Result<boost::json::object>> parent_config(
      std::string id, std::map<std::string, std::string> labels, bool for_commit);

  docker::EngineClient engine_;
  Options options_;
  boost::asio::thread_pool blocking_{1};  // reads off the event loop (system_disk_used's btrfs fallback)
};

}  // namespace gpucloud::agent

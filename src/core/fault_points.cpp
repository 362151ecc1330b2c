#include "core/fault_points.h"

#include <algorithm>
#include <atomic>
#include <utility>
#include <csignal>
#include <cstdlib>
#include <string>
#include <unistd.h>

namespace gpucloud {
namespace {

constexpr std::string_view kKnown[] = {
    // control plane (server/handlers/instance_routes.cpp, instances/lifecycle.cpp)
    "create.after_reservation_commit",
    "create.after_engine",
    "start.after_engine",
    "stop.before_state_commit",
    "release.before_state_commit",
    // agent (agent/instance_runtime.cpp, InstanceRuntime::ensure)
    "agent.ensure.after_record_saved",
    "agent.ensure.after_container_create",
    "agent.ensure.before_firewall_apply",
    "agent.ensure.after_firewall_apply",
    "rebuild.after_commit",
    // save-image (agent/image_saver.cpp): the container paused, no layer read yet; the image
    // loaded, its sizes not reported yet
    "agent.image_save.while_paused",
    "agent.image_save.after_load",
    // its fallback (commit, clean, flatten): the raw commit (secrets and all) exists, no cleaner
    // yet; the cleaner ran, the clean image not made yet
    "agent.image_save.after_raw_commit",
    "agent.image_save.after_clean",
    // network holders (agent/instance_runtime.cpp)
    "agent.holder.after_create",            // a pool holder created, not started, in no pool or record
    "agent.ensure.after_holder_recorded",   // the holder taken and in the instance's record, no container yet
    "agent.holder.repair.after_holder_start",  // a dead holder started again, its instance not restarted yet
    // data disks (disks/disk_service.cpp, server/handlers/disk_routes.cpp)
    "disk.after_create_commit",
    "disk.after_agent",
    "disk.destroy.before_state_commit",
    "snapshot.after_agent",
    //   after an action's commit (attach, detach, grow, delete, restore), before DiskService acts
    "disk.before_converge",
    //   the recycle bin's purge committed `deleting`, no disk.remove sent yet
    "disk.purge.after_sweep_commit",
    // data disks on the agent (agent/disk_runtime.cpp, agent/disks/loop_ext4_driver.cpp)
    "agent.disk.create.before_rename",      // the image made under .tmp/, not in place yet
    "agent.disk.grow.before_resize2fs",     // the image file (and loop device) bigger, ext4 not yet
    "agent.disk.snapshot.after_copy",       // copied under .tmp/ while frozen, not thawed or renamed yet
    "agent.disk.remove.after_tombstone",    // the tombstone written, the image still there
    "agent.disk.attach.after_mount",        // mounted on the host for a start, no container bound yet
    "agent.disk.detach.before_unmount",     // the container stopped, the host mount not removed yet
    // billing (billing/meters.cpp): inside a settlement, its ledger entries written, the meters not yet
    "billing.settle.after_ledger_insert",
    // arrears (policy/account_enforcement.cpp): an instance's stop at zero written, not committed
    "policy.arrears.after_stop",
};

const char* armed_name() {
  static const char* armed = std::getenv("GPUCLOUD_FAULT_POINT");
  return armed && *armed ? armed : nullptr;
}

// GPUCLOUD_PAUSE_POINT: the process stops itself (SIGSTOP) the first time it reaches that
// point, as a process paused or cut off from the database mid-work would (issue 27's fencing
// test); the test sends SIGCONT.
const char* paused_name() {
  static const char* armed = std::getenv("GPUCLOUD_PAUSE_POINT");
  return armed && *armed ? armed : nullptr;
}

void say(const std::string& line) {
  // write(2), not stdio: unbuffered, so the line is on disk before the signal.
  for (std::size_t done = 0; done < line.size();) {
    ssize_t n = ::write(STDERR_FILENO, line.data() + done, line.size() - done);
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace

std::span<const std::string_view> known_fault_points() { return kKnown; }

Status check_armed_fault_point() {
  for (const auto& [variable, armed] : {std::pair{"GPUCLOUD_FAULT_POINT", armed_name()},
                                        std::pair{"GPUCLOUD_PAUSE_POINT", paused_name()}}) {
    if (!armed) continue;
    if (std::find(std::begin(kKnown), std::end(kKnown), std::string_view(armed)) != std::end(kKnown)) continue;
    std::string known;
    for (auto k : kKnown) known += (known.empty() ? "" : ", ") + std::string(k);
    return fail(ErrorCode::invalid_argument,
                std::string(variable) + ": '" + armed + "' is not a fault point (known: " + known + ")");
  }
  return {};
}

void fault_point(std::string_view name) {
  if (const char* paused = paused_name(); paused && name == paused) {
    static std::atomic<bool> fired{false};
    if (!fired.exchange(true)) {
      say("pause point " + std::string(name) + ": stopping with SIGSTOP\n");
      ::kill(::getpid(), SIGSTOP);
      say("pause point " + std::string(name) + ": continued\n");
    }
  }
  const char* armed = armed_name();
  if (!armed || name != armed) return;
  say("fault point " + std::string(name) + ": killing with SIGKILL\n");
  ::kill(::getpid(), SIGKILL);
}

}  // namespace gpucloud

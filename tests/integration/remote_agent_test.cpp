// Remote agents (issue 26) through the real daemon, real gpucloud-agent processes and the
// real engine: each agent runs in a network namespace of its own (entered with nsenter, so
// only its network differs: it still sees the engine's socket and the cgroups), joined to the
// control plane's namespace by a veth pair, so every byte of each link crosses a real path
// that a test can cut.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <gtest/gtest.h>

#include "core/unique_temp_dir.h"
#include "support/capabilities.h"
#include "support/netns_client.h"
#include "support/postgres_test_db.h"
#include "support/proxy_clients.h"
#include "support/test_daemon.h"
#include "support/test_resources.h"
#include "support/wait.h"
#include "support/web_terminal_client.h"

extern char** environ;

namespace gpucloud::testing {
namespace {
namespace json = boost::json;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string shell_out(const std::string& cmd) {
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    ::pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

// One gpucloud-agent process in `netns`, its data directory and its log under `dir`.
class AgentProcess {
 public:
  AgentProcess(std::string name, std::string netns, fs::path dir, const std::string& port_range,
               const std::string& public_address = "")
      : name_(std::move(name)), netns_(std::move(netns)), dir_(std::move(dir)) {
    fs::create_directories(dir_ / "data");
    // The installation id is chosen here, so what the agent makes is on the lease before it exists.
    id_ = unique_name("ag", 10);
    for (char& c : id_) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::ofstream(dir_ / "data" / "installation-id") << id_ << "\n";
    lease_.add("containers-label", "gpucloud.installation=" + id_);
    lease_.add("network", "gpucloud-" + id_);
    lease_.add("disk-dir", (dir_ / "data").string());
    std::ofstream(dir_ / "agent.toml") << "data_dir = \"" << (dir_ / "data").string() << "\"\n"
                                       << "[host]\nname = \"" << name_ << "\"\nzone = \"zone-a\"\ncpu = 8\n"
                                       << "memory_gib = 16\nport_range = \"" << port_range << "\"\n"
                                       << (public_address.empty() ? "" : "public_address = \"" + public_address + "\"\n")
                                       << "simulated_gpus = [ { model = \"RTX 4090\", memory_gib = 24, count = 1 } ]\n"
                                       << "[agent]\nnetwork_pool_size = 0\n";
  }
  ~AgentProcess() {
    stop();
    lease_.clean();
  }
  const std::string& name() const { return name_; }
  const std::string& installation() const { return id_; }
  std::string log() const { return read_text(dir_ / "agent.log"); }

  // Starts it (joining first when `join_url` is given); returns at once.
  void start(const std::string& join_url = "", const std::string& token = "") {
    std::vector<std::string> args = {"/usr/bin/nsenter", "--net=/run/netns/" + netns_, "--",
                                     GPUCLOUD_BIN_DIR "/gpucloud-agent", "--config", (dir_ / "agent.toml").string()};
    if (!join_url.empty()) args.insert(args.end(), {"--join", join_url, "--token", token});
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    const std::string log = (dir_ / "agent.log").string();
    posix_spawn_file_actions_addopen(&files, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&files, 1, 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ASSERT_EQ(::posix_spawn(&pid_, argv[0], &files, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&files);
  }
  // The exit status of an agent expected to end by itself (a refused join), or -1.
  int wait_exit(std::chrono::milliseconds timeout) {
    int status = -1;
    wait_until([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, timeout, "gpucloud-agent to exit");
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  void kill9() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    int status = 0;
    if (!wait_until([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, 20s, "gpucloud-agent to stop"))
      ::kill(pid_, SIGKILL), ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  std::string name_, netns_, id_;
  fs::path dir_;
  pid_t pid_ = -1;
  ResourceLease lease_;
};

std::string control_plane_config(int agents_port, const std::vector<std::string>& names, const std::string& ports) {
  std::string san;
  for (const auto& n : names) san += (san.empty() ? "\"" : ", \"") + n + "\"";
  // A short silence makes a host unreachable here (30 s by default), so the test is quick; the
  // in-process host has no GPUs: GPU instances land on the remote hosts.
  return R"(
[agents]
listen = "0.0.0.0:)" + std::to_string(agents_port) + R"("
server_names = [)" + san + R"(]
unreachable_after = "12s"
heartbeat_interval = "3s"
reconnect_grace = "10s"

[[hosts]]
name = "node-1"
cpu = 8
memory_gib = 16
port_range = ")" + ports + R"("
simulated_gpus = []

[[offers]]
gpu_model = "RTX 4090"
cpu_per_gpu = 2
memory_gib_per_gpu = 2
price_per_gpu_hour = 198
)";
}

std::string host_state(const TestDaemon& d, const std::string& admin, const std::string& name) {
  auto hosts = d.get("/api/v1/admin/hosts", admin).json();
  for (const auto& h : hosts.at("items").as_array())
    if (h.at("name").as_string() == name) return std::string(h.at("state").as_string());
  return "";
}

std::string join_token(TestDaemon& d, const std::string& admin, const std::string& host) {
  auto made = d.post("/api/v1/admin/hosts/join-token", json::object{{"host", host}}, admin);
  EXPECT_EQ(made.status, 201) << made.body;
  return made.status == 201 ? std::string(made.json().at("token").as_string()) : "";
}

// The engine's own record of when the instance's container last started.
std::string started_at(const std::string& installation, const std::string& instance_id) {
  return shell_out("docker inspect -f '{{.State.StartedAt}}' gpucloud-" + installation + "-" + instance_id + " 2>&1");
}

struct Fleet {
  std::string subnet = subnet_prefix();
  std::vector<std::unique_ptr<ClientHost>> nets;
  std::vector<std::unique_ptr<AgentProcess>> agents;
};

// One remote host and its control plane: a namespace of its own, gpucloudd listening for
// agents at the port block's first port (its in-process node-1 on ports +10..+39), and the
// host's agent (ports +40..+89) joined and ready. Destroyed agent first, then the daemon.
struct OneRemoteHost {
  // false, saying why, when a step failed (call from the test body: it ASSERTs on the result).
  bool start(const std::string& host) {
    fleet.nets.push_back(ClientHost::make(fleet.subnet, 0, &why));
    if (!fleet.nets.back()) return false;
    block = port_block();
    d = std::make_unique<TestDaemon>(DaemonOptions{
        .config_toml = control_plane_config(block, {fleet.nets[0]->host_ip()},
                                            std::to_string(block + 10) + "-" + std::to_string(block + 39))});
    d->start();
    admin = d->admin_token();
    agent = std::make_unique<AgentProcess>(host, fleet.nets[0]->netns(), fs::path(d->dir()) / "agents" / host,
                                           std::to_string(block + 40) + "-" + std::to_string(block + 89));
    agent->start("https://" + fleet.nets[0]->host_ip() + ":" + std::to_string(block), join_token(*d, admin, host));
    if (!wait_until([&] { return host_state(*d, admin, host) == "ready"; }, 60s, host + " ready")) {
      why = host + " did not become ready:\n" + agent->log();
      return false;
    }
    return true;
  }
  const std::string& netns() const { return fleet.nets[0]->netns(); }

  Fleet fleet;
  int block = 0;
  std::string why, admin;
  std::unique_ptr<TestDaemon> d;
  std::unique_ptr<AgentProcess> agent;
};

// Releases instance `id` through `d` and waits until it is released.
void release_and_wait(TestDaemon& d, const std::string& id, const std::string& token) {
  ASSERT_EQ(d.request("DELETE", "/api/v1/instances/" + id, "", token).status, 202);
  EXPECT_TRUE(wait_until([&] { return d.get("/api/v1/instances/" + id, token).json().at("state") == "released"; }, 60s,
                         "released"));
}

TEST(RemoteAgentTest, DOCKER_ROOT_SLOW_ThreeAgentsInTheirOwnNamespacesSurviveAKillAndACutLink) {
  GPUCLOUD_NEED_ENGINE();
  GPUCLOUD_NEED("nsenter", fs::exists("/usr/bin/nsenter"), "needs nsenter (util-linux)");
  Fleet fleet;
  for (int i = 0; i < 3; ++i) {
    std::string why;
    fleet.nets.push_back(ClientHost::make(fleet.subnet, i, &why));
    ASSERT_NE(fleet.nets.back(), nullptr) << why;
  }
  const int block = port_block();
  std::vector<std::string> names;
  for (const auto& n : fleet.nets) names.push_back(n->host_ip());
  TestDaemon d({.config_toml = control_plane_config(block, names, std::to_string(block + 10) + "-" +
                                                                      std::to_string(block + 39)),
                .test_clock = true});
  d.start();
  const std::string admin = d.admin_token();
  const fs::path root = fs::path(d.dir()) / "agents";
  for (int i = 0; i < 3; ++i) {
    const std::string name = "remote-" + std::string(1, static_cast<char>('a' + i));
    const int first = block + 40 + i * 50;
    fleet.agents.push_back(std::make_unique<AgentProcess>(name, fleet.nets[i]->netns(), root / name,
                                                           std::to_string(first) + "-" + std::to_string(first + 49),
                                                           fleet.nets[i]->ip()));
    const std::string url = "https://" + fleet.nets[i]->host_ip() + ":" + std::to_string(block);
    fleet.agents.back()->start(url, join_token(d, admin, name));
  }
  for (const auto& a : fleet.agents)
    ASSERT_TRUE(wait_until([&] { return host_state(d, admin, a->name()) == "ready"; }, 60s, a->name() + " ready"))
        << a->log();
  {
    // Who serves each: the remote ones by agents at their namespace's address, with a certificate.
    auto hosts = d.get("/api/v1/admin/hosts", admin).json();
    for (const auto& h : hosts.at("items").as_array()) {
      const auto& agent = h.at("agent").as_object();
      if (h.at("name") == "node-1") {
        EXPECT_EQ(agent.at("kind"), "in_process");
        continue;
      }
      EXPECT_EQ(agent.at("kind"), "remote") << h;
      EXPECT_TRUE(agent.at("address").is_string()) << h;
      EXPECT_TRUE(agent.at("certificate_expires_at").is_string()) << h;
    }
  }

  // Three one-GPU instances: one on each remote host (node-1 has none).
  const std::string user = d.register_and_login("remote-user");
  std::map<std::string, std::string> on_host;  // host -> instance id
  for (int i = 0; i < 3; ++i) {
    const std::string name = "gpu-" + std::to_string(i);
    auto r = d.post("/api/v1/instances", json::object{{"name", name}, {"gpu_model", "RTX 4090"}, {"gpu_count", 1}}, user);
    ASSERT_EQ(r.status, 202) << r.body;
    auto running = d.wait_for_state(name, "running", user);
    on_host[std::string(running.at("host").as_string())] = std::string(running.at("id").as_string());
    // Users SSH to the remote host's own address (its [host] public_address), not the control plane's.
    const int quad = running.at("host").as_string().back() - 'a';
    ASSERT_TRUE(running.at("ssh").is_object()) << running;
    EXPECT_EQ(running.at("ssh").at("host").as_string(), fleet.nets[quad]->ip()) << running;
  }
  ASSERT_EQ(on_host.size(), 3u) << "one instance per remote host";
  std::map<std::string, std::string> started;  // host -> the container's StartedAt
  for (const auto& a : fleet.agents) {
    started[a->name()] = started_at(a->installation(), on_host.at(a->name()));
    ASSERT_NE(started[a->name()].find("T"), std::string::npos) << started[a->name()];
  }

  // kill -9 one agent: its host turns unreachable (12 s of silence here), its instance keeps
  // its state, marked; the others keep serving (a stop and a start on remote-b).
  AgentProcess& killed = *fleet.agents[0];
  killed.kill9();
  const auto killed_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(wait_until([&] { return host_state(d, admin, killed.name()) == "unreachable"; }, 40s,
                         killed.name() + " unreachable"));
  EXPECT_LT(std::chrono::steady_clock::now() - killed_at, 40s);
  {
    auto lost = d.get("/api/v1/instances/gpu-0", user).json();
    const std::string id(lost.at("id").as_string());
    auto instance = d.get("/api/v1/instances/" + on_host.at(killed.name()), user).json();
    EXPECT_EQ(instance.at("state"), "running") << instance;
    EXPECT_TRUE(instance.at("host_unreachable").as_bool()) << instance;
  }
  EXPECT_EQ(host_state(d, admin, "remote-b"), "ready");
  // An hour passes (the hourly settlement with it): nothing is charged for the lost host's
  // instance past its last heartbeat, while the one on remote-c pays the hour.
  auto charged = [&](const std::string& host) {
    return d.get("/api/v1/instances/" + on_host.at(host), user).json().at("charged").as_int64();
  };
  ASSERT_EQ(d.request("POST", "/api/v1/admin/clock", R"({"advance_seconds": 3600})", admin).status, 200);
  EXPECT_LT(charged(killed.name()), 20) << "198 per GPU-hour: nothing past the last heartbeat";
  EXPECT_GE(charged("remote-c"), 198);
  {
    const std::string on_b = on_host.at("remote-b");
    ASSERT_EQ(d.post("/api/v1/instances/" + on_b + "/stop", json::object{}, user).status, 202);
    ASSERT_TRUE(wait_until([&] { return d.get("/api/v1/instances/" + on_b, user).json().at("state") == "stopped"; }, 60s,
                           "the instance on remote-b stopped"));
    ASSERT_EQ(d.post("/api/v1/instances/" + on_b + "/start", json::object{}, user).status, 202);
    ASSERT_TRUE(wait_until([&] { return d.get("/api/v1/instances/" + on_b, user).json().at("state") == "running"; }, 60s,
                           "the instance on remote-b running again"));
  }
  // The agent comes back (no token: its identity is on disk); its instance was never restarted.
  killed.start();
  ASSERT_TRUE(wait_until([&] { return host_state(d, admin, killed.name()) == "ready"; }, 60s, killed.name() + " back"))
      << killed.log();
  EXPECT_EQ(started_at(killed.installation(), on_host.at(killed.name())), started[killed.name()])
      << "a restarted agent re-attaches; it never restarts a container";
  EXPECT_FALSE(d.get("/api/v1/instances/" + on_host.at(killed.name()), user).json().at("host_unreachable").as_bool());
  // Its container ran through the outage (its own StartedAt says so): the hour is settled now,
  // once, like remote-c's.
  EXPECT_GE(charged(killed.name()), 198);
  EXPECT_LE(charged(killed.name()), charged("remote-c") + 5);
  ASSERT_EQ(d.request("POST", "/api/v1/admin/clock", R"({"advance_seconds": 3600})", admin).status, 200);
  EXPECT_GE(charged(killed.name()), 2 * 198);
  EXPECT_LE(charged(killed.name()), charged("remote-c") + 5) << "the outage was charged once";

  // Cut remote-c's link (its veth down) past the silence, then mend it: the same. Unreachable
  // within 40 s; an hour passing meanwhile charges its instance nothing while remote-a's pays;
  // back, it was never restarted and the hour is charged once (as much as remote-a's).
  AgentProcess& cut = *fleet.agents[2];
  const auto cut_at = std::chrono::steady_clock::now();
  ASSERT_EQ(std::system(("ip link set " + fleet.nets[2]->host_interface() + " down").c_str()), 0);
  ASSERT_TRUE(wait_until([&] { return host_state(d, admin, cut.name()) == "unreachable"; }, 40s, cut.name() + " cut off"));
  const std::int64_t a_before = charged(killed.name()), c_before = charged(cut.name());
  ASSERT_EQ(d.request("POST", "/api/v1/admin/clock", R"({"advance_seconds": 3600})", admin).status, 200);
  EXPECT_LT(charged(cut.name()) - c_before, 20) << "nothing charged while cut off";
  EXPECT_GE(charged(killed.name()) - a_before, 198);
  // (Held past the silence only: a full minute put the test past CI's per-test timeout.)
  (void)cut_at;
  ASSERT_EQ(std::system(("ip link set " + fleet.nets[2]->host_interface() + " up").c_str()), 0);
  ASSERT_TRUE(wait_until([&] { return host_state(d, admin, cut.name()) == "ready"; }, 60s, cut.name() + " back"))
      << cut.log();
  EXPECT_EQ(started_at(cut.installation(), on_host.at(cut.name())), started[cut.name()]);
  EXPECT_GE(charged(cut.name()) - c_before, charged(killed.name()) - a_before - 5) << "the hour, once it answers";
  EXPECT_LE(charged(cut.name()) - c_before, charged(killed.name()) - a_before + 5) << "and only once";

  // A command over each link still works: every instance is released.
  for (const auto& [host, id] : on_host) ASSERT_EQ(d.request("DELETE", "/api/v1/instances/" + id, "", user).status, 202);
  for (const auto& [host, id] : on_host)
    ASSERT_TRUE(wait_until([&, &id = id] { return d.get("/api/v1/instances/" + id, user).json().at("state") == "released"; }, 60s,
                           id + " released"));
  for (auto& a : fleet.agents) a->stop();
  EXPECT_EQ(d.log().find("gcjoin1."), std::string::npos) << "no join token in the control plane's log";
  for (const auto& a : fleet.agents) EXPECT_EQ(a->log().find("gcjoin1."), std::string::npos) << a->log();
}

// Refusals: a reused token, a forged one, a token pinning another CA, and a revoked
// certificate (its live link closed, its next dial refused); and between them a certificate
// renewed at two-thirds of its life.
TEST(RemoteAgentTest, DOCKER_ROOT_ReusedForgedAndForeignTokensAndARevokedCertificateAreRefused) {
  GPUCLOUD_NEED_ENGINE();
  GPUCLOUD_NEED("nsenter", fs::exists("/usr/bin/nsenter"), "needs nsenter (util-linux)");
  Fleet fleet;
  std::string why;
  fleet.nets.push_back(ClientHost::make(fleet.subnet, 0, &why));
  ASSERT_NE(fleet.nets.back(), nullptr) << why;
  const int block = port_block();
  TestDaemon d({.config_toml = control_plane_config(block, {fleet.nets[0]->host_ip()},
                                                    std::to_string(block + 10) + "-" + std::to_string(block + 39))});
  d.start();
  const std::string admin = d.admin_token();
  const std::string url = "https://" + fleet.nets[0]->host_ip() + ":" + std::to_string(block);
  const fs::path root = fs::path(d.dir()) / "agents";
  const std::string ns = fleet.nets[0]->netns();

  const std::string token = join_token(d, admin, "remote-r");
  AgentProcess first("remote-r", ns, root / "first", std::to_string(block + 40) + "-" + std::to_string(block + 89));
  first.start(url, token);
  ASSERT_TRUE(wait_until([&] { return host_state(d, admin, "remote-r") == "ready"; }, 60s, "remote-r ready")) << first.log();

  // The same token again: used.
  AgentProcess again("remote-r", ns, root / "again", std::to_string(block + 90) + "-" + std::to_string(block + 139));
  again.start(url, token);
  EXPECT_EQ(again.wait_exit(30s), 1) << again.log();
  EXPECT_NE(again.log().find("join token: used"), std::string::npos) << again.log();
  // A forged secret under a real id and fingerprint.
  const std::string other = join_token(d, admin, "remote-f");
  std::string forged = other.substr(0, other.rfind('.') + 1) + std::string(43, 'A');
  AgentProcess forger("remote-f", ns, root / "forger", std::to_string(block + 140) + "-" + std::to_string(block + 189));
  forger.start(url, forged);
  EXPECT_EQ(forger.wait_exit(30s), 1) << forger.log();
  EXPECT_NE(forger.log().find("join token: forged"), std::string::npos) << forger.log();
  // A token pinning another CA: the agent refuses to send it at all.
  std::string foreign = other;
  foreign.replace(std::string("gcjoin1.").size(), 64, std::string(64, '0'));
  AgentProcess wary("remote-f", ns, root / "wary", std::to_string(block + 140) + "-" + std::to_string(block + 189));
  wary.start(url, foreign);
  EXPECT_EQ(wary.wait_exit(30s), 1) << wary.log();
  EXPECT_NE(wary.log().find("did not present the CA this token pins"), std::string::npos) << wary.log();
  // The real token still works afterwards: the refusals used nothing up.
  EXPECT_EQ(d.post("/api/v1/admin/hosts/join-token", json::object{{"host", "remote-f"}}, admin).status, 201);

  // Renewal: an agent whose certificate is past two-thirds of its life (its link.json made to
  // say it was issued 25 days ago and ends in 5) gets a new key and certificate before it
  // dials, and links with them.
  {
    const fs::path identity = root / "first" / "data" / "identity";
    const std::string old_certificate = read_text(identity / "certificate.pem");
    const std::string old_key = read_text(identity / "key.pem");
    first.stop();
    auto link = json::parse(read_text(identity / "link.json")).as_object();
    const std::int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                                 std::chrono::system_clock::now().time_since_epoch()).count();
    link["issued_at"] = now - 25 * 86400;
    link["not_after"] = now + 5 * 86400;
    std::ofstream(identity / "link.json", std::ios::trunc) << json::serialize(link);
    first.start();
    ASSERT_TRUE(wait_until([&] { return first.log().find("\"event\":\"certificate_renewed\"") != std::string::npos; },
                           30s, "the agent renewed its certificate"))
        << first.log();
    ASSERT_TRUE(wait_until([&] { return first.log().find("\"event\":\"link_up\"", first.log().find("certificate_renewed")) !=
                                        std::string::npos; },
                           30s, "a link with the new certificate"))
        << first.log();
    EXPECT_NE(read_text(identity / "certificate.pem"), old_certificate);
    EXPECT_NE(read_text(identity / "key.pem"), old_key) << "a new key, not only a new certificate";
    EXPECT_NE(d.log().find("\"event\":\"agent_certificate_renewed\",\"host\":\"remote-r\""), std::string::npos);
    EXPECT_EQ(host_state(d, admin, "remote-r"), "ready");
  }

  // Revoked: the live link closes and the agent's next dials are refused; the host goes unreachable.
  auto revoked = d.post("/api/v1/admin/hosts/remote-r/revoke-certificate", json::object{}, admin);
  ASSERT_EQ(revoked.status, 200) << revoked.body;
  ASSERT_TRUE(wait_until([&] { return first.log().find("revoked or expired") != std::string::npos; }, 30s,
                         "the agent told its certificate is revoked"))
      << first.log();
  ASSERT_TRUE(wait_until([&] { return host_state(d, admin, "remote-r") == "unreachable"; }, 40s, "remote-r unreachable"));
  EXPECT_NE(d.log().find("\"event\":\"agent_link_refused\",\"host\":\"remote-r\""), std::string::npos);
  first.stop();
}

// The web terminal of an instance on a remote host: the browser's WebSocket reaches the
// control plane, whose hub carries the shell's bytes as a stream on the agent's link
// (terminal_* messages), and the agent opens the shell on its own engine. Only the owner.
TEST(RemoteAgentTest, DOCKER_ROOT_TheWebTerminalReachesAnInstanceOnARemoteHost) {
  GPUCLOUD_NEED_ENGINE();
  GPUCLOUD_NEED("nsenter", fs::exists("/usr/bin/nsenter"), "needs nsenter (util-linux)");
  OneRemoteHost site;
  ASSERT_TRUE(site.start("remote-t")) << site.why;
  TestDaemon& d = *site.d;
  AgentProcess& agent = *site.agent;
  const std::string& admin = site.admin;

  // A GPU instance: it lands on the remote host (node-1 has no GPUs).
  const std::string owner = d.register_and_login("term-owner");
  auto made = d.post("/api/v1/instances", json::object{{"name", "gpu-term"}, {"gpu_model", "RTX 4090"}, {"gpu_count", 1}},
                     owner);
  ASSERT_EQ(made.status, 202) << made.body;
  auto running = d.wait_for_state("gpu-term", "running", owner);
  ASSERT_EQ(running.at("host"), "remote-t") << running;
  const std::string id(running.at("id").as_string());
  const std::string path = "/api/v1/instances/gpu-term/terminal";

  {
    WebTerminalClient shell;
    shell.connect(d.port(), path, owner);
    shell.send("echo $((6*7))\n");
    // "42\r\n" is the output's alone: the echoed command line ends "7))\r\n".
    EXPECT_TRUE(shell.wait_for("42\r\n")) << shell.seen << "\n" << agent.log();
    shell.resize(120, 40);
    shell.send("stty size\n");
    EXPECT_TRUE(shell.wait_for("40 120")) << shell.seen;
    // Bulk output (1.5 MB, past the control plane's 1 MiB bound) arrives whole: the window of
    // acknowledged output paces the shell instead of dropping the stream.
    const auto began = std::chrono::steady_clock::now();
    shell.send("seq 1 200000; echo done-$((1+1))\n");
    EXPECT_TRUE(shell.wait_for("done-2", 60s)) << shell.seen.size() << " bytes seen";
    EXPECT_NE(shell.seen.find("\r\n199999\r\n200000\r\n"), std::string::npos);
    std::printf("remote terminal: seq 1 200000 (1.5 MB with CRs) took %lld ms\n",
                static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                           std::chrono::steady_clock::now() - began)
                                           .count()));
    shell.send("exit\n");
    EXPECT_EQ(shell.read_until_closed(), 1000) << "the shell's exit closes the socket normally: " << shell.seen;
  }

  // Another user: 404, the upgrade refused.
  const std::string other = d.register_and_login("term-other");
  EXPECT_EQ(d.get(path, other).status, 404);
  EXPECT_EQ(d.get("/api/v1/instances/" + id + "/terminal", other).status, 404);
  {
    WebTerminalClient intruder;
    EXPECT_THROW(intruder.connect(d.port(), path, other), boost::system::system_error);
  }

  // A dropped tab (TCP closed, no close frame): the shell's exec on the remote engine ends.
  const std::string container = "gpucloud-" + agent.installation() + "-" + id;
  auto execs_running = [&] {
    auto inspect = json::parse(docker_api("GET", "/containers/" + container + "/json"));
    int count = 0;
    if (const auto* ids = inspect.as_object().if_contains("ExecIDs"); ids && ids->is_array())
      for (const auto& e : ids->as_array())
        count += json::parse(docker_api("GET", "/exec/" + std::string(e.as_string()) + "/json")).at("Running").as_bool();
    return count;
  };
  {
    WebTerminalClient tab;
    tab.connect(d.port(), path, owner);
    tab.send("echo tab-$((40+2))\n");
    ASSERT_TRUE(tab.wait_for("tab-42")) << tab.seen;
    EXPECT_GE(execs_running(), 1);
    boost::beast::get_lowest_layer(tab.ws).socket().close();
  }
  EXPECT_TRUE(wait_until([&] { return execs_running() == 0; }, 15s, "the remote shell's exec to end", 200ms));

  // The agent dies with a terminal open: its link's end ends the stream and the browser's
  // socket closes instead of hanging; while it is away a terminal says so and closes.
  {
    WebTerminalClient shell;
    shell.connect(d.port(), path, owner);
    shell.send("echo up-$((1+1))\n");
    ASSERT_TRUE(shell.wait_for("up-2")) << shell.seen;
    agent.kill9();
    const auto killed_at = std::chrono::steady_clock::now();
    EXPECT_EQ(shell.read_until_closed(10s), 1000) << shell.seen;
    EXPECT_LT(std::chrono::steady_clock::now() - killed_at, 10s);
  }
  {
    WebTerminalClient shell;
    shell.connect(d.port(), path, owner);
    EXPECT_TRUE(shell.wait_for("agent is not connected")) << shell.seen;
    EXPECT_EQ(shell.read_until_closed(10s), 1000) << shell.seen;
  }
  agent.start();
  ASSERT_TRUE(wait_until([&] { return host_state(d, admin, "remote-t") == "ready"; }, 60s, "remote-t back"))
      << agent.log();

  release_and_wait(d, id, owner);
  agent.stop();
}

// The web-service and Jupyter proxies of an instance on a remote host: the control plane asks
// the host's agent for a connection to the instance's port (connection_open), which the agent
// makes from inside the instance's network namespace (its own namespace has no route to the
// engine's bridge here, as a control plane has none to a remote host's), and HTTP, a streamed
// answer and Jupyter's WebSocket ride that stream on the agent's link. The agent's death
// ends it: 503 while it is away, served again once it is back.
TEST(RemoteAgentTest, DOCKER_ROOT_TheProxiesReachAnInstanceOnARemoteHostOverTheAgentsLink) {
  GPUCLOUD_NEED_ENGINE();
  GPUCLOUD_NEED("nsenter", fs::exists("/usr/bin/nsenter"), "needs nsenter (util-linux)");
  OneRemoteHost site;
  ASSERT_TRUE(site.start("remote-p")) << site.why;
  TestDaemon& d = *site.d;
  AgentProcess& agent = *site.agent;
  const std::string& admin = site.admin;

  const std::string owner = d.register_and_login("web-owner");
  auto made = d.post("/api/v1/instances",
                     json::object{{"name", "gpu-web"}, {"gpu_model", "RTX 4090"}, {"gpu_count", 1}, {"ports", json::array{22, 8000}}},
                     owner);
  ASSERT_EQ(made.status, 202) << made.body;
  auto running = d.wait_for_state("gpu-web", "running", owner, 90s);
  ASSERT_EQ(running.at("host"), "remote-p") << running;
  const std::string id(running.at("id").as_string());
  const std::string container = "gpucloud-" + agent.installation() + "-" + id;
  exec_detached(container,
                "mkdir -p /srv/site && echo remote-$((6*7)) > /srv/site/hello.txt && "
                "head -c 6000000 /dev/zero | tr '\\0' 'y' > /srv/site/big.txt && "
                "cd /srv/site && exec python3 -m http.server 8000 >/tmp/http.log 2>&1");
  const std::string base = "/api/v1/instances/gpu-web/proxy/8000";
  HttpResult page;
  ASSERT_TRUE(wait_until(
      [&] {
        page = d.get(base + "/hello.txt", owner);
        return page.status == 200;
      },
      30s, "the remote instance's web server through the proxy", 200ms))
      << page.status << " " << page.body << "\n" << agent.log();
  EXPECT_EQ(page.body, "remote-42\n");
  // Past the whole-answer limit: streamed through the link, every byte.
  auto big = d.get(base + "/big.txt", owner);
  EXPECT_EQ(big.status, 200);
  EXPECT_EQ(big.body.size(), 6000000u);
  EXPECT_EQ(big.body.find_first_not_of('y'), std::string::npos);
  EXPECT_EQ(d.get(base + "/missing.txt", owner).status, 404);
  {  // What one small request costs over the link (for docs/benchmarks.md; not asserted).
    std::vector<double> ms;
    for (int i = 0; i < 40; ++i) {
      const auto began = std::chrono::steady_clock::now();
      EXPECT_EQ(d.get(base + "/hello.txt", owner).status, 200);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - began).count());
    }
    std::sort(ms.begin(), ms.end());
    std::printf("remote proxy: GET of 10 bytes, 40 requests: p50 %.2f ms, p95 %.2f ms\n", ms[20], ms[38]);
  }
  const std::string other = d.register_and_login("web-other");
  EXPECT_EQ(d.get(base + "/hello.txt", other).status, 404);
  // The agent opened those connections; its namespace could not have reached the service.
  EXPECT_NE(agent.log().find(R"("event":"agent_connection_opened")"), std::string::npos) << agent.log();
  const std::string ipv4(running.at("ipv4").as_string());
  EXPECT_FALSE(http_get(site.netns(), ipv4, 8000, 2s).has_value())
      << "the agent's namespace reaches " << ipv4 << " directly: the test proves nothing about the link";

  // Jupyter through the link: its API, a kernel and a cell over the kernel's WebSocket.
  EXPECT_EQ(jupyter_six_times_seven(d, id, owner), "42");

  // The agent dies: the proxy answers 503 at once, and serves again once it is back.
  agent.kill9();
  HttpResult away;
  EXPECT_TRUE(wait_until(
      [&] {
        away = d.get(base + "/hello.txt", owner);
        return away.status == 503;
      },
      10s, "503 while the agent is away", 200ms))
      << away.status << " " << away.body;
  EXPECT_NE(away.body.find("not connected"), std::string::npos) << away.body;
  agent.start();
  ASSERT_TRUE(wait_until([&] { return host_state(d, admin, "remote-p") == "ready"; }, 60s, "remote-p back"))
      << agent.log();
  EXPECT_TRUE(wait_until([&] { return d.get(base + "/hello.txt", owner).status == 200; }, 20s, "served again", 200ms));

  release_and_wait(d, id, owner);
  agent.stop();
}

// Replicas (issue 27) on one PostgreSQL store and one data directory: the remote agent's link
// is held by replica A; a proxied request that reaches replica B goes to A's own proxy (the
// caller's token, the relay header, never relayed twice), which carries it over the link:
// HTTP and Jupyter's WebSocket alike.
TEST(RemoteAgentTest, DOCKER_ROOT_POSTGRES_AProxyThroughAnotherReplicaGoesThroughTheOneHoldingTheLink) {
  GPUCLOUD_NEED_ENGINE();
  GPUCLOUD_NEED_POSTGRES();
  GPUCLOUD_NEED("nsenter", fs::exists("/usr/bin/nsenter"), "needs nsenter (util-linux)");
  PostgresTestDatabase pg;
  ASSERT_TRUE(pg.ok());
  struct Shared {
    fs::path path = unique_temp_dir("gpucloud-replicas");
    ~Shared() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  } shared;
  Fleet fleet;
  std::string why;
  fleet.nets.push_back(ClientHost::make(fleet.subnet, 0, &why));
  ASSERT_NE(fleet.nets.back(), nullptr) << why;
  const int block = port_block();
  const std::string store = "[store]\nurl = \"" + pg.url() + "\"\npassword_file = \"" + test_postgres()->password_file + "\"\n";
  const std::string node_ports = std::to_string(block + 10) + "-" + std::to_string(block + 39);
  DaemonOptions a_options, b_options;
  a_options.config_toml = control_plane_config(block, {fleet.nets[0]->host_ip()}, node_ports) + store;
  a_options.data_dir = (shared.path / "data").string();
  b_options.config_toml = control_plane_config(block + 90, {fleet.nets[0]->host_ip()}, node_ports) + store;
  b_options.data_dir = a_options.data_dir;
  TestDaemon a(a_options), b(b_options);
  a.start();
  b.start();
  const std::string admin = a.admin_token();
  AgentProcess agent("remote-r", fleet.nets[0]->netns(), fs::path(a.dir()) / "agents" / "remote-r",
                     std::to_string(block + 40) + "-" + std::to_string(block + 89));
  agent.start("https://" + fleet.nets[0]->host_ip() + ":" + std::to_string(block), join_token(a, admin, "remote-r"));
  ASSERT_TRUE(wait_until([&] { return host_state(b, admin, "remote-r") == "ready"; }, 60s, "remote-r ready"))
      << agent.log();

  const std::string owner = a.register_and_login("relay-owner");
  auto made = a.post("/api/v1/instances",
                     json::object{{"name", "gpu-relay"}, {"gpu_model", "RTX 4090"}, {"gpu_count", 1}, {"ports", json::array{22, 8000}}},
                     owner);
  ASSERT_EQ(made.status, 202) << made.body;
  auto running = a.wait_for_state("gpu-relay", "running", owner, 90s);
  ASSERT_EQ(running.at("host"), "remote-r") << running;
  const std::string id(running.at("id").as_string());
  exec_detached("gpucloud-" + agent.installation() + "-" + id,
                "mkdir -p /srv/site && echo relayed-$((6*7)) > /srv/site/hello.txt && "
                "cd /srv/site && exec python3 -m http.server 8000 >/tmp/http.log 2>&1");
  const std::string base = "/api/v1/instances/gpu-relay/proxy/8000";
  HttpResult page;
  ASSERT_TRUE(wait_until(
      [&] {
        page = b.get(base + "/hello.txt", owner);
        return page.status == 200;
      },
      30s, "the instance's web server through replica B", 200ms))
      << page.status << " " << page.body << "\nB:\n" << b.log();
  EXPECT_EQ(page.body, "relayed-42\n");
  EXPECT_NE(b.log().find(R"("event":"proxy_relayed")"), std::string::npos) << b.log();
  EXPECT_EQ(a.log().find(R"("event":"proxy_relayed")"), std::string::npos) << "A holds the link: it serves, never relays";
  EXPECT_EQ(b.get(base + "/hello.txt", a.register_and_login("relay-other")).status, 404);

  // Jupyter through B: its API, a kernel and a cell over the kernel's WebSocket.
  EXPECT_EQ(jupyter_six_times_seven(b, id, owner), "42");
  release_and_wait(a, id, owner);
  agent.stop();
}

// The control plane dies inside a create and inside a stop on a remote host (after the
// agent did the work, before the state was committed): after its restart each finishes, once
// (one container, never made again; stopped once), over the agent's redialled link.
TEST(RemoteAgentTest, DOCKER_ROOT_AControlPlaneKilledInsideACreateAndAStopFinishesEachOnce) {
  GPUCLOUD_NEED_ENGINE();
  GPUCLOUD_NEED("nsenter", fs::exists("/usr/bin/nsenter"), "needs nsenter (util-linux)");
  OneRemoteHost site;
  ASSERT_TRUE(site.start("remote-k")) << site.why;
  TestDaemon& d = *site.d;
  AgentProcess& agent = *site.agent;
  const std::string& admin = site.admin;
  const std::string user = d.register_and_login("restart-user");
  const std::string label = "label=gpucloud.installation=" + agent.installation();
  auto containers = [&](const std::string& id) {
    return shell_out("docker ps -a -q --filter " + label + " --filter name=gpucloud-" + agent.installation() + "-" + id +
                     " | wc -l");
  };

  d.stop();
  d.start("create.after_engine");
  ASSERT_TRUE(wait_until([&] { return host_state(d, admin, "remote-k") == "ready"; }, 60s, "remote-k back"));
  auto created = d.post("/api/v1/instances", json::object{{"name", "kept"}, {"gpu_model", "RTX 4090"}, {"gpu_count", 1}},
                        d.login("restart-user", "password-123"));
  ASSERT_TRUE(d.killed_at("create.after_engine")) << d.log();
  d.start();
  const std::string token = d.login("restart-user", "password-123");
  auto running = d.wait_for_state("kept", "running", token, 90s);
  const std::string id(running.at("id").as_string());
  EXPECT_EQ(running.at("host"), "remote-k");
  EXPECT_EQ(containers(id), "1") << "made once";
  const std::string first_start = started_at(agent.installation(), id);

  d.stop();
  d.start("stop.before_state_commit");
  ASSERT_TRUE(wait_until([&] { return host_state(d, admin, "remote-k") == "ready"; }, 60s, "remote-k back again"));
  (void)d.post("/api/v1/instances/kept/stop", json::object{}, d.login("restart-user", "password-123"));
  ASSERT_TRUE(d.killed_at("stop.before_state_commit")) << d.log();
  d.start();
  auto stopped = d.wait_for_state("kept", "stopped", d.login("restart-user", "password-123"), 90s);
  EXPECT_EQ(containers(id), "1");
  EXPECT_EQ(shell_out("docker inspect -f '{{.State.Running}}' gpucloud-" + agent.installation() + "-" + id), "false");
  EXPECT_EQ(started_at(agent.installation(), id), first_start) << "stopped, never started again";
  ASSERT_EQ(d.request("DELETE", "/api/v1/instances/kept", "", d.login("restart-user", "password-123")).status, 202);
  d.wait_for_state("kept", "released", d.login("restart-user", "password-123"), 90s);
  EXPECT_EQ(containers(id), "0");
  (void)created;
  (void)user;
  agent.stop();
}

}  // namespace
}  // namespace gpucloud::testing

#include "support/test_daemon.h"

#include "support/postgres_test_db.h"

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace gpucloud::testing {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace fs = std::filesystem;

boost::json::value HttpResult::json() const {
  boost::system::error_code ec;
  auto v = boost::json::parse(body, ec);
  return ec ? boost::json::value() : v;
}

std::string HttpResult::code() const {
  auto v = json();
  if (v.is_object() && v.as_object().contains("code") && v.as_object().at("code").is_string())
    return std::string(v.as_object().at("code").as_string());
  return "";
}

HttpResult http_request(int port, const std::string& method, const std::string& target, const std::string& body,
                        const std::map<std::string, std::string>& headers) {
  asio::io_context io;
  beast::tcp_stream stream(io);
  stream.expires_after(std::chrono::seconds(60));
  stream.connect(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)));
  http::request<http::string_body> req{http::string_to_verb(method), target, 11};
  if (req.method() == http::verb::unknown) req.method_string(method);
  req.set(http::field::host, "127.0.0.1");
  bool has_type = false;
  for (const auto& [k, v] : headers) {
    req.set(k, v);
    if (k == "Content-Type" || k == "content-type") has_type = true;
  }
  if (!body.empty() && !has_type) req.set(http::field::content_type, "application/json");
  req.body() = body;
  req.keep_alive(false);
  req.prepare_payload();
  http::write(stream, req);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 * 1024 * 1024);
  http::read(stream, buffer, parser);
  HttpResult out;
  out.status = parser.get().result_int();
  out.body = parser.get().body();
  for (const auto& f : parser.get()) {
    std::string name(f.name_string());
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out.headers[name] = std::string(f.value());
  }
  boost::system::error_code ec;
  stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ec);
  return out;
}

std::string shell(const std::string& command) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

std::string docker_api(const std::string& method, const std::string& path, const std::string& body) {
  std::string cmd = "curl -s --max-time 30 --unix-socket /var/run/docker.sock -X " + method + " 'http://x/v1.41" + path + "'";
  if (!body.empty()) cmd += " -H 'Content-Type: application/json' --data-binary @- <<'GPUCLOUD_EOF'\n" + body + "\nGPUCLOUD_EOF";
  return shell(cmd);
}

bool docker_available() {
  static int cached = -1;
  if (cached < 0) {
    cached = shell("curl -s --max-time 3 --unix-socket /var/run/docker.sock http://x/_ping") == "OK" &&
             shell("curl -s -o /dev/null -w '%{http_code}' --unix-socket /var/run/docker.sock "
                   "http://x/v1.41/images/gpucloud/base:bookworm-2/json") == "200";
  }
  return cached == 1;
}

std::string TestDaemon::installation_id() const {
  std::optional<store::PgConnectOptions> pg;
  if (postgres_) pg = postgres_->options();
  // A test that names a PostgreSQL database in its config ([store] url: replicas, a migrated
  // store) is on the tests' server, whose password the tests have. Without this such a
  // daemon had no lease, and its containers, network and table outlived the test.
  if (const auto store = options_.config_toml.find("[store]"); !pg && store != std::string::npos) {
    const auto key = options_.config_toml.find("url = \"", store);
    const auto end = key == std::string::npos ? key : options_.config_toml.find('"', key + 7);
    const auto& server = test_postgres();
    const std::string url = end == std::string::npos ? "" : options_.config_toml.substr(key + 7, end - key - 7);
    if (url.rfind("postgres", 0) == 0 && server) pg = store::PgConnectOptions{url, server->password, "gpucloud-tests"};
  }
  if (pg) {
    auto db = store::connect_postgres(*pg);
    if (!db) return "";
    auto row = (*db)->one("SELECT value FROM meta WHERE key = 'installation_id'");
    return row && *row ? (*row)->text(0) : "";
  }
  std::string db = data_dir_ + "/gpucloud.db";
  if (!fs::exists(db)) return "";
  std::string out = shell("sqlite3 '" + db + "' \"SELECT value FROM meta WHERE key = 'installation_id'\" 2>/dev/null");
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

boost::json::value TestDaemon::wait_for_state(const std::string& name, const std::string& state, const std::string& token,
                                              std::chrono::milliseconds timeout) const {
  boost::json::value last;
  int last_status = 0;
  std::string seen, terminal;
  auto reached = [&] {
    auto r = get("/api/v1/instances/" + name, token);
    last_status = r.status;
    last = r.json();
    if (r.status != 200 || !last.is_object() || !last.as_object().contains("state")) return false;
    seen = std::string(last.at("state").as_string());
    if (seen == state) return true;
    if (seen == "error" || seen == "released") terminal = seen;
    return !terminal.empty();
  };
  auto waited = wait_until(reached, timeout, "instance " + name + " to be " + state, std::chrono::milliseconds(100));
  if (waited && terminal.empty()) return last;
  std::string reason = "(none)";
  if (last.is_object() && last.as_object().contains("state_reason") && last.at("state_reason").is_string())
    reason = std::string(last.at("state_reason").as_string());
  if (!terminal.empty())
    ADD_FAILURE() << "instance " << name << " reached terminal state " << terminal << " while waiting for " << state
                  << "; reason: " << reason << "\n" << boost::json::serialize(last);
  else
    ADD_FAILURE() << waited.message() << "; last answer HTTP " << last_status << ", state "
                  << (seen.empty() ? "(none)" : seen) << ", reason: " << reason << "\n" << boost::json::serialize(last);
  return last;
}

std::string random_suffix() {
  static std::mt19937_64 rng(std::random_device{}());
  std::string s;
  for (int i = 0; i < 8; ++i) s += static_cast<char>('a' + rng() % 26);
  return s;
}

namespace {

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
                                  strsignal(WTERMSIG(status)) + ")";
  return "stopped oddly (status " + std::to_string(status) + ")";
}

// Lines a sanitizer (or the C++ runtime) writes when it finds a bug in the daemon.
constexpr const char* kCrashMarkers[] = {"ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                                         "SUMMARY: UndefinedBehaviorSanitizer", "WARNING: ThreadSanitizer",
                                         "terminate called"};

std::string tail_lines(const std::string& text, int lines) {
  std::size_t pos = text.size();
  if (pos > 0 && text[pos - 1] == '\n') --pos;
  for (int n = 0; n < lines; ++n) {
    auto nl = pos == 0 ? std::string::npos : text.rfind('\n', pos - 1);
    if (nl == std::string::npos) return text;
    pos = nl;
  }
  return text.substr(pos + 1);
}

}  // namespace

TestDaemon::TestDaemon(DaemonOptions options) : options_(std::move(options)) {
  dir_ = (fs::temp_directory_path() / ("gpucloud-it-" + random_suffix())).string();
  data_dir_ = options_.data_dir.empty() ? dir_ + "/data" : options_.data_dir;
  fs::create_directories(dir_);
  fs::create_directories(data_dir_);
  if (options_.signup_credit > 0 && options_.config_toml.find("[billing]") == std::string::npos)
    options_.config_toml += "\n[billing]\nsignup_credit = " + std::to_string(options_.signup_credit) + "\n";
  if (!options_.system_disk_filesystems && options_.config_toml.find("system_disk_filesystems") == std::string::npos) {
    const std::string key = "system_disk_filesystems = false\n";
    const auto agent = options_.config_toml.find("[agent]\n");
    if (agent != std::string::npos) options_.config_toml.insert(agent + 8, key);
    else options_.config_toml += "\n[agent]\n" + key;
  }
  const char* backend = std::getenv("GPUCLOUD_TEST_STORE");
  if (backend && std::string_view(backend) == "postgres" && options_.config_toml.find("[store]") == std::string::npos) {
    postgres_ = std::make_unique<PostgresTestDatabase>();
    if (!postgres_->ok()) throw std::runtime_error("GPUCLOUD_TEST_STORE=postgres: the tests' PostgreSQL does not answer");
    options_.config_toml += "\n[store]\nurl = \"" + postgres_->url() + "\"\npassword_file = \"" +
                            test_postgres()->password_file + "\"\n";
  }
  if (!options_.config_toml.empty()) {
    std::ofstream(dir_ + "/gpucloud.toml") << options_.config_toml;
  }
}

std::string TestDaemon::log_path(int generation) const { return dir_ + "/daemon-" + std::to_string(generation) + ".log"; }

void TestDaemon::note_problem(const std::string& what) { problems_.push_back(what); }

int TestDaemon::wait_exit(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return -1;
  int status = 0;
  bool exited = wait_until([&] { return waitpid(pid_, &status, WNOHANG) == pid_; }, timeout, "gpucloudd to exit",
                           std::chrono::milliseconds(10));
  if (!exited) return -1;
  pid_ = -1;
  return status;
}

TestDaemon::~TestDaemon() {
  if (pid_ > 0) {
    int status = 0;
    // A killed daemon's main thread shows as a zombie while its other threads still exit, and
    // waitpid reports it only after them: a zombie leader is waited for, not sent SIGTERM.
    std::string stat;
    std::getline(std::ifstream("/proc/" + std::to_string(pid_) + "/stat"), stat);
    auto close_paren = stat.rfind(')');
    const bool zombie = close_paren != std::string::npos && close_paren + 2 < stat.size() && stat[close_paren + 2] == 'Z';
    if (waitpid(pid_, &status, zombie ? 0 : WNOHANG) == pid_) {
      note_problem("gpucloudd (pid " + std::to_string(pid_) + ") died during the test: it " + describe_status(status));
      pid_ = -1;
    } else {
      stop();
    }
  }
  std::string logs = log();
  for (const char* marker : kCrashMarkers)
    if (logs.find(marker) != std::string::npos) note_problem(std::string("the daemon's log reports '") + marker + "'");
  // Remove what this installation made on the engine and in nftables (only its own).
  if (lease_) {
    lease_->clean();
    lease_.reset();
  }
  const bool keep = !problems_.empty() || ::testing::Test::HasFailure() || std::getenv("GPUCLOUD_KEEP_TEST_DIRS");
  if (!problems_.empty()) {
    std::string all;
    for (const auto& p : problems_) all += "  - " + p + "\n";
    ADD_FAILURE() << "gpucloudd misbehaved:\n" << all << "logs kept in " << dir_ << " (latest: " << log_path(generation_ - 1)
                  << "); its last lines:\n" << tail_lines(logs, 40);
  } else if (::testing::Test::HasFailure()) {
    std::cerr << "gpucloudd logs kept in " << dir_ << "\n";
  }
  std::error_code ec;
  if (!keep) fs::remove_all(dir_, ec);
}

void TestDaemon::start(const std::string& armed_fault_point) {
  std::string out_path = log_path(generation_++);
  // A test that rewrote the config (a price, a host taken out) keeps its daemon on PostgreSQL.
  if (postgres_) {
    std::ifstream in(dir_ + "/gpucloud.toml");
    std::stringstream text;
    text << in.rdbuf();
    if (text.str().find("[store]") == std::string::npos)
      std::ofstream(dir_ + "/gpucloud.toml", std::ios::app) << "\n[store]\nurl = \"" << postgres_->url()
                                                            << "\"\npassword_file = \"" << test_postgres()->password_file
                                                            << "\"\n";
  }
  armed_ = armed_fault_point;
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    int fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 1);
    dup2(fd, 2);
    setenv("GPUCLOUD_ADMIN_PASSWORD", options_.admin_password.c_str(), 1);
    for (const auto& [k, v] : options_.env) setenv(k.c_str(), v.c_str(), 1);
    if (!armed_fault_point.empty()) setenv("GPUCLOUD_FAULT_POINT", armed_fault_point.c_str(), 1);
    std::vector<std::string> args = {GPUCLOUD_BIN_DIR "/gpucloudd", "--listen", "127.0.0.1:0", "--data-dir", data_dir_};
    if (!options_.config_toml.empty()) {
      args.push_back("--config");
      args.push_back(dir_ + "/gpucloud.toml");
    }
    if (options_.test_clock) args.push_back("--test-clock");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  bool exited = false;
  auto listening = [&] {
    std::ifstream in(out_path);
    std::string line;
    while (std::getline(in, line)) {
      auto pos = line.find("gpucloudd listening on ");
      if (pos != std::string::npos) {
        port_ = std::stoi(line.substr(line.rfind(':') + 1));
        return true;
      }
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      exited = true;
      return true;
    }
    return false;
  };
  if (!wait_until(listening, std::chrono::seconds(30), "gpucloudd to listen", std::chrono::milliseconds(20)))
    throw std::runtime_error("gpucloudd did not start in 30 s:\n" + log());
  if (exited) throw std::runtime_error("gpucloudd exited at start:\n" + log());
  if (!lease_) {
    // The first start made the installation: record what it will make so that a sweep
    // removes it if this test process dies before its teardown.
    std::string id = installation_id();
    if (!id.empty()) {
      lease_ = std::make_unique<ResourceLease>();
      lease_->add("containers-label", "gpucloud.installation=" + id);
      lease_->add("images-label", "gpucloud.installation=" + id);
      lease_->add("images-label", "gpucloud.image-installation=" + id);  // its saved images
      lease_->add("network", "gpucloud-" + id);
      lease_->add("nft-table", "ip gpucloud-" + id);
      lease_->add("iptables-comment", "DOCKER-USER gpucloud:gpucloud-" + id);
      // Its data disks stay mounted (and their loop devices attached) after it stops, as a
      // real host's do across restarts; a directory of its own only (replicas share one).
      if (options_.data_dir.empty()) lease_->add("mounts-under", data_dir_ + "/agent");
    }
  }
}

int TestDaemon::stop() {
  if (pid_ <= 0) return -1;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    pid_ = -1;
    note_problem("gpucloudd had died before it was stopped: it " + describe_status(status));
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  kill(pid_, SIGTERM);
  // The daemon gives in-flight requests 10 s (HttpServer::shutdown), then exits.
  status = wait_exit(std::chrono::seconds(20));
  if (status == -1) {
    note_problem("gpucloudd did not exit within 20 s of SIGTERM (killed with SIGKILL)");
    kill9();
    return 128 + SIGKILL;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) note_problem("on SIGTERM gpucloudd " + describe_status(status));
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int TestDaemon::wait_for_expected_exit(std::chrono::milliseconds timeout) {
  const int status = wait_exit(timeout);
  if (status == -1) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void TestDaemon::kill9() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

::testing::AssertionResult TestDaemon::killed_at(const std::string& point, std::chrono::milliseconds timeout) {
  if (armed_ != point)
    return ::testing::AssertionFailure() << "the daemon was started with fault point '" << armed_ << "', not '" << point << "'";
  if (pid_ <= 0) return ::testing::AssertionFailure() << "no daemon is running";
  int status = wait_exit(timeout);
  if (status == -1)
    return ::testing::AssertionFailure() << "fault point " << point << " did not fire within " << timeout.count()
                                         << " ms (the daemon is still running); log tail:\n"
                                         << tail_lines(log(), 20);
  std::stringstream ss;
  ss << std::ifstream(log_path(generation_ - 1)).rdbuf();
  const std::string line = "fault point " + point + ": killing with SIGKILL";
  if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
    return ::testing::AssertionFailure() << "the daemon armed with " << point << " " << describe_status(status)
                                         << ", not by SIGKILL; log tail:\n" << tail_lines(ss.str(), 20);
  if (ss.str().find(line) == std::string::npos)
    return ::testing::AssertionFailure() << "the daemon died of SIGKILL but its log lacks '" << line << "'; log tail:\n"
                                         << tail_lines(ss.str(), 20);
  return ::testing::AssertionSuccess();
}

std::string TestDaemon::log() const {
  std::string all;
  for (int g = 0; g < generation_; ++g) {
    std::ifstream in(dir_ + "/daemon-" + std::to_string(g) + ".log");
    std::stringstream ss;
    ss << in.rdbuf();
    all += ss.str();
  }
  return all;
}

HttpResult TestDaemon::request(const std::string& method, const std::string& path, const std::string& body,
                               const std::string& token, const std::map<std::string, std::string>& headers) const {
  auto h = headers;
  if (!token.empty()) h["Authorization"] = "Bearer " + token;
  return http_request(port_, method, path, body, h);
}

std::string TestDaemon::login(const std::string& username, const std::string& password) const {
  auto r = post("/api/v1/auth/login", {{"username", username}, {"password", password}});
  if (r.status != 200) throw std::runtime_error("login " + username + " failed: " + r.body);
  return std::string(r.json().at("token").as_string());
}

std::string TestDaemon::register_and_login(const std::string& username, const std::string& password) {
  auto r = post("/api/v1/auth/register", {{"username", username}, {"password", password}});
  if (r.status != 201) throw std::runtime_error("register " + username + " failed: " + r.body);
  return login(username, password);
}

CliResult run_cli(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                  const std::string& stdin_text) {
  auto dir = fs::temp_directory_path() / ("gpucloud-cli-" + random_suffix());
  fs::create_directories(dir);
  std::string in_path = (dir / "in").string(), out_path = (dir / "out").string(), err_path = (dir / "err").string();
  std::ofstream(in_path) << stdin_text;
  pid_t pid = fork();
  if (pid == 0) {
    int in = ::open(in_path.c_str(), O_RDONLY);
    int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(in, 0);
    dup2(out, 1);
    dup2(err, 2);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<std::string> all = {GPUCLOUD_BIN_DIR "/gpucloud"};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::stringstream o, e;
  o << std::ifstream(out_path).rdbuf();
  e << std::ifstream(err_path).rdbuf();
  r.out = o.str();
  r.err = e.str();
  std::error_code ec;
  fs::remove_all(dir, ec);
  return r;
}

}  // namespace gpucloud::testing

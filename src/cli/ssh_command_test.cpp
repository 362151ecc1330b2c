// gpucloud ssh / ssh-config (host key pinning) and events (Server-Sent Events).
#include "cli/ssh_command.h"

#include <sys/stat.h>
#include <unistd.h>

#include <deque>
#include <fstream>
#include <map>
#include <sstream>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "cli/event_stream.h"

namespace gpucloud::cli {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

constexpr const char* kKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB3k+/x=";

json::value instance(const std::string& name, const std::string& state, bool with_ssh = true,
                     bool with_key = true) {
  json::object inst{{"id", "i-" + name + "1"}, {"name", name}, {"state", state}};
  if (with_ssh) {
    inst["ssh"] = json::object{{"host", "10.0.0.5"},
                               {"port", 30022},
                               {"user", "root"},
                               {"command", "ssh -p 30022 root@10.0.0.5"},
                               {"host_key", with_key ? json::value(std::string(kKey) + " root@x")
                                                     : json::value(nullptr)}};
  } else {
    inst["ssh"] = nullptr;
  }
  return inst;
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// --- pure pieces --------------------------------------------------------------------------

TEST(SshTarget, ReadsARunningInstance) {
  auto t = ssh_target(instance("train", "running"));
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_EQ(t->id, "i-train1");
  EXPECT_EQ(t->host, "10.0.0.5");
  EXPECT_EQ(t->port, 30022);
  EXPECT_EQ(t->user, "root");
  EXPECT_EQ(t->host_key, kKey);  // the comment is dropped
}

TEST(SshTarget, RefusesWhatCannotBeReached) {
  auto stopped = ssh_target(instance("train", "stopped"));
  ASSERT_FALSE(stopped);
  EXPECT_EQ(stopped.error().exit_code, kExitRefused);
  EXPECT_NE(stopped.error().message.find("instance train is stopped"), std::string::npos);
  EXPECT_NE(stopped.error().message.find("gpucloud start train"), std::string::npos);

  auto no_ssh = ssh_target(instance("train", "running", false));
  ASSERT_FALSE(no_ssh);
  EXPECT_NE(no_ssh.error().message.find("no SSH access"), std::string::npos);

  auto no_key = ssh_target(instance("train", "running", true, false));
  ASSERT_FALSE(no_key);
  EXPECT_NE(no_key.error().message.find("no SSH host key yet"), std::string::npos);

  // Nothing from the server reaches ssh's command line or known_hosts unchecked.
  auto bad_host = instance("train", "running");
  bad_host.at("ssh").as_object()["host"] = "-oProxyCommand=evil";
  EXPECT_FALSE(ssh_target(bad_host));
  auto spaced = instance("train", "running");
  spaced.at("ssh").as_object()["host"] = "a b";
  EXPECT_FALSE(ssh_target(spaced));
  auto injected_key = instance("train", "running");
  injected_key.at("ssh").as_object()["host_key"] = "ssh-ed25519 AAAA\n* ssh-rsa BBBB";
  EXPECT_FALSE(ssh_target(injected_key));
  auto bad_port = instance("train", "running");
  bad_port.at("ssh").as_object()["port"] = 70000;
  EXPECT_FALSE(ssh_target(bad_port));
  auto bad_id = instance("train", "running");
  bad_id.as_object()["id"] = "i-1 x";
  EXPECT_FALSE(ssh_target(bad_id));
}

TEST(SshArgv, PinsTheHostKey) {
  auto t = ssh_target(instance("train", "running"));
  ASSERT_TRUE(t);
  auto argv = ssh_argv(*t, "/cfg/gpucloud/known_hosts", std::nullopt, {});
  ASSERT_TRUE(argv);
  EXPECT_EQ(*argv, (std::vector<std::string>{
                       "ssh", "-p", "30022", "-o", "HostKeyAlias=gpucloud-i-train1", "-o",
                       "UserKnownHostsFile=/cfg/gpucloud/known_hosts", "-o",
                       "StrictHostKeyChecking=yes", "root@10.0.0.5"}));

  auto with_cmd = ssh_argv(*t, "/cfg/gpucloud/known_hosts", std::string("~/.ssh/id_x"),
                           {"nvidia-smi", "-L"});
  ASSERT_TRUE(with_cmd);
  const auto& v = *with_cmd;
  auto at = [&](const std::string& s) { return std::find(v.begin(), v.end(), s) - v.begin(); };
  EXPECT_EQ(v[at("-i") + 1], "~/.ssh/id_x");
  EXPECT_LT(at("-i"), at("root@10.0.0.5"));
  EXPECT_EQ(v[v.size() - 2], "nvidia-smi");
  EXPECT_EQ(v.back(), "-L");
  EXPECT_EQ(v[at("root@10.0.0.5") + 1], "nvidia-smi");
  for (const auto& arg : v) {
    EXPECT_EQ(arg.find("StrictHostKeyChecking=no"), std::string::npos) << arg;
    EXPECT_EQ(arg.find("accept-new"), std::string::npos) << arg;
  }
  EXPECT_TRUE(contains(v, "StrictHostKeyChecking=yes"));
}

TEST(SshArgv, QuotesPathsForSsh) {
  EXPECT_EQ(*ssh_path_value("/a/known_hosts"), "/a/known_hosts");
  EXPECT_EQ(*ssh_path_value("/my dir/known_hosts"), "\"/my dir/known_hosts\"");
  EXPECT_EQ(*ssh_path_value("/100%/kh"), "/100%%/kh");  // not a %-token
  EXPECT_FALSE(ssh_path_value("/a\"b/kh"));
  EXPECT_FALSE(ssh_path_value("/a\nb/kh"));
}

TEST(KnownHosts, ReplacesTheAliasLineAndKeepsOthers) {
  const std::string before =
      "# my hosts\n"
      "github.com ssh-ed25519 AAAAgithub\n"
      "gpucloud-i-a ssh-ed25519 AAAAold\n"
      "gpucloud-i-b ssh-rsa AAAAb\n"
      "@revoked gpucloud-i-a ssh-ed25519 AAAArevoked\n"
      "gpucloud-i-a,10.0.0.9 ssh-ed25519 AAAAold2\n"
      "gpucloud-i-ab ssh-ed25519 AAAAab\n"
      "\n";
  std::string after = update_known_hosts(before, {{"gpucloud-i-a", "ssh-ed25519 AAAAnew"}});
  EXPECT_EQ(after,
            "# my hosts\n"
            "github.com ssh-ed25519 AAAAgithub\n"
            "gpucloud-i-b ssh-rsa AAAAb\n"
            "gpucloud-i-ab ssh-ed25519 AAAAab\n"
            "\n"
            "gpucloud-i-a ssh-ed25519 AAAAnew\n");
  // Again with the same key: nothing changes.
  EXPECT_EQ(update_known_hosts(after, {{"gpucloud-i-a", "ssh-ed25519 AAAAnew"}}), after);
  // No trailing newline in the old file; two entries, the last one for an alias wins.
  EXPECT_EQ(update_known_hosts("x ssh-rsa AAAA", {{"gpucloud-i-c", "k1"}, {"gpucloud-i-d", "k2"},
                                                  {"gpucloud-i-c", "k3"}}),
            "x ssh-rsa AAAA\ngpucloud-i-d k2\ngpucloud-i-c k3\n");
  EXPECT_EQ(update_known_hosts("", {{"gpucloud-i-a", "k"}}), "gpucloud-i-a k\n");
}

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "gpucloud-ssh-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  static std::string read(const fs::path& p) {
    std::ifstream f(p);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  static unsigned mode(const fs::path& p) {
    struct stat st {};
    ::stat(p.c_str(), &st);
    return st.st_mode & 0777;
  }
  fs::path dir_;
};

using KnownHostsFile = TempDir;

TEST_F(KnownHostsFile, WritesPrivatelyAndUpdatesInPlace) {
  fs::path file = dir_ / "cfg" / "gpucloud" / "known_hosts";
  ASSERT_TRUE(write_known_hosts(file, {{"gpucloud-i-a", "ssh-ed25519 AAAA1"}}));
  EXPECT_EQ(mode(file), 0600u);
  EXPECT_EQ(mode(file.parent_path()), 0700u);
  ASSERT_TRUE(write_known_hosts(file, {{"gpucloud-i-b", "ssh-ed25519 BBBB"}}));
  ASSERT_TRUE(write_known_hosts(file, {{"gpucloud-i-a", "ssh-ed25519 AAAA2"}}));
  EXPECT_EQ(read(file), "gpucloud-i-b ssh-ed25519 BBBB\ngpucloud-i-a ssh-ed25519 AAAA2\n");
  // A file the user widened is narrowed again.
  ::chmod(file.c_str(), 0644);
  ASSERT_TRUE(write_known_hosts(file, {{"gpucloud-i-a", "ssh-ed25519 AAAA2"}}));
  EXPECT_EQ(mode(file), 0600u);
  for (const auto& entry : fs::directory_iterator(file.parent_path())) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos);
  }
}

TEST(KnownHostsPath, SitsBesideTheConfig) {
  auto path = known_hosts_path([](std::string_view name) -> std::optional<std::string> {
    if (name == "XDG_CONFIG_HOME") return "/x/cfg";
    if (name == "HOME") return "/home/u";
    return std::nullopt;
  });
  ASSERT_TRUE(path);
  EXPECT_EQ(*path, fs::path("/x/cfg/gpucloud/known_hosts"));
}

TEST(SshConfig, HostBlock) {
  auto t = ssh_target(instance("train", "running"));
  ASSERT_TRUE(t);
  auto block = ssh_config_block(*t, "/x/gpucloud/known_hosts", std::nullopt);
  ASSERT_TRUE(block);
  EXPECT_EQ(*block,
            "Host train\n"
            "  HostName 10.0.0.5\n"
            "  Port 30022\n"
            "  User root\n"
            "  HostKeyAlias gpucloud-i-train1\n"
            "  UserKnownHostsFile /x/gpucloud/known_hosts\n"
            "  StrictHostKeyChecking yes\n");
  auto with_id = ssh_config_block(*t, "/x/gpucloud/known_hosts", std::string("~/.ssh/id k"));
  ASSERT_TRUE(with_id);
  EXPECT_TRUE(with_id->ends_with("  StrictHostKeyChecking yes\n  IdentityFile \"~/.ssh/id k\"\n"));
}

// --- the SSE parser -----------------------------------------------------------------------

std::vector<SseEvent> parse_all(SseParser& parser, const std::vector<std::string>& chunks) {
  std::vector<SseEvent> events;
  for (const auto& c : chunks) {
    EXPECT_TRUE(parser.feed(c, [&](const SseEvent& e) { events.push_back(e); }));
  }
  return events;
}

TEST(SseParser, EventsWhateverTheChunking) {
  const std::string stream =
      ": connected\n\n"
      "id: 1\nevent: instance.created\ndata: {\"seq\":1}\n\n"
      ": heartbeat\n\n"
      "id: 2\r\nevent: instance.running\r\ndata: line one\r\ndata: line two\r\n\r\n"
      "id: 3\revent: x\rdata:no-space\r\r"
      "data\n\n";
  // Whole, byte by byte, and in every two-piece split (CR and LF apart included).
  std::vector<std::vector<std::string>> splits{{stream}};
  std::vector<std::string> bytes;
  for (char c : stream) bytes.emplace_back(1, c);
  splits.push_back(bytes);
  for (std::size_t cut = 1; cut < stream.size(); ++cut) {
    splits.push_back({stream.substr(0, cut), stream.substr(cut)});
  }
  for (const auto& chunks : splits) {
    SseParser parser;
    auto events = parse_all(parser, chunks);
    ASSERT_EQ(events.size(), 4u);
    EXPECT_EQ(events[0].id, "1");
    EXPECT_EQ(events[0].type, "instance.created");
    EXPECT_EQ(events[0].data, "{\"seq\":1}");
    EXPECT_EQ(events[1].id, "2");
    EXPECT_EQ(events[1].type, "instance.running");
    EXPECT_EQ(events[1].data, "line one\nline two");
    EXPECT_EQ(events[2].id, "3");
    EXPECT_EQ(events[2].type, "x");
    EXPECT_EQ(events[2].data, "no-space");
    // No id field: the last one carries over; no event field: "message"; an empty data line.
    EXPECT_EQ(events[3].id, "3");
    EXPECT_EQ(events[3].type, "message");
    EXPECT_EQ(events[3].data, "");
    EXPECT_EQ(parser.last_event_id(), "3");
  }
}

TEST(SseParser, IdCommitsAtDispatchOnly) {
  SseParser parser;
  std::vector<SseEvent> events;
  auto keep = [&](const SseEvent& e) { events.push_back(e); };
  parser.feed("id: 7\ndata: a\n\n", keep);
  EXPECT_EQ(parser.last_event_id(), "7");
  // An event cut off by a dropped connection does not move the resume point.
  parser.feed("id: 8\ndata: b\n", keep);
  EXPECT_EQ(parser.last_event_id(), "7");
  parser.reset();
  parser.feed("data: c\n\n", keep);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].data, "c");
  EXPECT_EQ(events[1].id, "7");
  // An id with no data is not an event, but it is a resume point.
  parser.feed("id: 9\n\n", keep);
  EXPECT_EQ(events.size(), 2u);
  EXPECT_EQ(parser.last_event_id(), "9");
  // Comments, unknown fields and retry.
  parser.feed(":hb\nfoo: bar\nretry: 2500\nretry: x\n\n", keep);
  EXPECT_EQ(events.size(), 2u);
  EXPECT_EQ(parser.retry_ms().value_or(-1), 2500);
  parser.set_last_event_id("42");
  EXPECT_EQ(parser.last_event_id(), "42");
}

TEST(SseParser, SkipsABomAndRefusesEndlessLines) {
  SseParser parser;
  std::vector<SseEvent> events;
  auto keep = [&](const SseEvent& e) { events.push_back(e); };
  EXPECT_TRUE(parser.feed("\xEF\xBB", keep));
  EXPECT_TRUE(parser.feed("\xBF" "data: x\n\n", keep));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data, "x");
  std::string big(SseParser::kMaxLine + 1, 'a');
  EXPECT_FALSE(parser.feed(big, keep));
  parser.reset();
  EXPECT_TRUE(parser.feed("data: y\n\n", keep));
  EXPECT_EQ(events.size(), 2u);
}

// --- the commands end to end on fakes -----------------------------------------------------

class CannedAnswerTransport : public HttpTransport {
 public:
  explicit CannedAnswerTransport(std::map<std::string, std::pair<int, std::string>>& answers,
                         std::vector<std::string>& seen)
      : answers_(answers), seen_(seen) {}
  Result<HttpResponse> send(const HttpRequest& request) override {
    seen_.push_back(request.method + " " + request.target);
    HttpResponse r;
    auto it = answers_.find(request.method + " " + request.target);
    if (it == answers_.end()) {
      r.status = 404;
      r.body = R"({"status":404,"code":"not_found","detail":"no such thing"})";
    } else {
      r.status = it->second.first;
      r.body = it->second.second;
    }
    r.content_type = r.status >= 400 ? "application/problem+json" : "application/json";
    return r;
  }

 private:
  std::map<std::string, std::pair<int, std::string>>& answers_;
  std::vector<std::string>& seen_;
};

struct StreamCall {
  std::vector<std::string> chunks;
  Result<HttpResponse> end;
};

class ConnectCommands : public TempDir {
 protected:
  int run(std::vector<std::string> args) {
    out_.str("");
    err_.str("");
    Deps deps;
    deps.in = &in_;
    deps.out = &out_;
    deps.err = &err_;
    deps.env = [this](std::string_view name) -> std::optional<std::string> {
      if (name == "XDG_CONFIG_HOME") return (dir_ / "cfg").string();
      if (name == "HOME") return (dir_ / "home").string();
      if (name == "GPUCLOUD_TOKEN") return "tok";
      return std::nullopt;
    };
    deps.connect = [this](const Endpoint&) {
      return std::make_unique<CannedAnswerTransport>(answers_, requests_);
    };
    deps.stdin_is_tty = [] { return false; };
    deps.stderr_is_tty = [] { return false; };
    deps.sleep = [this](std::chrono::milliseconds d) { sleeps_.push_back(d); };
    deps.now = [] { return std::chrono::steady_clock::time_point(); };
    deps.random_key = [] { return "k"; };
    deps.exec = [this](const std::vector<std::string>& argv) -> Result<int> {
      execs_.push_back(argv);
      return exec_status_;
    };
    deps.stream = [this](const Endpoint&, const HttpRequest& request,
                         const std::function<bool(std::string_view)>& on_data)
        -> Result<HttpResponse> {
      stream_requests_.push_back(request);
      if (streams_.empty()) {
        HttpResponse denied;
        denied.status = 401;
        denied.content_type = "application/problem+json";
        denied.body = R"({"status":401,"code":"unauthorized","detail":"token revoked"})";
        return denied;
      }
      StreamCall call = std::move(streams_.front());
      streams_.pop_front();
      for (const auto& c : call.chunks) {
        if (!on_data(c)) break;
      }
      return call.end;
    };
    args.insert(args.begin(), "gpucloud");
    return run_cli(args, deps);
  }
  void answer(const std::string& request, const json::value& body, int status = 200) {
    answers_[request] = {status, json::serialize(body)};
  }
  static HttpResponse sse_ok() {
    HttpResponse r;
    r.status = 200;
    r.content_type = "text/event-stream";
    return r;
  }
  fs::path known_hosts() const { return dir_ / "cfg" / "gpucloud" / "known_hosts"; }

  std::istringstream in_;
  std::ostringstream out_, err_;
  std::map<std::string, std::pair<int, std::string>> answers_;
  std::vector<std::string> requests_;
  std::vector<std::vector<std::string>> execs_;
  Result<int> exec_status_ = 0;
  std::deque<StreamCall> streams_;
  std::vector<HttpRequest> stream_requests_;
  std::vector<std::chrono::milliseconds> sleeps_;
};

TEST_F(ConnectCommands, SshPinsTheKeyAndExecs) {
  answer("GET /api/v1/instances/train", instance("train", "running"));
  ASSERT_EQ(run({"ssh", "train", "--", "ls", "-la", "--json"}), 0) << err_.str();
  ASSERT_EQ(execs_.size(), 1u);
  const auto& argv = execs_[0];
  EXPECT_EQ(argv[0], "ssh");
  EXPECT_TRUE(contains(argv, "HostKeyAlias=gpucloud-i-train1"));
  EXPECT_TRUE(contains(argv, "UserKnownHostsFile=" + known_hosts().string()));
  EXPECT_TRUE(contains(argv, "StrictHostKeyChecking=yes"));
  EXPECT_FALSE(contains(argv, "-i"));
  ASSERT_GE(argv.size(), 4u);
  EXPECT_EQ((std::vector<std::string>(argv.end() - 4, argv.end())),
            (std::vector<std::string>{"root@10.0.0.5", "ls", "-la", "--json"}));
  EXPECT_EQ(read(known_hosts()), std::string("gpucloud-i-train1 ") + kKey + "\n");
  EXPECT_EQ(mode(known_hosts()), 0600u);

  // ssh's exit status is ours; --identity goes through.
  exec_status_ = 255;
  EXPECT_EQ(run({"ssh", "train", "--identity", "/k/id"}), 255);
  ASSERT_EQ(execs_.size(), 2u);
  EXPECT_TRUE(contains(execs_[1], "-i"));
  EXPECT_TRUE(contains(execs_[1], "/k/id"));
  EXPECT_EQ(execs_[1].back(), "root@10.0.0.5");

  exec_status_ = fail(ErrorCode::unavailable, "cannot run ssh: No such file or directory");
  EXPECT_EQ(run({"ssh", "train"}), 1);
  EXPECT_NE(err_.str().find("OpenSSH client"), std::string::npos);
}

TEST_F(ConnectCommands, SshRefusesAnInstanceThatIsNotRunning) {
  answer("GET /api/v1/instances/train", instance("train", "stopped"));
  answer("GET /api/v1/instances/nokey", instance("nokey", "running", true, false));
  answer("GET /api/v1/instances/nossh", instance("nossh", "running", false));
  EXPECT_EQ(run({"ssh", "train"}), 1);
  EXPECT_NE(err_.str().find("error: instance train is stopped"), std::string::npos) << err_.str();
  EXPECT_EQ(run({"ssh", "nokey"}), 1);
  EXPECT_NE(err_.str().find("no SSH host key yet"), std::string::npos);
  EXPECT_EQ(run({"ssh", "nossh"}), 1);
  EXPECT_NE(err_.str().find("no SSH access"), std::string::npos);
  EXPECT_EQ(run({"ssh", "ghost"}), 1);
  EXPECT_NE(err_.str().find("no such thing"), std::string::npos);
  EXPECT_TRUE(execs_.empty());
  EXPECT_FALSE(fs::exists(known_hosts()));
}

TEST_F(ConnectCommands, SshConfigForAllRunningInstances) {
  json::array items{instance("a", "running"), instance("b", "stopped"),
                    instance("c", "running", true, false), instance("d", "running")};
  answer("GET /api/v1/instances", json::object{{"items", items}, {"next_cursor", nullptr}});
  ASSERT_EQ(run({"ssh-config"}), 0) << err_.str();
  const std::string kh = known_hosts().string();
  EXPECT_EQ(out_.str(),
            "Host a\n  HostName 10.0.0.5\n  Port 30022\n  User root\n"
            "  HostKeyAlias gpucloud-i-a1\n  UserKnownHostsFile " + kh +
                "\n  StrictHostKeyChecking yes\n"
                "\n"
                "Host d\n  HostName 10.0.0.5\n  Port 30022\n  User root\n"
                "  HostKeyAlias gpucloud-i-d1\n  UserKnownHostsFile " + kh +
                "\n  StrictHostKeyChecking yes\n");
  EXPECT_NE(err_.str().find("skipped instance c has no SSH host key yet"), std::string::npos);
  EXPECT_EQ(read(known_hosts()), std::string("gpucloud-i-a1 ") + kKey + "\ngpucloud-i-d1 " +
                                     kKey + "\n");

  // Named: each must be usable.
  answer("GET /api/v1/instances/a", instance("a", "running"));
  answer("GET /api/v1/instances/b", instance("b", "stopped"));
  EXPECT_EQ(run({"ssh-config", "a", "b"}), 1);
  EXPECT_NE(err_.str().find("instance b is stopped"), std::string::npos);
  EXPECT_EQ(run({"ssh-config", "a"}), 0);
  EXPECT_TRUE(out_.str().starts_with("Host a\n"));
  EXPECT_EQ(out_.str().find("Host d"), std::string::npos);
}

TEST_F(ConnectCommands, EventsTable) {
  json::array items{
      json::object{{"id", "ev-1"}, {"seq", 4}, {"time", "2025-01-01T00:00:01Z"},
                   {"type", "instance.running"}, {"resource", "i-1"}, {"message", "up\x1b[2J"}},
      json::object{{"id", "ev-0"}, {"seq", 3}, {"time", "2025-01-01T00:00:00Z"},
                   {"type", "instance.created"}, {"resource", "i-1"}, {"message", "created"}}};
  answer("GET /api/v1/events?since_seq=2&limit=1000",
         json::object{{"items", items}, {"next_cursor", nullptr}});
  ASSERT_EQ(run({"events", "--since-seq", "2"}), 0) << err_.str();
  std::string out = out_.str();
  EXPECT_TRUE(out.starts_with("SEQ")) << out;
  EXPECT_NE(out.find("MESSAGE"), std::string::npos);
  EXPECT_LT(out.find("instance.created"), out.find("instance.running"));  // by seq
  EXPECT_EQ(out.find('\x1b'), std::string::npos);
  EXPECT_EQ(run({"events", "--since-seq", "-3"}), kExitUsage);
}

TEST_F(ConnectCommands, EventsFollowReconnectsWithLastEventId) {
  streams_.push_back({{": connected\n\n", "id: 5\nevent: instance.created\ndata: {\"seq\":5,",
                       "\"type\":\"instance.created\",\"resource\":\"i-1\",\"message\":\"m5\"}\n\n",
                       "id: 6\ndata: {\"seq\":6,\"type\":\"instance.running\"}\n\nid: 7\ndata: {\"seq\""},
                      fail(ErrorCode::unavailable, "the connection was cut")});
  streams_.push_back({{}, fail(ErrorCode::unavailable, "connection refused")});
  streams_.push_back({{": hb\n\n", "id: 7\ndata: {\"seq\":7,\"type\":\"instance.stopped\"}\n\n"},
                      sse_ok()});
  // Then the fake answers unauthorized: a refusal ends the command.
  EXPECT_EQ(run({"--json", "events", "--follow", "--since-seq", "4"}), 1);
  ASSERT_EQ(stream_requests_.size(), 4u);
  EXPECT_EQ(stream_requests_[0].target, "/api/v1/events/stream");
  EXPECT_EQ(stream_requests_[0].header("Last-Event-ID"), "4");
  EXPECT_EQ(stream_requests_[0].header("Authorization"), "Bearer tok");
  EXPECT_EQ(stream_requests_[1].header("Last-Event-ID"), "6");  // 7 was cut off
  EXPECT_EQ(stream_requests_[2].header("Last-Event-ID"), "6");
  EXPECT_EQ(stream_requests_[3].header("Last-Event-ID"), "7");
  std::istringstream lines(out_.str());
  std::vector<json::value> printed;
  for (std::string line; std::getline(lines, line);) printed.push_back(json::parse(line));
  ASSERT_EQ(printed.size(), 3u) << out_.str();
  EXPECT_EQ(printed[0].at("seq").as_int64(), 5);
  EXPECT_EQ(printed[0].at("message").as_string(), "m5");
  EXPECT_EQ(printed[2].at("type").as_string(), "instance.stopped");
  EXPECT_EQ(sleeps_.size(), 3u);  // one wait before each reconnect
  EXPECT_NE(err_.str().find("reconnecting"), std::string::npos);

  // Human rows; a stream of nothing but failures gives up.
  for (int i = 0; i < 25; ++i) streams_.push_back({{}, fail(ErrorCode::unavailable, "down")});
  streams_.front().chunks = {"id: 1\ndata: {\"seq\":1,\"type\":\"t.x\",\"resource\":\"r\","
                             "\"message\":\"hello\",\"time\":\"2025-01-01T00:00:00Z\"}\n\n"};
  stream_requests_.clear();
  EXPECT_EQ(run({"events", "-f"}), 1);
  EXPECT_TRUE(stream_requests_[0].header("Last-Event-ID").empty());
  EXPECT_TRUE(out_.str().starts_with("SEQ")) << out_.str();
  EXPECT_NE(out_.str().find("hello"), std::string::npos);
  EXPECT_NE(err_.str().find("gave up on the event stream"), std::string::npos) << err_.str();
}

TEST_F(ConnectCommands, EventsFollowRefusesWhatIsNotAStream) {
  HttpResponse json_answer;
  json_answer.status = 200;
  json_answer.content_type = "application/json";
  streams_.push_back({{}, json_answer});
  EXPECT_EQ(run({"events", "--follow"}), 1);
  EXPECT_NE(err_.str().find("did not answer with an event stream"), std::string::npos);
  HttpResponse missing;
  missing.status = 404;
  missing.content_type = "application/problem+json";
  missing.body = R"({"status":404,"code":"not_found","detail":"no route"})";
  streams_.push_back({{}, missing});
  EXPECT_EQ(run({"events", "--follow"}), 1);
  EXPECT_NE(err_.str().find("error: no route"), std::string::npos);
}

}  // namespace
}  // namespace gpucloud::cli

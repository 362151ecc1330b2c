// The web terminal over an agent's link (issue 26), both ends with fakes:
//  - RemoteTerminalTest: AgentHub::open_terminal for a remote host and the
//    RemoteTerminalSession it returns, on a real migrated store and a fake link that records
//    what the hub sends;
//  - AgentTerminalsTest: the agent's end (AgentTerminals) over a fake HostAgent whose
//    terminals the test drives.
// Coroutines run on the test's io_context, pumped until what the test waits for holds or a
// deadline passes.
#include "agentlink/remote_terminal.h"

#include <filesystem>
#include <optional>

#include <boost/asio.hpp>
#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "agentlink/agent_terminals.h"
#include "core/unique_temp_dir.h"
#include "store/store.h"

namespace gpucloud::agentlink {
namespace {
namespace asio = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

template <class Pred>
bool rt_pump(asio::io_context& io, Pred done, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    io.restart();
    io.run_for(2ms);
  }
  return done();
}

// A link as the hub sees it: every message sent, decoded.
class RtConnection : public AgentConnection {
 public:
  void send(std::string text) override {
    if (closed) return;
    auto m = read_envelope(text);
    ASSERT_TRUE(m) << text;
    sent.push_back(std::move(*m));
  }
  void close(std::string) override { closed = true; }
  std::string address() const override { return "10.0.0.9:40000"; }
  // The last message of `type`, or nullopt.
  std::optional<LinkMessage> last(const std::string& type) const {
    for (auto it = sent.rbegin(); it != sent.rend(); ++it)
      if (it->type == type) return *it;
    return std::nullopt;
  }
  std::size_t count(const std::string& type) const {
    return static_cast<std::size_t>(std::count_if(sent.begin(), sent.end(), [&](const auto& m) { return m.type == type; }));
  }
  std::vector<LinkMessage> sent;
  bool closed = false;
};

class RtLocalAgent : public agent::HostAgent {
 public:
  asio::awaitable<Result<std::vector<agent::HostInventory>>> register_hosts() override {
    agent::HostInventory h;
    h.name = "local-1";
    co_return std::vector<agent::HostInventory>{h};
  }
  asio::awaitable<Result<agent::CommandOutcome>> execute(agent::Command command) override {
    co_return agent::CommandOutcome{command.id, true, "", "", {}};
  }
  void on_heartbeat(std::function<void(agent::Heartbeat)>) override {}
  asio::awaitable<Result<std::unique_ptr<agent::TerminalSession>>> open_terminal(std::string, std::string, int,
                                                                                int) override {
    co_return fail(ErrorCode::unavailable, "no local terminals in this test");
  }
};

agent::HostInventory rt_inventory(const std::string& name) {
  agent::HostInventory h;
  h.name = name;
  h.zone = "zone-a";
  h.cpu = 8;
  h.memory_gib = 32;
  h.port_min = 30000;
  h.port_max = 30099;
  h.engine = "unix:///var/run/docker.sock";
  h.simulated = true;
  h.inventory_source = "simulated";
  return h;
}

LinkMessage rt_message(std::string type, std::int64_t stream, json::object body = {}) {
  body["stream"] = stream;
  return LinkMessage{std::move(type), std::move(body)};
}

class RemoteTerminalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = gpucloud::testing::unique_temp_dir("gpucloud-rterm");
    auto s = store::Store::open((dir_ / "test.db").string(), 2);
    ASSERT_TRUE(s) << s.error().detail;
    store_ = std::move(*s);
  }
  void TearDown() override {
    session_.reset();
    rt_pump(io_, [] { return false; }, 20ms);
    hub_.reset();
    rt_pump(io_, [] { return false; }, 20ms);
    store_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  void make_hub(std::chrono::milliseconds open_wait = 5s) {
    AgentHub::Options options;
    options.journal_key = std::string(32, 'k');
    options.terminal_open_wait = open_wait;
    hub_ = std::make_unique<AgentHub>(io_.get_executor(), *store_, std::make_unique<RtLocalAgent>(), options);
    hub_->on_registration([](agent::LateRegistration) -> asio::awaitable<Status> { co_return ok(); });
    bool done = false;
    asio::co_spawn(io_, hub_->register_hosts(), [&](std::exception_ptr, Result<std::vector<agent::HostInventory>>) {
      done = true;
    });
    ASSERT_TRUE(rt_pump(io_, [&] { return done; }, 5s));
  }

  std::shared_ptr<RtConnection> connect(const std::string& host) {
    auto c = std::make_shared<RtConnection>();
    Hello h;
    h.agent_version = "test";
    h.inventory = rt_inventory(host);
    std::optional<Status> result;
    asio::co_spawn(io_, hub_->hello(host, c, std::move(h)), [&](std::exception_ptr, Status s) { result = s; });
    EXPECT_TRUE(rt_pump(io_, [&] { return result.has_value(); }, 5s));
    EXPECT_TRUE(result && *result);
    return c;
  }

  // Starts open_terminal; `opened` holds its result once it answered.
  void start_open(const std::string& host, const std::string& instance) {
    opened_.reset();
    asio::co_spawn(io_, hub_->open_terminal(host, instance, 24, 80),
                   [this](std::exception_ptr e, Result<std::unique_ptr<agent::TerminalSession>> r) {
                     if (e) opened_.emplace(fail(ErrorCode::internal, "open_terminal threw"));
                     else opened_.emplace(std::move(r));
                   });
  }

  // Opens a terminal on `host` whose agent answers terminal_opened; the stream id.
  std::int64_t open_session(const std::string& host, RtConnection& link) {
    start_open(host, "inst-1");
    EXPECT_TRUE(rt_pump(io_, [&] { return link.count("terminal_open") > 0; }, 2s));
    auto open = link.last("terminal_open");
    if (!open) return 0;
    const std::int64_t id = open->body.at("stream").as_int64();
    hub_->receive(host, &link, rt_message("terminal_opened", id));
    EXPECT_TRUE(rt_pump(io_, [&] { return opened_.has_value(); }, 2s));
    EXPECT_TRUE(opened_ && *opened_) << (opened_ && !*opened_ ? opened_->error().detail : "");
    if (opened_ && *opened_) session_ = std::move(**opened_);
    return id;
  }

  Result<std::string> read() {
    std::optional<Result<std::string>> got;
    asio::co_spawn(io_, session_->read(), [&](std::exception_ptr, Result<std::string> r) { got = std::move(r); });
    if (!rt_pump(io_, [&] { return got.has_value(); }, 2s)) return fail(ErrorCode::internal, "read() did not return");
    return *got;
  }
  template <class T>
  T run(asio::awaitable<T> work) {
    std::optional<T> got;
    asio::co_spawn(io_, std::move(work), [&](std::exception_ptr, T r) { got = std::move(r); });
    EXPECT_TRUE(rt_pump(io_, [&] { return got.has_value(); }, 2s));
    return got ? std::move(*got) : T(fail(ErrorCode::internal, "did not finish"));
  }

  fs::path dir_;
  asio::io_context io_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<AgentHub> hub_;
  std::optional<Result<std::unique_ptr<agent::TerminalSession>>> opened_;
  std::unique_ptr<agent::TerminalSession> session_;
};

TEST_F(RemoteTerminalTest, OpensThenCarriesOutputInOrderInputResizeAndTheExitCode) {
  make_hub();
  auto link = connect("remote-1");
  const std::int64_t id = open_session("remote-1", *link);
  ASSERT_TRUE(session_);
  auto open = link->last("terminal_open");
  EXPECT_EQ(open->body.at("instance_id"), "inst-1");
  EXPECT_EQ(open->body.at("rows"), 24);
  EXPECT_EQ(open->body.at("cols"), 80);
  EXPECT_EQ(hub_->terminal_streams(), 1u);

  // Bytes (any bytes: a NUL, high bytes) arrive in order.
  const std::string binary("\x00\xff\x1b[0m", 6);
  for (const std::string& chunk : {std::string("$ ec"), std::string("ho 42\r\n"), binary})
    hub_->receive("remote-1", link.get(),
                  rt_message("terminal_output", id, json::object{{"data", terminal_bytes_to_base64(chunk)}}));
  auto out = read();
  ASSERT_TRUE(out) << out.error().detail;
  EXPECT_EQ(*out, "$ echo 42\r\n" + binary);

  ASSERT_TRUE(run(session_->write("ls -l\n")));
  auto input = link->last("terminal_input");
  ASSERT_TRUE(input);
  EXPECT_EQ(input->body.at("stream"), id);
  EXPECT_EQ(*terminal_data_of(input->body), "ls -l\n");
  ASSERT_TRUE(run(session_->resize(40, 120)));
  auto resize = link->last("terminal_resize");
  ASSERT_TRUE(resize);
  EXPECT_EQ(resize->body.at("rows"), 40);
  EXPECT_EQ(resize->body.at("cols"), 120);
  EXPECT_EQ(resize->body.at("stream"), id);

  // Output then exit: the output first, then "" and the code.
  hub_->receive("remote-1", link.get(),
                rt_message("terminal_output", id, json::object{{"data", terminal_bytes_to_base64("bye\r\n")}}));
  hub_->receive("remote-1", link.get(), rt_message("terminal_exit", id, json::object{{"exit_code", 3}}));
  EXPECT_EQ(*read(), "bye\r\n");
  EXPECT_EQ(*read(), "");
  auto code = run(session_->exit_code());
  ASSERT_TRUE(code) << code.error().detail;
  EXPECT_EQ(*code, 3);
  EXPECT_EQ(hub_->terminal_streams(), 0u);
  EXPECT_FALSE(run(session_->write("x")));
  session_->close();
  EXPECT_EQ(link->count("terminal_close"), 0u) << "an exited stream is not closed again";
}

// A connection to an instance's port on a remote host (the proxies): connection_open on its
// agent's link, then a session like a terminal's. An in-process host's goes to its own agent.
TEST_F(RemoteTerminalTest, AConnectionToARemoteInstanceIsAStreamOpenedByConnectionOpen) {
  make_hub();
  auto link = connect("remote-1");
  std::optional<Result<std::unique_ptr<agent::TerminalSession>>> got;
  asio::co_spawn(io_, hub_->open_connection("remote-1", "inst-1", 8888),
                 [&](std::exception_ptr, Result<std::unique_ptr<agent::TerminalSession>> r) { got.emplace(std::move(r)); });
  ASSERT_TRUE(rt_pump(io_, [&] { return link->count("connection_open") > 0; }, 2s));
  auto open = link->last("connection_open");
  EXPECT_EQ(open->body.at("instance_id"), "inst-1");
  EXPECT_EQ(open->body.at("port"), 8888);
  EXPECT_FALSE(open->body.contains("rows"));
  const std::int64_t id = open->body.at("stream").as_int64();
  hub_->receive("remote-1", link.get(), rt_message("terminal_opened", id));
  ASSERT_TRUE(rt_pump(io_, [&] { return got.has_value(); }, 2s));
  ASSERT_TRUE(*got) << got->error().detail;
  session_ = std::move(**got);
  EXPECT_EQ(hub_->connections_opened(), 1u);
  ASSERT_TRUE(run(session_->write("GET / HTTP/1.1\r\n\r\n")));
  EXPECT_EQ(*terminal_data_of(link->last("terminal_input")->body), "GET / HTTP/1.1\r\n\r\n");
  hub_->receive("remote-1", link.get(),
                rt_message("terminal_output", id, json::object{{"data", terminal_bytes_to_base64("HTTP/1.1 204 No Content\r\n\r\n")}}));
  hub_->receive("remote-1", link.get(), rt_message("terminal_exit", id, json::object{{"exit_code", 0}}));
  EXPECT_EQ(*read(), "HTTP/1.1 204 No Content\r\n\r\n");
  EXPECT_EQ(*read(), "");

  // The agent could not connect: its error, and no session.
  got.reset();
  asio::co_spawn(io_, hub_->open_connection("remote-1", "inst-1", 9999),
                 [&](std::exception_ptr, Result<std::unique_ptr<agent::TerminalSession>> r) { got.emplace(std::move(r)); });
  ASSERT_TRUE(rt_pump(io_, [&] { return link->count("connection_open") == 2; }, 2s));
  hub_->receive("remote-1", link.get(),
                rt_message("terminal_failed", link->last("connection_open")->body.at("stream").as_int64(),
                           json::object{{"code", "unavailable"}, {"detail", "nothing answers on port 9999 in the instance"}}));
  ASSERT_TRUE(rt_pump(io_, [&] { return got.has_value(); }, 2s));
  ASSERT_FALSE(*got);
  EXPECT_EQ(got->error().code, ErrorCode::unavailable);
  EXPECT_NE(got->error().detail.find("port 9999"), std::string::npos) << got->error().detail;

  // An in-process host: never on a link.
  const auto sent_before = link->sent.size();
  got.reset();
  asio::co_spawn(io_, hub_->open_connection("local-1", "inst-1", 8888),
                 [&](std::exception_ptr, Result<std::unique_ptr<agent::TerminalSession>> r) { got.emplace(std::move(r)); });
  ASSERT_TRUE(rt_pump(io_, [&] { return got.has_value(); }, 2s));
  EXPECT_FALSE(*got) << "this test's in-process agent opens none";
  EXPECT_EQ(link->sent.size(), sent_before);
  EXPECT_EQ(hub_->connections_opened(), 1u);
}

TEST_F(RemoteTerminalTest, AReadWaitsForOutputThatArrivesLater) {
  make_hub();
  auto link = connect("remote-1");
  const std::int64_t id = open_session("remote-1", *link);
  std::optional<Result<std::string>> got;
  asio::co_spawn(io_, session_->read(), [&](std::exception_ptr, Result<std::string> r) { got = std::move(r); });
  rt_pump(io_, [] { return false; }, 30ms);
  EXPECT_FALSE(got) << "nothing to read yet";
  hub_->receive("remote-1", link.get(),
                rt_message("terminal_output", id, json::object{{"data", terminal_bytes_to_base64("late")}}));
  ASSERT_TRUE(rt_pump(io_, [&] { return got.has_value(); }, 2s));
  EXPECT_EQ(**got, "late");
}

TEST_F(RemoteTerminalTest, TheAgentsRefusalTimeoutAndAnAbsentAgentAreErrors) {
  make_hub(300ms);
  // No agent connected for the host.
  start_open("remote-1", "inst-1");
  ASSERT_TRUE(rt_pump(io_, [&] { return opened_.has_value(); }, 2s));
  ASSERT_FALSE(*opened_);
  EXPECT_EQ(opened_->error().code, ErrorCode::unavailable);
  EXPECT_NE(opened_->error().detail.find("not connected"), std::string::npos) << opened_->error().detail;

  auto link = connect("remote-1");
  // terminal_failed with the agent's code and detail.
  start_open("remote-1", "inst-x");
  ASSERT_TRUE(rt_pump(io_, [&] { return link->count("terminal_open") == 1; }, 2s));
  const auto first = link->last("terminal_open")->body.at("stream").as_int64();
  hub_->receive("remote-1", link.get(),
                rt_message("terminal_failed", first,
                           json::object{{"code", "not_found"}, {"detail", "instance inst-x has no container on this host"}}));
  ASSERT_TRUE(rt_pump(io_, [&] { return opened_.has_value(); }, 2s));
  ASSERT_FALSE(*opened_);
  EXPECT_EQ(opened_->error().code, ErrorCode::not_found);
  EXPECT_EQ(opened_->error().detail, "instance inst-x has no container on this host");

  // No answer within the wait: unavailable, and the stream is closed on the agent.
  start_open("remote-1", "inst-1");
  ASSERT_TRUE(rt_pump(io_, [&] { return opened_.has_value(); }, 3s));
  ASSERT_FALSE(*opened_);
  EXPECT_EQ(opened_->error().code, ErrorCode::unavailable);
  auto close = link->last("terminal_close");
  ASSERT_TRUE(close);
  EXPECT_NE(close->body.at("stream").as_int64(), first) << "each open takes a new stream id";
  EXPECT_EQ(hub_->terminal_streams(), 0u);
}

TEST_F(RemoteTerminalTest, ALinkDropEndsEveryStreamItCarried) {
  make_hub();
  auto link = connect("remote-1");
  const std::int64_t id = open_session("remote-1", *link);
  hub_->receive("remote-1", link.get(),
                rt_message("terminal_output", id, json::object{{"data", terminal_bytes_to_base64("partial")}}));
  // A read waiting when the link drops returns too.
  EXPECT_EQ(*read(), "partial");
  std::optional<Result<std::string>> got;
  asio::co_spawn(io_, session_->read(), [&](std::exception_ptr, Result<std::string> r) { got = std::move(r); });
  rt_pump(io_, [] { return false; }, 20ms);
  ASSERT_FALSE(got);
  hub_->closed("remote-1", link.get());
  ASSERT_TRUE(rt_pump(io_, [&] { return got.has_value(); }, 2s));
  ASSERT_TRUE(*got);
  EXPECT_EQ(**got, "");
  auto code = run(session_->exit_code());
  ASSERT_FALSE(code);
  EXPECT_NE(code.error().detail.find("disconnected"), std::string::npos) << code.error().detail;
  EXPECT_FALSE(run(session_->write("x")));
  EXPECT_EQ(hub_->terminal_streams(), 0u);
}

TEST_F(RemoteTerminalTest, AReconnectingAgentEndsTheOldLinksStreams) {
  make_hub();
  auto old_link = connect("remote-1");
  open_session("remote-1", *old_link);
  auto new_link = connect("remote-1");
  EXPECT_TRUE(old_link->closed);
  EXPECT_EQ(*read(), "");
  EXPECT_FALSE(run(session_->exit_code()));
}

TEST_F(RemoteTerminalTest, OnlyTheLinkTheStreamWasOpenedOnFeedsIt) {
  make_hub();
  auto link = connect("remote-1");
  auto other = connect("remote-2");
  const std::int64_t id = open_session("remote-1", *link);
  // Another host's agent names the stream: ignored, output and exit alike.
  hub_->receive("remote-2", other.get(),
                rt_message("terminal_output", id, json::object{{"data", terminal_bytes_to_base64("rm -rf /")}}));
  hub_->receive("remote-2", other.get(), rt_message("terminal_exit", id, json::object{{"exit_code", 0}}));
  hub_->receive("remote-1", link.get(),
                rt_message("terminal_output", id, json::object{{"data", terminal_bytes_to_base64("mine")}}));
  EXPECT_EQ(*read(), "mine");
  EXPECT_EQ(hub_->terminal_streams(), 1u);
  // A stream id nobody opened: ignored. Unreadable data: the stream is closed (on the agent too).
  hub_->receive("remote-1", link.get(), rt_message("terminal_output", id + 100, json::object{{"data", "eA=="}}));
  EXPECT_EQ(link->count("terminal_close"), 0u);
  hub_->receive("remote-1", link.get(), rt_message("terminal_output", id, json::object{{"data", "not base64!"}}));
  EXPECT_EQ(*read(), "");
  EXPECT_EQ(link->count("terminal_close"), 1u);
  EXPECT_EQ(hub_->terminal_streams(), 0u);
}

TEST_F(RemoteTerminalTest, OutputBeyondTheBoundDropsTheStreamWithAnError) {
  make_hub();
  auto link = connect("remote-1");
  const std::int64_t id = open_session("remote-1", *link);
  const std::string chunk(256 * 1024, 'y');
  auto feed = [&] {
    hub_->receive("remote-1", link.get(),
                  rt_message("terminal_output", id, json::object{{"data", terminal_bytes_to_base64(chunk)}}));
  };
  // Up to the bound (1 MiB) it queues; a reader drains it and it may queue again.
  for (int i = 0; i < 4; ++i) feed();
  std::size_t drained = 0;
  while (drained < 4 * chunk.size()) {
    auto r = read();
    ASSERT_TRUE(r) << r.error().detail;
    ASSERT_FALSE(r->empty());
    drained += r->size();
  }
  EXPECT_EQ(link->count("terminal_close"), 0u);
  for (int i = 0; i < 4; ++i) feed();
  feed();  // one chunk more than the bound while nobody reads
  auto r = read();
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().detail.find("outran its reader"), std::string::npos) << r.error().detail;
  EXPECT_EQ(link->count("terminal_close"), 1u) << "the agent is told to close the shell";
  EXPECT_FALSE(run(session_->exit_code()));
  EXPECT_EQ(hub_->terminal_streams(), 0u);
}

TEST_F(RemoteTerminalTest, WhatTheReaderTookIsAcknowledgedOnceEnoughIsUnacknowledged) {
  make_hub();
  auto link = connect("remote-1");
  const std::int64_t id = open_session("remote-1", *link);
  auto feed = [&](std::size_t n) {
    hub_->receive("remote-1", link.get(),
                  rt_message("terminal_output", id, json::object{{"data", terminal_bytes_to_base64(std::string(n, 'o'))}}));
  };
  feed(kTerminalAckEvery - 10);
  ASSERT_TRUE(read());
  EXPECT_EQ(link->count("terminal_ack"), 0u) << "keystroke echoes are not acknowledged one by one";
  feed(10);
  ASSERT_TRUE(read());
  ASSERT_EQ(link->count("terminal_ack"), 1u);
  auto ack = link->last("terminal_ack");
  EXPECT_EQ(ack->body.at("stream"), id);
  EXPECT_EQ(ack->body.at("bytes").to_number<std::int64_t>(), static_cast<std::int64_t>(kTerminalAckEvery));
  feed(100);  // queued, not read: not acknowledged
  EXPECT_EQ(link->count("terminal_ack"), 1u);
}

TEST_F(RemoteTerminalTest, ClosingTheSessionClosesTheStreamOnce) {
  make_hub();
  auto link = connect("remote-1");
  const std::int64_t id = open_session("remote-1", *link);
  session_->close();
  session_->close();
  EXPECT_EQ(link->count("terminal_close"), 1u);
  EXPECT_EQ(link->last("terminal_close")->body.at("stream"), id);
  EXPECT_EQ(*read(), "");
  session_.reset();  // destroying it sends nothing more
  EXPECT_EQ(link->count("terminal_close"), 1u);
}

TEST(TerminalMessagesTest, BytesRoundTripThroughBase64AndBadTextIsRefused) {
  for (const std::string& bytes : {std::string(), std::string("a"), std::string("ab"), std::string("abc"),
                                   std::string("\x00\xff\x80\n", 4), std::string(1000, '\x7f')}) {
    auto back = terminal_bytes_from_base64(terminal_bytes_to_base64(bytes));
    ASSERT_TRUE(back) << back.error().detail;
    EXPECT_EQ(*back, bytes);
  }
  EXPECT_EQ(*terminal_bytes_from_base64("aGk="), "hi");
  for (const char* bad : {"not base64!", "aGk", "aG=k", "aGk===", "a===", "aGk=\n"})
    EXPECT_FALSE(terminal_bytes_from_base64(bad)) << bad;
  EXPECT_FALSE(terminal_stream_of(json::object{{"stream", 0}}));
  EXPECT_FALSE(terminal_stream_of(json::object{{"stream", "7"}}));
  EXPECT_EQ(*terminal_stream_of(json::object{{"stream", 7}}), 7);
}

// ---- the agent's end ---------------------------------------------------------------------

// A shell the test drives: output pushed by the test, input and resizes recorded.
struct AtShell {
  std::deque<std::string> output;
  bool eof = false, closed = false;
  int exit = 0;
  std::vector<std::string> applied;  // "w:<data>" or "r:<rows>x<cols>"
  std::size_t reads = 0;
  std::optional<asio::steady_timer> wake;
};

class AtTerminal : public agent::TerminalSession {
 public:
  explicit AtTerminal(std::shared_ptr<AtShell> shell) : shell_(std::move(shell)) {}
  asio::awaitable<Result<std::string>> read() override {
    for (;;) {
      if (!shell_->output.empty()) {
        ++shell_->reads;
        std::string out = std::move(shell_->output.front());
        shell_->output.pop_front();
        co_return out;
      }
      if (shell_->eof || shell_->closed) co_return std::string();
      shell_->wake->expires_after(10ms);
      boost::system::error_code ec;
      co_await shell_->wake->async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
  }
  asio::awaitable<Status> write(std::string data) override {
    shell_->applied.push_back("w:" + data);
    co_return ok();
  }
  asio::awaitable<Status> resize(int rows, int cols) override {
    shell_->applied.push_back("r:" + std::to_string(rows) + "x" + std::to_string(cols));
    co_return ok();
  }
  asio::awaitable<Result<int>> exit_code() override { co_return shell_->exit; }
  void close() override { shell_->closed = true; }

 private:
  std::shared_ptr<AtShell> shell_;
};

class AtAgent : public agent::HostAgent {
 public:
  explicit AtAgent(asio::io_context& io) : io_(io) {}
  asio::awaitable<Result<std::vector<agent::HostInventory>>> register_hosts() override {
    co_return std::vector<agent::HostInventory>{};
  }
  asio::awaitable<Result<agent::CommandOutcome>> execute(agent::Command command) override {
    co_return agent::CommandOutcome{command.id, true, "", "", {}};
  }
  void on_heartbeat(std::function<void(agent::Heartbeat)>) override {}
  asio::awaitable<Result<std::unique_ptr<agent::TerminalSession>>> open_terminal(std::string host, std::string instance,
                                                                                int rows, int cols) override {
    asked.push_back(host + "/" + instance + "/" + std::to_string(rows) + "x" + std::to_string(cols));
    if (instance != "inst-1") co_return fail(ErrorCode::not_found, "instance " + instance + " has no container on this host");
    auto shell = std::make_shared<AtShell>();
    shell->wake.emplace(io_);
    shells.push_back(shell);
    co_return std::unique_ptr<agent::TerminalSession>(std::make_unique<AtTerminal>(shell));
  }
  asio::awaitable<Result<std::unique_ptr<agent::TerminalSession>>> open_connection(std::string host, std::string instance,
                                                                                  int port) override {
    asked.push_back("connect " + host + "/" + instance + ":" + std::to_string(port));
    if (instance != "inst-1") co_return fail(ErrorCode::conflict, "instance " + instance + " is not running on this host");
    auto shell = std::make_shared<AtShell>();  // a service's bytes, driven the same way
    shell->wake.emplace(io_);
    shells.push_back(shell);
    co_return std::unique_ptr<agent::TerminalSession>(std::make_unique<AtTerminal>(shell));
  }
  std::vector<std::string> asked;
  std::vector<std::shared_ptr<AtShell>> shells;

 private:
  asio::io_context& io_;
};

class AgentTerminalsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    terminals_ = std::make_shared<AgentTerminals>(
        io_.get_executor(), agent_, "remote-1",
        [this](std::string type, json::object body) { sent_.push_back(LinkMessage{std::move(type), std::move(body)}); },
        [this] { return backlog_; });
  }
  void TearDown() override {
    terminals_->close_all();
    rt_pump(io_, [] { return false; }, 30ms);
    terminals_.reset();
  }
  void handle(std::string type, std::int64_t stream, json::object body = {}) {
    terminals_->handle(rt_message(std::move(type), stream, std::move(body)));
  }
  std::vector<std::string> types() const {
    std::vector<std::string> out;
    for (const auto& m : sent_) out.push_back(m.type);
    return out;
  }
  std::string output_of(std::int64_t stream) const {
    std::string out;
    for (const auto& m : sent_)
      if (m.type == "terminal_output" && m.body.at("stream").as_int64() == stream) {
        auto data = terminal_data_of(m.body);
        EXPECT_TRUE(data) << json::serialize(m.body);
        if (data) out += *data;
      }
    return out;
  }
  bool pump_until(std::function<bool()> done, std::chrono::milliseconds limit = 2s) { return rt_pump(io_, done, limit); }

  asio::io_context io_;
  AtAgent agent_{io_};
  std::vector<LinkMessage> sent_;
  std::size_t backlog_ = 0;
  std::shared_ptr<AgentTerminals> terminals_;
};

TEST_F(AgentTerminalsTest, OpensOnItsOwnHostPumpsOutputAppliesInputInOrderAndReportsTheExit) {
  handle("terminal_open", 7, json::object{{"instance_id", "inst-1"}, {"rows", 30}, {"cols", 100}});
  ASSERT_TRUE(pump_until([&] { return !sent_.empty(); }));
  EXPECT_EQ(sent_.front().type, "terminal_opened");
  EXPECT_EQ(sent_.front().body.at("stream"), 7);
  ASSERT_EQ(agent_.asked, std::vector<std::string>{"remote-1/inst-1/30x100"}) << "always this agent's own host";
  auto& shell = *agent_.shells.at(0);

  handle("terminal_input", 7, json::object{{"data", terminal_bytes_to_base64("echo 1\n")}});
  handle("terminal_resize", 7, json::object{{"rows", 40}, {"cols", 120}});
  handle("terminal_input", 7, json::object{{"data", terminal_bytes_to_base64(std::string("\x03", 1))}});
  ASSERT_TRUE(pump_until([&] { return shell.applied.size() == 3; }));
  EXPECT_EQ(shell.applied, (std::vector<std::string>{"w:echo 1\n", "r:40x120", "w:\x03"}));

  shell.output = {"one ", "two ", std::string("\x00three", 6)};
  ASSERT_TRUE(pump_until([&] { return output_of(7).size() == 14; }));
  EXPECT_EQ(output_of(7), std::string("one two \x00three", 14));

  shell.exit = 7;
  shell.eof = true;
  ASSERT_TRUE(pump_until([&] { return types().back() == "terminal_exit"; }));
  EXPECT_EQ(sent_.back().body.at("exit_code"), 7);
  EXPECT_TRUE(pump_until([&] { return terminals_->streams() == 0; }));
  EXPECT_TRUE(shell.closed);
}

// connection_open: the agent's connection to the instance's port (the proxies), then the
// same stream messages as a shell's; the service's end is an exit with code 0.
TEST_F(AgentTerminalsTest, AConnectionOpenConnectsToThePortAndCarriesItsBytesBothWays) {
  handle("connection_open", 9, json::object{{"instance_id", "inst-1"}, {"port", 8888}});
  ASSERT_TRUE(pump_until([&] { return !sent_.empty(); }));
  EXPECT_EQ(sent_.front().type, "terminal_opened");
  ASSERT_EQ(agent_.asked, std::vector<std::string>{"connect remote-1/inst-1:8888"}) << "always this agent's own host";
  auto& service = *agent_.shells.at(0);
  handle("terminal_input", 9, json::object{{"data", terminal_bytes_to_base64("GET / HTTP/1.1\r\n\r\n")}});
  ASSERT_TRUE(pump_until([&] { return service.applied.size() == 1; }));
  EXPECT_EQ(service.applied.front(), "w:GET / HTTP/1.1\r\n\r\n");
  service.output = {"HTTP/1.1 200 OK\r\n", "\r\n"};
  ASSERT_TRUE(pump_until([&] { return output_of(9).size() == 19; }));
  EXPECT_EQ(output_of(9), "HTTP/1.1 200 OK\r\n\r\n");
  service.eof = true;
  ASSERT_TRUE(pump_until([&] { return types().back() == "terminal_exit"; }));
  EXPECT_EQ(sent_.back().body.at("exit_code"), 0);
  EXPECT_TRUE(pump_until([&] { return terminals_->streams() == 0; }));
  EXPECT_TRUE(service.closed);
}

TEST_F(AgentTerminalsTest, AConnectionOpenWithoutAPortOrToAStoppedInstanceFails) {
  for (const json::value& port : {json::value(0), json::value(65536), json::value("80"), json::value(nullptr)}) {
    sent_.clear();
    handle("connection_open", 4, json::object{{"instance_id", "inst-1"}, {"port", port}});
    ASSERT_TRUE(pump_until([&] { return !sent_.empty(); })) << json::serialize(port);
    EXPECT_EQ(sent_.front().type, "terminal_failed");
    EXPECT_EQ(sent_.front().body.at("code"), "invalid_argument");
  }
  EXPECT_TRUE(agent_.asked.empty()) << "nothing is dialled for a bad port";
  sent_.clear();
  handle("connection_open", 5, json::object{{"instance_id", "inst-gone"}, {"port", 22}});
  ASSERT_TRUE(pump_until([&] { return !sent_.empty(); }));
  EXPECT_EQ(sent_.front().type, "terminal_failed");
  EXPECT_EQ(sent_.front().body.at("code"), "conflict");
  EXPECT_EQ(terminals_->streams(), 0u);
}

TEST_F(AgentTerminalsTest, AnInstanceItCannotOpenIsAFailureWithTheAgentsCode) {
  handle("terminal_open", 3, json::object{{"instance_id", "inst-zz"}, {"rows", 24}, {"cols", 80}});
  ASSERT_TRUE(pump_until([&] { return !sent_.empty(); }));
  EXPECT_EQ(sent_.front().type, "terminal_failed");
  EXPECT_EQ(sent_.front().body.at("code"), "not_found");
  EXPECT_EQ(sent_.front().body.at("stream"), 3);
  EXPECT_EQ(terminals_->streams(), 0u);
}

TEST_F(AgentTerminalsTest, CloseAndTheLinksEndCloseTheShellsAndSendNothingMore) {
  handle("terminal_open", 1, json::object{{"instance_id", "inst-1"}});
  handle("terminal_open", 2, json::object{{"instance_id", "inst-1"}});
  ASSERT_TRUE(pump_until([&] { return agent_.shells.size() == 2 && sent_.size() == 2; }));
  handle("terminal_open", 2, json::object{{"instance_id", "inst-1"}});
  EXPECT_EQ(sent_.back().type, "terminal_failed") << "a stream id in use is refused";
  handle("terminal_close", 1);
  EXPECT_TRUE(agent_.shells[0]->closed);
  EXPECT_FALSE(agent_.shells[1]->closed);
  EXPECT_EQ(terminals_->streams(), 1u);
  const std::size_t before = sent_.size();
  terminals_->close_all();
  EXPECT_TRUE(agent_.shells[1]->closed);
  agent_.shells[1]->output.push_back("late");
  rt_pump(io_, [] { return false; }, 50ms);
  EXPECT_EQ(sent_.size(), before) << "no exit, no output after the link ended";
  handle("terminal_open", 9, json::object{{"instance_id", "inst-1"}});
  EXPECT_EQ(agent_.asked.size(), 2u) << "nothing opens on an ended link";
}

TEST_F(AgentTerminalsTest, AWindowOfUnacknowledgedOutputPausesTheShellUntilAnAck) {
  handle("terminal_open", 5, json::object{{"instance_id", "inst-1"}});
  ASSERT_TRUE(pump_until([&] { return sent_.size() == 1; }));
  auto& shell = *agent_.shells.at(0);
  const std::string chunk(100 * 1024, 'z');
  shell.output = {chunk, chunk, chunk, chunk, chunk};
  // 300 KiB out reach the 256 KiB window: the shell waits.
  ASSERT_TRUE(pump_until([&] { return output_of(5).size() == 3 * chunk.size(); }));
  rt_pump(io_, [] { return false; }, 60ms);
  EXPECT_EQ(output_of(5).size(), 3 * chunk.size());
  EXPECT_EQ(shell.reads, 3u);
  handle("terminal_ack", 5, json::object{{"bytes", 2 * chunk.size()}});
  ASSERT_TRUE(pump_until([&] { return output_of(5).size() == 5 * chunk.size(); }));
}

TEST_F(AgentTerminalsTest, ABackedUpLinkPausesTheShellsOutput) {
  handle("terminal_open", 4, json::object{{"instance_id", "inst-1"}});
  ASSERT_TRUE(pump_until([&] { return sent_.size() == 1; }));
  auto& shell = *agent_.shells.at(0);
  // The read in progress returns its chunk; then the pump waits for the link to catch up.
  backlog_ = kTerminalOutputBound + 1;
  shell.output = {"sent ", "held"};
  ASSERT_TRUE(pump_until([&] { return output_of(4) == "sent "; }));
  rt_pump(io_, [] { return false; }, 60ms);
  EXPECT_EQ(shell.reads, 1u) << "the shell is not read while the link is behind";
  EXPECT_EQ(output_of(4), "sent ");
  backlog_ = 0;
  ASSERT_TRUE(pump_until([&] { return output_of(4) == "sent held"; }));
}

}  // namespace
}  // namespace gpucloud::agentlink

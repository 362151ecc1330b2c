// ssh NAME [-- COMMAND...], ssh-config [NAME...], events [--follow] [--since-seq N].
#include <algorithm>
#include <memory>
#include <ostream>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/event_stream.h"
#include "cli/output.h"
#include "cli/ssh_command.h"

namespace gpucloud::cli {

namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

struct ConnectArgs {
  std::string name;
  std::vector<std::string> command;
  std::vector<std::string> names;
  std::string identity;
  bool follow = false;
  std::int64_t since_seq = -1;  // -1: not given (set by the handler)
};

std::optional<std::string> identity_of(const ConnectArgs& a) {
  if (a.identity.empty()) return std::nullopt;
  return a.identity;
}

Expected<std::filesystem::path> known_hosts_file(Context& ctx) {
  auto path = known_hosts_path(ctx.deps().env);
  if (!path) return refused(path.error().detail);
  return *path;
}

Outcome pin_host_keys(Context& ctx, const std::filesystem::path& file,
                      const std::vector<SshTarget>& targets) {
  std::vector<std::pair<std::string, std::string>> entries;
  for (const auto& t : targets) entries.emplace_back(host_key_alias(t.id), t.host_key);
  if (entries.empty()) return {};
  if (auto written = write_known_hosts(file, entries); !written) {
    return refused(written.error().detail);
  }
  return {};
}

Outcome do_ssh(Context& ctx, const ConnectArgs& a) {
  GC_TRY(api, ctx.api());
  GC_TRY(inst, ctx.check((*api)->get("/instances" + seg(a.name))));
  GC_TRY(target, ssh_target(*inst));
  GC_TRY(file, known_hosts_file(ctx));
  GC_TRY(pinned, pin_host_keys(ctx, *file, {*target}));
  auto argv = ssh_argv(*target, *file, identity_of(a), a.command);
  if (!argv) return usage_error(argv.error().detail);

  ctx.out().flush();
  ctx.err().flush();
  using ExecFn = decltype(Deps::exec);
  const ExecFn exec = ctx.deps().exec ? ctx.deps().exec : ExecFn(exec_program);
  auto status = exec(*argv);
  if (!status) {
    return refused(status.error().detail + " (is the OpenSSH client installed and on PATH?)");
  }
  if (*status == 0) return {};
  return tl::unexpected(Failure{*status, ""});  // ssh said why on its own stderr
}

Outcome do_ssh_config(Context& ctx, const ConnectArgs& a) {
  GC_TRY(api, ctx.api());
  std::vector<SshTarget> targets;
  if (a.names.empty()) {
    GC_TRY(list, ctx.check((*api)->get_all("/instances")));
    for (const auto& inst : items_of(*list)) {
      if (text(inst, "state") != "running") continue;
      auto target = ssh_target(inst);
      if (!target) {
        // "error: instance x has ..." → a note; the others still get their blocks.
        std::string why = target.error().message;
        if (why.starts_with("error: ")) why.erase(0, 7);
        ctx.err() << "note: skipped " << why << "\n";
        continue;
      }
      targets.push_back(std::move(*target));
    }
  } else {
    for (const auto& name : a.names) {
      GC_TRY(inst, ctx.check((*api)->get("/instances" + seg(name))));
      GC_TRY(target, ssh_target(*inst));
      targets.push_back(std::move(*target));
    }
  }
  GC_TRY(file, known_hosts_file(ctx));
  std::vector<std::string> blocks;
  json::array docs;
  for (const auto& t : targets) {
    auto block = ssh_config_block(t, *file, identity_of(a));
    if (!block) return usage_error(block.error().detail);
    blocks.push_back(std::move(*block));
    json::object doc{{"id", t.id},
                     {"name", t.name},
                     {"host", t.host},
                     {"port", t.port},
                     {"user", t.user},
                     {"host_key", t.host_key},
                     {"host_key_alias", host_key_alias(t.id)},
                     {"known_hosts_file", file->string()},
                     {"config", blocks.back()}};
    docs.push_back(std::move(doc));
  }
  GC_TRY(pinned, pin_host_keys(ctx, *file, targets));
  if (targets.empty() && a.names.empty() && !ctx.json()) {
    ctx.err() << "note: no running instance with SSH access\n";
  }
  ctx.print(json::value(std::move(docs)), [&] {
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      if (i > 0) ctx.out() << "\n";
      ctx.out() << blocks[i];
    }
  });
  return {};
}

// --- events -------------------------------------------------------------------------------

// Event text is the server's: no terminal control sequences get through.
std::string printable(std::string s) {
  for (char& c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) c = ' ';
  }
  return s;
}

std::vector<std::string> event_row(const json::value& e) {
  return {text(e, "seq"), text(e, "time"), printable(text(e, "type")),
          printable(text(e, "resource")), printable(text(e, "message", ""))};
}

std::int64_t seq_of(const json::value& e) { return integer(e, "seq").value_or(0); }

Outcome do_events_list(Context& ctx, const ConnectArgs& a) {
  GC_TRY(api, ctx.api());
  constexpr std::size_t kPage = 1000;
  constexpr std::size_t kMaxEvents = 100000;
  std::int64_t since = std::max<std::int64_t>(a.since_seq, 0);
  json::array all;
  // Paged by seq (the server answers oldest first, after since_seq).
  for (;;) {
    GC_TRY(page, ctx.check((*api)->get(fmt::format("/events?since_seq={}&limit={}", since, kPage))));
    const auto& items = items_of(*page);
    std::int64_t last = since;
    for (const auto& e : items) {
      last = std::max(last, seq_of(e));
      all.push_back(e);
    }
    const json::value* next = member(*page, "next_cursor");
    if (items.size() < kPage || next == nullptr || last <= since || all.size() >= kMaxEvents) {
      break;
    }
    since = last;
  }
  std::stable_sort(all.begin(), all.end(),
                   [](const json::value& x, const json::value& y) { return seq_of(x) < seq_of(y); });
  json::value doc = json::object{{"items", std::move(all)}, {"next_cursor", nullptr}};
  ctx.print(doc, [&] {
    Table table({"SEQ", "TIME", "TYPE", "RESOURCE", "MESSAGE"});
    for (const auto& e : items_of(doc)) table.add_row(event_row(e));
    ctx.out() << table.render();
  });
  return {};
}

// A row of the live table: fixed columns, since the widths of what comes are not known.
std::string follow_line(const std::vector<std::string>& cells) {
  std::string line = fmt::format("{:<7} {:<20}  {:<22} {:<16}  {}", cells[0], cells[1], cells[2],
                                 cells[3], cells[4]);
  while (!line.empty() && line.back() == ' ') line.pop_back();
  return line + "\n";
}

constexpr int kMaxReconnects = 20;

std::chrono::milliseconds backoff(int failures, const SseParser& parser) {
  if (auto retry = parser.retry_ms(); retry && failures <= 1) {
    return std::chrono::milliseconds(std::clamp<std::int64_t>(*retry, 100, 60000));
  }
  std::chrono::milliseconds delay = 1s;
  for (int i = 1; i < failures && delay < 15s; ++i) delay *= 2;
  return std::min<std::chrono::milliseconds>(delay, 15s);
}

Outcome do_events_follow(Context& ctx, const ConnectArgs& a) {
  GC_TRY(api, ctx.api());  // checks the endpoint; the 401 hint needs it too
  GC_TRY(settings, ctx.settings());
  auto endpoint = parse_endpoint(settings->endpoint);
  if (!endpoint) return usage_error(endpoint.error().detail);
  using StreamFn = decltype(Deps::stream);
  const StreamFn stream =
      ctx.deps().stream ? ctx.deps().stream
                        : StreamFn([](const Endpoint& ep, const HttpRequest& req,
                                      const std::function<bool(std::string_view)>& on_data) {
                            return stream_http(ep, req, on_data);
                          });

  SseParser parser;
  if (a.since_seq >= 0) parser.set_last_event_id(std::to_string(a.since_seq));
  std::optional<std::int64_t> last_printed;
  bool malformed_noted = false;

  auto on_event = [&](const SseEvent& event) {
    boost::system::error_code ec;
    json::value doc = json::parse(event.data, ec);
    if (ec || !doc.is_object()) {
      if (ctx.json()) {
        if (!malformed_noted) ctx.err() << "note: skipped an event whose data is not a JSON object\n";
        malformed_noted = true;
        return;
      }
      doc = json::object{{"seq", event.id}, {"type", event.type}, {"message", event.data}};
    }
    if (!member(doc, "seq") && !event.id.empty()) doc.as_object()["seq"] = event.id;
    if (!member(doc, "type")) doc.as_object()["type"] = event.type;
    // A server that replays what we already have: print each seq once.
    if (auto seq = integer(doc, "seq")) {
      if (last_printed && *seq <= *last_printed) return;
      last_printed = *seq;
    }
    if (ctx.json()) {
      ctx.out() << json::serialize(doc) << "\n";
    } else {
      ctx.out() << follow_line(event_row(doc));
    }
    ctx.out().flush();
  };

  if (!ctx.json()) {
    ctx.out() << follow_line({"SEQ", "TIME", "TYPE", "RESOURCE", "MESSAGE"});
    ctx.out().flush();
  }

  int failures = 0;
  bool outage = false;
  for (;;) {
    HttpRequest request;
    request.method = "GET";
    request.target = endpoint->base_path + "/api/v1/events/stream";
    request.headers.emplace_back("Accept", "text/event-stream");
    if (!settings->token.empty()) {
      request.headers.emplace_back("Authorization", "Bearer " + settings->token);
    }
    if (!parser.last_event_id().empty()) {
      request.headers.emplace_back("Last-Event-ID", parser.last_event_id());
    }
    parser.reset();
    bool got_data = false;
    bool not_sse = false;
    auto on_data = [&](std::string_view chunk) {
      if (!got_data && outage) {
        ctx.err() << "note: reconnected"
                  << (parser.last_event_id().empty() ? std::string()
                                                     : " after event " + parser.last_event_id())
                  << "\n";
        outage = false;
      }
      got_data = true;
      if (!parser.feed(chunk, on_event)) {
        not_sse = true;
        return false;
      }
      return true;
    };
    Result<HttpResponse> answer = stream(*endpoint, request, on_data);
    if (not_sse) {
      return refused(fmt::format("the event stream from {} is malformed (a line or event "
                                 "over the size limits)",
                                 endpoint->url));
    }

    std::string why;
    std::chrono::milliseconds wait{0};
    if (!answer) {
      why = answer.error().detail;
    } else if (answer->status / 100 == 2) {
      if (!answer->content_type.starts_with("text/event-stream")) {
        return refused(fmt::format("{} did not answer with an event stream (Content-Type: {})",
                                   endpoint->url,
                                   answer->content_type.empty() ? "none" : answer->content_type));
      }
      why = "the server closed the event stream";
    } else {
      Error error = problem_to_error(*answer);
      const bool transient = error.code == ErrorCode::unavailable ||
                             error.code == ErrorCode::rate_limited || answer->status == 502 ||
                             answer->status == 504;
      if (!transient) {
        auto failure = ctx.check(tl::unexpected(std::move(error)));
        return tl::unexpected(std::move(failure.error()));
      }
      why = error.detail;
      if (error.retry_after_seconds > 0) {
        wait = std::chrono::seconds(std::min<std::int64_t>(error.retry_after_seconds, 300));
      }
    }

    if (got_data) failures = 0;
    if (++failures > kMaxReconnects) {
      return refused(fmt::format("gave up on the event stream after {} attempts: {}",
                                 kMaxReconnects, why));
    }
    if (!outage) {
      ctx.err() << "note: " << why << "; reconnecting…\n";
      outage = true;
    }
    ctx.err().flush();
    ctx.deps().sleep(wait.count() > 0 ? wait : backoff(failures, parser));
  }
}

}  // namespace

void add_connect_commands(CLI::App& app, Registry& registry) {
  auto a = std::make_shared<ConnectArgs>();

  auto* ssh = app.add_subcommand(
      "ssh", "ssh into a running instance, pinning its host key (gpucloud ssh NAME -- CMD...)");
  ssh->add_option("NAME", a->name, "instance name or id")->required();
  ssh->add_option("COMMAND", a->command, "a command to run instead of a shell (after --)");
  ssh->add_option("-i,--identity", a->identity, "private key file (ssh -i)");
  registry.on(ssh, [a](Context& ctx) { return do_ssh(ctx, *a); });

  auto* config = app.add_subcommand(
      "ssh-config", "print Host blocks for ~/.ssh/config (named or all running instances)");
  config->add_option("NAME", a->names, "instance names or ids (default: all running)");
  config->add_option("-i,--identity", a->identity, "private key file (IdentityFile)");
  registry.on(config, [a](Context& ctx) { return do_ssh_config(ctx, *a); });

  auto* events = app.add_subcommand("events", "what happened to your resources");
  events->add_flag("-f,--follow", a->follow, "keep printing events as they happen");
  auto* since = events->add_option("--since-seq", a->since_seq, "only events after this seq");
  registry.on(events, [a, since](Context& ctx) -> Outcome {
    if (since->count() == 0) {
      a->since_seq = -1;
    } else if (a->since_seq < 0) {
      return usage_error("--since-seq: expected an event seq (0 or more)");
    }
    return a->follow ? do_events_follow(ctx, *a) : do_events_list(ctx, *a);
  });
}

}  // namespace gpucloud::cli

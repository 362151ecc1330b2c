// admin host join-token NAME [--ttl 1h] | admin host revoke NAME (issue 26: remote agents'
// join tokens and certificates). Added under `admin host`, beside drain/undrain/remove.
#include <memory>
#include <ostream>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/output.h"

namespace gpucloud::cli {

namespace {

struct HostPkiArgs {
  std::string name;
  std::string ttl;
};

Outcome do_join_token(Context& ctx, const HostPkiArgs& a) {
  boost::json::object body{{"host", a.name}};
  if (!a.ttl.empty()) {
    GC_TRY(seconds, parse_duration_seconds(a.ttl));
    body["ttl_seconds"] = *seconds;
  }
  GC_TRY(api, ctx.api());
  GC_TRY(made, ctx.check(post_idempotent(ctx, **api, "/admin/hosts/join-token", body)));
  ctx.print(*made, [&] {
    const std::string host = text(*made, "host", a.name);
    if (!member(*made, "token")) {
      // A retried request whose first answer was lost: the server shows a token only once.
      ctx.out() << fmt::format(
          "A join token for host {} was made, but its answer was lost on the way; make another one.\n", host);
      return;
    }
    ctx.out() << fmt::format("Join token for host {} (single use, expires {}):\n  {}\n", host, text(*made, "expires_at"),
                             text(*made, "token"));
    ctx.out() << fmt::format("On the host, run:\n  {}\n", text(*made, "join_command"));
    ctx.out() << fmt::format("The agent checks the control plane's CA: sha256 {}\n", text(*made, "ca_fingerprint"));
  });
  return {};
}

Outcome do_revoke(Context& ctx, const HostPkiArgs& a) {
  GC_TRY(api, ctx.api());
  GC_TRY(answer, ctx.check((*api)->post("/admin/hosts" + seg(a.name) + "/revoke-certificate", boost::json::object{})));
  ctx.print(*answer, [&] {
    auto revoked = integer(*answer, "revoked").value_or(0);
    if (revoked == 0) {
      ctx.out() << fmt::format("Host {}'s certificates were already revoked.\n", a.name);
    } else {
      ctx.out() << fmt::format("Revoked {} certificate{} of host {}: its agent is refused until it joins again.\n",
                               revoked, revoked == 1 ? "" : "s", a.name);
    }
  });
  return {};
}

}  // namespace

void add_admin_host_pki_commands(CLI::App& app, Registry& registry) {
  CLI::App* admin = app.get_subcommand("admin");
  // `admin host` may already be there (drain, undrain, remove): these join it.
  CLI::App* host = nullptr;
  try {
    host = admin->get_subcommand("host");
  } catch (const CLI::OptionNotFound&) {
    host = admin->add_subcommand("host", "one host: drain, undrain, remove, join-token, revoke");
    host->require_subcommand(1);
  }
  auto a = std::make_shared<HostPkiArgs>();
  auto* join = host->add_subcommand("join-token", "a single-use token that lets a remote host's agent join");
  join->add_option("NAME", a->name, "the host's name")->required();
  join->add_option("--ttl", a->ttl, "how long it may be used: 90m, 1h, 2d (default: the server's, 1h)");
  registry.on(join, [a](Context& ctx) { return do_join_token(ctx, *a); });
  auto* revoke = host->add_subcommand("revoke", "revoke a remote host's certificates: its agent is refused");
  revoke->add_option("NAME", a->name, "the host's name")->required();
  registry.on(revoke, [a](Context& ctx) { return do_revoke(ctx, *a); });
}

}  // namespace gpucloud::cli

// Operator routes of the remote agents' PKI (issue 26): POST /admin/hosts/join-token (a
// single-use token admitting one host, with the command that joins it) and
// POST /admin/hosts/{name}/revoke-certificate. The token and its secret are never logged or
// stored (only a hash; the idempotency replay is stored without them).
#include <boost/json.hpp>

#include "agent/local_agent.h"
#include "api/json_input.h"
#include "events/events.h"
#include "pki/certificate_authority.h"
#include "pki/host_certificates.h"
#include "pki/join_tokens.h"
#include "server/app.h"

namespace gpucloud::server {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

constexpr std::int64_t kPkiMinTtlSeconds = 60;
constexpr std::int64_t kPkiMaxTtlSeconds = 7 * 86400;

std::int64_t pki_unix_seconds(SysTime t) { return to_unix_micros(t) / 1'000'000; }

// `gpucloud-agent --config agent.toml --join URL --token TOKEN`, as the operator runs it on
// the host.
std::string pki_join_command(const std::string& url, const std::string& token) {
  return "gpucloud-agent --config agent.toml --join " + url + " --token " + token;
}

asio::awaitable<Result<Response>> create_join_token(RequestContext& ctx) {
  const config::Config& cfg = ctx.app.config();
  const pki::CertificateAuthority* ca = ctx.app.agents_ca();
  if (!cfg.agents.enabled() || ca == nullptr)
    co_return fail(ErrorCode::conflict, "agents listener is not configured ([agents] listen in the daemon's config)");
  auto body = api::parse_object(ctx.request.body);
  if (!body) co_return tl::unexpected(body.error());
  if (auto s = api::only_fields(*body, {"host", "ttl_seconds"}); !s) co_return tl::unexpected(s.error());
  auto host = api::required_string(*body, "host");
  if (!host) co_return tl::unexpected(host.error());
  if (!config::is_valid_host_name(*host))
    co_return fail(ErrorCode::invalid_argument, "host: not a host name (letters, digits, '-', '.', '_'; at most 63)");
  auto ttl_field = api::optional_int(*body, "ttl_seconds");
  if (!ttl_field) co_return tl::unexpected(ttl_field.error());
  std::chrono::seconds ttl = cfg.agents.join_token_ttl;
  if (*ttl_field) {
    if (**ttl_field < kPkiMinTtlSeconds || **ttl_field > kPkiMaxTtlSeconds)
      co_return fail(ErrorCode::invalid_argument, "ttl_seconds: must be from 60 to 604800");
    ttl = std::chrono::seconds(**ttl_field);
  }
  // A host this daemon serves in-process cannot also join as a remote agent.
  for (const auto& h : agent::LocalAgent::effective_hosts(cfg)) {
    if (h.name == *host)
      co_return fail(ErrorCode::conflict, "host " + *host + " is served in-process by this control plane ([[hosts]])");
  }
  // Tokens expire by the machine's clock, as the join handshake redeems them (and as sessions
  // expire); the event is stamped with the platform clock like every event.
  auto effect = [host = *host, fingerprint = ca->fingerprint(), ttl, url = cfg.agents.url, user = ctx.caller().user.id,
                 now = ctx.app.clock().now(), wall = system_now()](store::Database& db) -> Result<Response> {
    auto token = pki::create_join_token(db, host, fingerprint, ttl, user, pki_unix_seconds(wall));
    if (!token) return tl::unexpected(token.error());
    SysTime expires = from_unix_micros(token->expires_at * 1'000'000);
    if (auto s = events::record(db, now, "host.join_token_created", host, std::nullopt,
                                "a join token for host " + host + " was made; it expires at " + format_rfc3339(expires),
                                {{"host", host}, {"expires_at", format_rfc3339(expires)}, {"created_by", user}});
        !s)
      return tl::unexpected(s.error());
    json::object o{{"token", token->token},
                   {"host", token->host_name},
                   {"expires_at", format_rfc3339(expires)},
                   {"ca_fingerprint", token->ca_fingerprint},
                   {"join_command", pki_join_command(url, token->token)}};
    return json_response(201, o);
  };
  // Shown once: the stored answer (and so a replay) has neither the token nor the command.
  auto without_token = [](const Response& r) {
    json::object o = json::parse(r.body).as_object();
    o.erase("token");
    o.erase("join_command");
    o["token_redacted"] = true;
    return json::serialize(o);
  };
  co_return co_await ctx.app.run_idempotent(ctx, std::move(effect), std::move(without_token));
}

asio::awaitable<Result<Response>> revoke_certificate(RequestContext& ctx) {
  std::string host = ctx.param("name");
  auto revoke = [host, now = ctx.app.clock().now(), wall = system_now()](store::Database& db) -> Result<Response> {
    auto current = pki::current_host_certificate(db, host);
    if (!current) return tl::unexpected(current.error());
    if (!*current) return fail(ErrorCode::not_found, "host " + host + " has no certificate");
    auto revoked = pki::revoke_host_certificates(db, host, pki_unix_seconds(wall));
    if (!revoked) return tl::unexpected(revoked.error());
    if (*revoked > 0) {
      if (auto s = events::record(db, now, "host.certificate_revoked", host, std::nullopt,
                                  "host " + host + "'s certificates were revoked (" + std::to_string(*revoked) + ")",
                                  {{"host", host}, {"revoked", *revoked}});
          !s)
        return tl::unexpected(s.error());
    }
    return json_response(200, json::object{{"host", host}, {"revoked", *revoked}});
  };
  co_return co_await ctx.app.store().write(std::move(revoke));
}

}  // namespace

void register_agent_pki_routes(App& app) {
  auto& r = app.router();
  // Literal before the {name} routes of the same depth.
  r.add("POST", "/api/v1/admin/hosts/join-token", Access::admin, "admin",
        "A single-use token that admits one remote host (gpucloud-agent --join)", create_join_token);
  r.add("POST", "/api/v1/admin/hosts/{name}/revoke-certificate", Access::admin, "admin",
        "Revoke every certificate of a remote host", revoke_certificate);
}

}  // namespace gpucloud::server

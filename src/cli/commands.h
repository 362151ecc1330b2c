#pragma once
// Each commands_*.cpp adds its subcommands to the app and their handlers to the registry.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include <boost/json/object.hpp>

#include "cli/api_client.h"
#include "cli/app.h"

namespace gpucloud::cli {

void add_auth_commands(CLI::App& app, Registry& registry);
void add_market_commands(CLI::App& app, Registry& registry);
void add_instance_commands(CLI::App& app, Registry& registry);
void add_top_command(CLI::App& app, Registry& registry);  // top NAME: live GPU/CPU/memory
void add_set_command(CLI::App& app, Registry& registry);  // set NAME: PATCH /instances/{id}
void add_key_commands(CLI::App& app, Registry& registry);
void add_disk_commands(CLI::App& app, Registry& registry);     // disk ..., snapshot ...
void add_admin_commands(CLI::App& app, Registry& registry);
// admin host drain|undrain|remove NAME (commands_admin_hosts.cpp), under `admin`.
void add_admin_host_commands(CLI::App& admin, Registry& registry);
void add_connect_commands(CLI::App& app, Registry& registry);  // ssh, ssh-config, events
void add_image_commands(CLI::App& app, Registry& registry);    // save-image, image rm|restore
void add_security_group_commands(CLI::App& app, Registry& registry);  // sg create|ls|show|set|rm
// balance, ledger, usage, statement, idle, alert set|show|clear
void add_billing_commands(CLI::App& app, Registry& registry);
// admin host join-token NAME [--ttl] | revoke NAME (commands_admin_host_pki.cpp): joins the
// `admin host` group when it exists, makes it otherwise. Call after add_admin_commands.
void add_admin_host_pki_commands(CLI::App& app, Registry& registry);

// Human renderings shared with the tests.
std::string render_market(const boost::json::value& market);
std::string render_instances(const boost::json::value& instances, bool show_owner);
// An instance as `show` prints it (--json: the API's document), its group named by a lookup.
void print_instance(Context& ctx, ApiClient& api, const boost::json::value& instance);
// One frame of `gpucloud top`: the instance (GET /instances/{id}) and its metrics answer.
std::string render_top_frame(const boost::json::value& instance, const boost::json::value& metrics);
std::string render_hosts(const boost::json::value& hosts);
std::string render_security_groups(const boost::json::value& groups);
// A group's fields, rules table and the instances using it (`instance_names`: id → name,
// for those it knows).
std::string render_security_group(const boost::json::value& group,
                                  const std::map<std::string, std::string>& instance_names);

// Billing answers (GET /billing/...) as the commands print them.
std::string render_balance(const boost::json::value& account);
std::string render_ledger(const boost::json::value& page);
// `admin ledger USER [--since --until --limit]`: GET /admin/users/{id}/ledger, as `ledger` prints.
void add_admin_ledger_command(CLI::App& admin, Registry& registry);
std::string render_usage(const boost::json::value& usage, bool by_day);
std::string render_statement(const boost::json::value& statement);
std::string render_idle(const boost::json::value& idle);
// A usage item's quantity: unit second as hours ("1.50 h"), gib_hour as "N GiB·h".
std::string format_usage_quantity(const boost::json::value& item);

// --since/--until: an RFC 3339 time, or YYYY-MM-DD for that day at 00:00 UTC → the time in
// UTC as the API writes it; anything else is a usage error naming `option`.
Expected<std::string> parse_billing_time(std::string_view value, std::string_view option);
// "2025-01" (month 01..12).
bool is_statement_month(std::string_view month);

// --allow PROTO:PORT[-PORT][@CIDR] → a rule {protocol, port_min, port_max, source}; the
// source defaults to 0.0.0.0/0. Bad syntax is a usage error naming what is wrong.
Expected<boost::json::object> parse_allow_rule(std::string_view text);

// "3600", "90m", "2h", "30d" → seconds (admin clock advance).
Expected<std::int64_t> parse_duration_seconds(std::string_view text);

// "/" + the escaped name or id, for building API paths.
inline std::string seg(std::string_view name_or_id) { return "/" + url_escape(name_or_id); }

// POST with one Idempotency-Key for this invocation, retried (same key, so the effect happens
// once) when the server could not be reached or answered `unavailable`.
Result<boost::json::value> post_idempotent(Context& ctx, ApiClient& api, std::string_view path,
                                           const boost::json::value& body);

// Reads a small text file given on the command line ("~/" expanded with $HOME, "-" = stdin).
Expected<std::string> read_user_file(Context& ctx, const std::string& path, std::string_view what);

}  // namespace gpucloud::cli

// Unwraps an Expected/Result-like value or returns its failure from the enclosing handler.
#define GC_TRY(var, expr)                        \
  auto var = (expr);                             \
  if (!var) return tl::unexpected(std::move(var.error()))

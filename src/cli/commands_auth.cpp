// register, login, logout, whoami, passwd, token create|ls|rm.
#include <memory>
#include <ostream>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/output.h"

namespace gpucloud::cli {

namespace json = boost::json;

namespace {

struct AuthOptions {
  std::string username;
  std::string email;
  bool password_stdin = false;
  std::string token_name;
  std::string token_id;
};

Outcome do_register(Context& ctx, const AuthOptions& o) {
  GC_TRY(api, ctx.api());
  (*api)->set_token("");
  GC_TRY(password, ctx.ask_new_password(o.password_stdin, "Password"));
  json::object body{{"username", o.username}, {"password", *password}};
  if (!o.email.empty()) body["email"] = o.email;
  GC_TRY(user, ctx.check((*api)->post("/auth/register", body)));
  ctx.print(*user, [&] {
    ctx.out() << fmt::format("Registered {} ({}). Log in with: gpucloud login --username {}\n",
                             text(*user, "username", o.username), text(*user, "id"),
                             text(*user, "username", o.username));
  });
  return {};
}

Outcome do_login(Context& ctx, const AuthOptions& o) {
  GC_TRY(settings, ctx.settings());
  GC_TRY(api, ctx.api());
  (*api)->set_token("");
  GC_TRY(path, ctx.config_file());
  GC_TRY(stored, ctx.stored_config());
  std::string username = o.username;
  if (username.empty()) {
    GC_TRY(answer, ctx.ask("Username: ", false, "username"));
    username = *answer;
  }
  if (username.empty()) return usage_error("no username given");
  std::string password;
  if (o.password_stdin) {
    GC_TRY(line, ctx.read_stdin_line("password"));
    password = *line;
  } else {
    GC_TRY(answer, ctx.ask("Password: ", true, "password"));
    password = *answer;
  }
  GC_TRY(session, ctx.check((*api)->post("/auth/login", json::object{{"username", username},
                                                                      {"password", password}})));
  std::string token = text(*session, "token", "");
  if (token.empty()) return refused("the server's login answer has no token");

  CliConfig updated = *stored;
  updated.endpoint = settings->endpoint;
  updated.token = token;
  if (auto saved = save_config(*path, updated); !saved) return refused(saved.error().detail);

  ctx.print(*session, [&] {
    ctx.out() << fmt::format("Logged in to {} as {}", settings->endpoint, username);
    if (auto expires = text(*session, "expires_at"); expires != "-") {
      ctx.out() << fmt::format(" (session expires {})", expires);
    }
    ctx.out() << ".\n";
  });
  if (auto env_token = ctx.deps().env("GPUCLOUD_TOKEN"); env_token && !env_token->empty()) {
    ctx.err() << "note: GPUCLOUD_TOKEN is set and overrides the stored token\n";
  }
  return {};
}

Outcome do_logout(Context& ctx) {
  GC_TRY(settings, ctx.settings());
  GC_TRY(api, ctx.api());
  if (settings->token.empty()) {
    if (!ctx.json()) ctx.out() << "Not logged in.\n";
    return {};
  }
  auto answer = (*api)->post("/auth/logout", json::object{});
  // Forget the stored token whatever the server said: that is what the user asked for.
  if (settings->token_source == Source::file) {
    GC_TRY(path, ctx.config_file());
    GC_TRY(stored, ctx.stored_config());
    CliConfig updated = *stored;
    updated.token.clear();
    if (auto saved = save_config(*path, updated); !saved) return refused(saved.error().detail);
  }
  if (!answer && answer.error().code != ErrorCode::unauthorized) {
    std::string message = error_message(answer.error());
    if (settings->token_source == Source::file) {
      message += "\nnote: the token was removed from the config file, but the server did not "
                 "confirm it is revoked";
    }
    return tl::unexpected(Failure{kExitRefused, message});
  }
  ctx.print(answer ? *answer : json::value(nullptr), [&] {
    ctx.out() << fmt::format("Logged out of {}.\n", settings->endpoint);
  });
  if (settings->token_source == Source::env && !ctx.json()) {
    ctx.err() << "note: the session is revoked; unset GPUCLOUD_TOKEN too\n";
  }
  return {};
}

Outcome do_whoami(Context& ctx) {
  GC_TRY(settings, ctx.settings());
  GC_TRY(api, ctx.api());
  GC_TRY(me, ctx.check((*api)->get("/me")));
  ctx.print(*me, [&] {
    KeyValues kv;
    kv.add("username", text(*me, "username"));
    kv.add("id", text(*me, "id"));
    kv.add("role", text(*me, "role"));
    if (member(*me, "email")) kv.add("email", text(*me, "email"));
    kv.add("created", text(*me, "created_at"));
    kv.add("endpoint", settings->endpoint);
    ctx.out() << kv.render();
  });
  return {};
}

Outcome do_passwd(Context& ctx, const AuthOptions& o) {
  GC_TRY(api, ctx.api());
  std::string old_password, new_password;
  if (o.password_stdin) {
    GC_TRY(a, ctx.read_stdin_line("current password"));
    GC_TRY(b, ctx.read_stdin_line("new password"));
    old_password = *a;
    new_password = *b;
  } else {
    GC_TRY(a, ctx.ask("Current password: ", true, "current password"));
    old_password = *a;
    GC_TRY(b, ctx.ask_new_password(false, "New password"));
    new_password = *b;
  }
  GC_TRY(answer, ctx.check((*api)->put("/me/password",
                                       json::object{{"old_password", old_password},
                                                    {"new_password", new_password}})));
  ctx.print(*answer, [&] {
    ctx.out() << "Password changed. Your other sessions are logged out.\n";
  });
  return {};
}

Outcome do_token_create(Context& ctx, const AuthOptions& o) {
  GC_TRY(api, ctx.api());
  GC_TRY(token,
         ctx.check(post_idempotent(ctx, **api, "/tokens", json::object{{"name", o.token_name}})));
  ctx.print(*token, [&] {
    // The secret alone on stdout (scripts capture it), the explanation on stderr.
    ctx.out() << text(*token, "token") << "\n";
    ctx.err() << fmt::format("Created API token {} ({}). It is shown only once: store it now.\n",
                             text(*token, "name", o.token_name), text(*token, "id"));
  });
  return {};
}

Outcome do_token_ls(Context& ctx) {
  GC_TRY(api, ctx.api());
  GC_TRY(tokens, ctx.check((*api)->get_all("/tokens")));
  ctx.print(*tokens, [&] {
    Table table({"ID", "NAME", "CREATED", "LAST USED", "EXPIRES"});
    for (const auto& t : items_of(*tokens)) {
      table.add_row({text(t, "id"), text(t, "name"), text(t, "created_at"),
                     text(t, "last_used_at"), text(t, "expires_at")});
    }
    ctx.out() << table.render();
  });
  return {};
}

Outcome do_token_rm(Context& ctx, const AuthOptions& o) {
  GC_TRY(api, ctx.api());
  GC_TRY(answer, ctx.check((*api)->del("/tokens" + seg(o.token_id))));
  ctx.print(*answer, [&] { ctx.out() << fmt::format("Revoked token {}.\n", o.token_id); });
  return {};
}

}  // namespace

void add_auth_commands(CLI::App& app, Registry& registry) {
  auto o = std::make_shared<AuthOptions>();

  auto* reg = app.add_subcommand("register", "create an account on the platform");
  reg->add_option("--username", o->username, "user name ([a-z][a-z0-9_-]{2,31})")->required();
  reg->add_option("--email", o->email, "e-mail address (optional)");
  reg->add_flag("--password-stdin", o->password_stdin,
                "read the password from the first line of standard input");
  registry.on(reg, [o](Context& ctx) { return do_register(ctx, *o); });

  auto* login = app.add_subcommand("login", "log in and store a session token");
  login->add_option("--username", o->username, "user name (asked when absent)");
  login->add_flag("--password-stdin", o->password_stdin,
                  "read the password from the first line of standard input");
  registry.on(login, [o](Context& ctx) { return do_login(ctx, *o); });

  auto* logout = app.add_subcommand("logout", "revoke the session and forget the stored token");
  registry.on(logout, [](Context& ctx) { return do_logout(ctx); });

  auto* whoami = app.add_subcommand("whoami", "show the logged-in user");
  registry.on(whoami, [](Context& ctx) { return do_whoami(ctx); });

  auto* passwd = app.add_subcommand("passwd", "change your password");
  passwd->add_flag("--password-stdin", o->password_stdin,
                   "read the current and the new password from two lines of standard input");
  registry.on(passwd, [o](Context& ctx) { return do_passwd(ctx, *o); });

  auto* token = app.add_subcommand("token", "API tokens (for scripts)");
  token->require_subcommand(1);
  auto* create = token->add_subcommand("create", "create an API token (shown once)");
  create->add_option("NAME", o->token_name, "token name")->required();
  registry.on(create, [o](Context& ctx) { return do_token_create(ctx, *o); });
  auto* ls = token->add_subcommand("ls", "list your API tokens");
  registry.on(ls, [](Context& ctx) { return do_token_ls(ctx); });
  auto* rm = token->add_subcommand("rm", "revoke an API token");
  rm->add_option("ID", o->token_id, "token id or name")->required();
  registry.on(rm, [o](Context& ctx) { return do_token_rm(ctx, *o); });
}

}  // namespace gpucloud::cli

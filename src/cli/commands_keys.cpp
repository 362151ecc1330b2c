// key add NAME --file PATH | ls | rm NAME  (/ssh-keys)
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

struct KeyArgs {
  std::string name;
  std::string file;
};

// "ssh-ed25519 AAAA… comment" → "ssh-ed25519 … comment" for the table.
std::string short_key(const std::string& key) {
  auto first = key.find(' ');
  if (first == std::string::npos) return key.substr(0, 24);
  auto second = key.find(' ', first + 1);
  std::string type = key.substr(0, first);
  std::string comment = second == std::string::npos ? "" : key.substr(second + 1);
  return comment.empty() ? type : type + " … " + comment;
}

Outcome do_add(Context& ctx, const KeyArgs& a) {
  GC_TRY(content, read_user_file(ctx, a.file, "public key file"));
  std::string key = *content;
  while (!key.empty() && (key.back() == '\n' || key.back() == '\r' || key.back() == ' ')) {
    key.pop_back();
  }
  if (key.find("PRIVATE KEY") != std::string::npos) {
    return usage_error(fmt::format("{} is a private key: give the public one (.pub)", a.file));
  }
  if (key.empty()) return usage_error(fmt::format("{} is empty", a.file));
  if (key.find('\n') != std::string::npos) {
    return usage_error(fmt::format("{} holds more than one line: give one public key", a.file));
  }
  GC_TRY(api, ctx.api());
  GC_TRY(added, ctx.check(post_idempotent(ctx, **api, "/ssh-keys",
                                          json::object{{"name", a.name}, {"public_key", key}})));
  ctx.print(*added, [&] {
    std::string fingerprint = text(*added, "fingerprint", "");
    ctx.out() << fmt::format("Added SSH key {} ({}){}.\n", text(*added, "name", a.name),
                             text(*added, "id"),
                             fingerprint.empty() ? "" : ", " + fingerprint);
  });
  return {};
}

Outcome do_ls(Context& ctx) {
  GC_TRY(api, ctx.api());
  GC_TRY(keys, ctx.check((*api)->get_all("/ssh-keys")));
  ctx.print(*keys, [&] {
    Table table({"NAME", "ID", "KEY", "CREATED"});
    for (const auto& k : items_of(*keys)) {
      std::string fp = text(k, "fingerprint", "");
      table.add_row({text(k, "name"), text(k, "id"),
                     fp.empty() ? short_key(text(k, "public_key", "")) : fp,
                     text(k, "created_at")});
    }
    ctx.out() << table.render();
  });
  return {};
}

Outcome do_rm(Context& ctx, const KeyArgs& a) {
  GC_TRY(api, ctx.api());
  GC_TRY(answer, ctx.check((*api)->del("/ssh-keys" + seg(a.name))));
  ctx.print(*answer, [&] { ctx.out() << fmt::format("Removed SSH key {}.\n", a.name); });
  return {};
}

}  // namespace

void add_key_commands(CLI::App& app, Registry& registry) {
  auto a = std::make_shared<KeyArgs>();
  auto* key = app.add_subcommand("key", "SSH public keys authorized on new instances");
  key->require_subcommand(1);

  auto* add = key->add_subcommand("add", "upload a public key");
  add->add_option("NAME", a->name, "key name")->required();
  add->add_option("--file", a->file, "public key file, e.g. ~/.ssh/id_ed25519.pub (- = stdin)")
      ->required();
  registry.on(add, [a](Context& ctx) { return do_add(ctx, *a); });

  auto* ls = key->add_subcommand("ls", "list your keys");
  registry.on(ls, [](Context& ctx) { return do_ls(ctx); });

  auto* rm = key->add_subcommand("rm", "delete a key");
  rm->add_option("NAME", a->name, "key name or id")->required();
  registry.on(rm, [a](Context& ctx) { return do_rm(ctx, *a); });
}

}  // namespace gpucloud::cli

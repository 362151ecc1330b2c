// admin host drain NAME | undrain NAME | remove NAME (issue 26's host states).
#include <memory>
#include <ostream>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/output.h"

namespace gpucloud::cli {

namespace {

struct AdminHostArgs {
  std::string name;
};

// POST /admin/hosts/{name}/drain|undrain or DELETE /admin/hosts/{name}: each answers the host.
Outcome change_host(Context& ctx, const AdminHostArgs& a, std::string_view action) {
  GC_TRY(api, ctx.api());
  const std::string path = "/admin/hosts" + seg(a.name);
  GC_TRY(host, ctx.check(action == "remove" ? (*api)->del(path)
                                            : (*api)->post(path + "/" + std::string(action), boost::json::object{})));
  ctx.print(*host, [&] {
    const std::string name = text(*host, "name", a.name);
    const std::string state = text(*host, "state", "");
    if (action == "drain") {
      ctx.out() << fmt::format("Host {} is draining: nothing new is placed there; what runs there stays.\n", name);
    } else if (action == "undrain") {
      ctx.out() << fmt::format("Host {} takes new instances and disks again (state {}).\n", name, state);
    } else {
      ctx.out() << fmt::format("Host {} is removed; its name may join again.\n", name);
    }
  });
  return {};
}

}  // namespace

void add_admin_host_commands(CLI::App& admin, Registry& registry) {
  auto a = std::make_shared<AdminHostArgs>();
  auto* host = admin.add_subcommand("host", "drain, undrain or remove a host");
  host->require_subcommand(1);
  auto* drain = host->add_subcommand("drain", "no new placements on the host; what runs there stays");
  drain->add_option("NAME", a->name, "host name or id")->required();
  registry.on(drain, [a](Context& ctx) { return change_host(ctx, *a, "drain"); });
  auto* undrain = host->add_subcommand("undrain", "let a drained host take placements again");
  undrain->add_option("NAME", a->name, "host name or id")->required();
  registry.on(undrain, [a](Context& ctx) { return change_host(ctx, *a, "undrain"); });
  auto* remove = host->add_subcommand("remove", "remove a host on which nothing lives any more");
  remove->add_option("NAME", a->name, "host name or id")->required();
  registry.on(remove, [a](Context& ctx) { return change_host(ctx, *a, "remove"); });
}

}  // namespace gpucloud::cli

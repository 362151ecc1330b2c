// disk create|ls|show|attach|detach|resize|snapshot|rm|restore, snapshot ls|rm|restore
// (/disks, /snapshots). Long operations (create, grow, snapshot) wait with a progress line
// unless --no-wait.
#include <chrono>
#include <memory>
#include <ostream>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/output.h"

namespace gpucloud::cli {

namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

constexpr auto kPoll = 300ms;
constexpr auto kDiskWaitLimit = std::chrono::minutes(30);

struct DiskArgs {
  std::string disk, name, zone, host, instance, path = "/root/data", snapshot, from_snapshot;
  std::int64_t size = 0;
  bool no_wait = false, deleted = false;
};

std::string tenths(std::chrono::steady_clock::duration d) {
  auto ms = std::max<std::int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
  return fmt::format("{}.{} s", ms / 1000, ms / 100 % 10);
}

// Polls `path` until its state is one of `done` (or error): "creating… available (1.2 s)"
// on stderr. `still` is a field that must change before the wait ends (a grow: size seen).
Expected<json::value> wait_until(Context& ctx, ApiClient& api, const std::string& path, json::value current,
                                 std::initializer_list<std::string_view> done, std::string_view what) {
  auto start = ctx.deps().now();
  std::string shown;
  for (;;) {
    std::string state = text(current, "state", "unknown");
    if (state != shown && !ctx.json()) {
      ctx.err() << (shown.empty() ? "" : " ") << state << (state == "error" ? "" : "…") << std::flush;
      shown = state;
    }
    bool finished = false;
    for (auto d : done) finished = finished || state == d;
    if (finished || state == "error") {
      if (!ctx.json()) ctx.err() << " (" << tenths(ctx.deps().now() - start) << ")\n";
      if (state == "error")
        return refused(fmt::format("{} {} failed: {}", what, text(current, "name"), text(current, "state_reason", "?")));
      return current;
    }
    if (ctx.deps().now() - start > kDiskWaitLimit)
      return refused(fmt::format("gave up waiting for {} {} (it is {})", what, text(current, "name"), state));
    ctx.deps().sleep(kPoll);
    auto next = api.get(path);
    if (!next) {
      if (next.error().code == ErrorCode::unavailable) continue;
      return api_failure(next.error());
    }
    current = std::move(*next);
  }
}

std::string used_of(const json::value& d) {
  auto used = integer(d, "used_bytes");
  return used ? format_bytes(*used) : "-";
}

void print_disk_line(Context& ctx, const json::value& d, std::string_view verb) {
  ctx.out() << fmt::format("Disk {} ({}) {}: {} GiB, {}{}.\n", text(d, "name"), text(d, "id"), verb, text(d, "size_gib"),
                           text(d, "state"),
                           text(d, "instance", "").empty() ? ""
                                                           : fmt::format(", on {} at {}", text(d, "instance"), text(d, "mount_path")));
}

Outcome do_create(Context& ctx, const DiskArgs& a) {
  json::object body{{"name", a.disk}};
  if (a.size > 0) body["size_gib"] = a.size;
  if (!a.zone.empty()) body["zone"] = a.zone;
  if (!a.host.empty()) body["host"] = a.host;
  if (!a.from_snapshot.empty()) body["from_snapshot"] = a.from_snapshot;
  if (a.size <= 0 && a.from_snapshot.empty()) return usage_error("disk create: --size GIB is required (or --from-snapshot)");
  GC_TRY(api, ctx.api());
  GC_TRY(created, ctx.check(post_idempotent(ctx, **api, "/disks", body)));
  json::value disk = *created;
  if (!a.no_wait) {
    GC_TRY(ready, wait_until(ctx, **api, "/disks" + seg(text(disk, "id")), disk, {"available", "attached"}, "disk"));
    disk = *ready;
  }
  ctx.print(disk, [&] { print_disk_line(ctx, disk, a.no_wait ? "is being created" : "created"); });
  return {};
}

Outcome do_ls(Context& ctx, const DiskArgs& a) {
  GC_TRY(api, ctx.api());
  GC_TRY(disks, ctx.check((*api)->get_all(a.deleted ? "/disks?state=deleted" : "/disks")));
  ctx.print(*disks, [&] {
    Table table({"NAME", "ID", "SIZE", "USED", "STATE", "HOST", "INSTANCE", "MOUNT", a.deleted ? "DELETED" : "CREATED"});
    for (const auto& d : items_of(*disks))
      table.add_row({text(d, "name"), text(d, "id"), text(d, "size_gib") + " GiB", used_of(d), text(d, "state"),
                     text(d, "host"), text(d, "instance"), text(d, "mount_path"),
                     a.deleted ? text(d, "deleted_at") : text(d, "created_at")});
    ctx.out() << table.render();
  });
  return {};
}

Outcome do_show(Context& ctx, const DiskArgs& a) {
  GC_TRY(api, ctx.api());
  GC_TRY(d, ctx.check((*api)->get("/disks" + seg(a.disk))));
  ctx.print(*d, [&] { ctx.out() << pretty_json(*d) << "\n"; });
  return {};
}

// POST /disks/{id}/VERB with `body`; `done` states end the wait (empty: answer as it is).
Outcome do_disk_action(Context& ctx, const DiskArgs& a, const std::string& verb, const json::object& body,
                       std::string_view past, bool wait) {
  GC_TRY(api, ctx.api());
  GC_TRY(answer, ctx.check((*api)->post("/disks" + seg(a.disk) + "/" + verb, body)));
  json::value disk = *answer;
  if (wait && !a.no_wait) {
    // A grow is done when the disk reports the new size as applied: it stays attached or
    // available throughout, so wait for the disk.resized event's effect via the size.
    auto start = ctx.deps().now();
    for (;;) {
      GC_TRY(now, ctx.check((*api)->get("/disks" + seg(text(disk, "id")))));
      disk = *now;
      GC_TRY(events, ctx.check((*api)->get("/events?resource=" + url_escape(text(disk, "id")) + "&limit=1000")));
      bool seen = false, failed = false;
      for (const auto& e : items_of(*events)) {
        if (text(e, "type") == "disk.resized" && integer(member(e, "data") ? *member(e, "data") : json::value(), "size_gib") == a.size)
          seen = true;
        if (text(e, "type") == "disk.resize_failed") failed = true;
      }
      if (seen) break;
      if (failed && integer(disk, "size_gib") != a.size)
        return refused(fmt::format("disk {} could not grow (see `gpucloud events`)", text(disk, "name")));
      if (ctx.deps().now() - start > kDiskWaitLimit) return refused("gave up waiting for the disk to grow");
      ctx.deps().sleep(kPoll);
    }
  }
  ctx.print(disk, [&] { print_disk_line(ctx, disk, past); });
  return {};
}

Outcome do_rm(Context& ctx, const DiskArgs& a) {
  GC_TRY(api, ctx.api());
  GC_TRY(answer, ctx.check((*api)->del("/disks" + seg(a.disk))));
  ctx.print(*answer, [&] {
    if (text(*answer, "state") == "deleted")
      ctx.out() << fmt::format("Disk {} moved to the recycle bin; `gpucloud disk restore {}` brings it back.\n",
                               text(*answer, "name"), text(*answer, "id"));
    else
      ctx.out() << fmt::format("Disk {} is being destroyed.\n", text(*answer, "name"));
  });
  return {};
}

Outcome do_snapshot(Context& ctx, const DiskArgs& a) {
  GC_TRY(api, ctx.api());
  GC_TRY(taken, ctx.check(post_idempotent(ctx, **api, "/disks" + seg(a.disk) + "/snapshots", json::object{{"name", a.snapshot}})));
  json::value snap = *taken;
  if (!a.no_wait) {
    GC_TRY(ready, wait_until(ctx, **api, "/snapshots" + seg(text(snap, "id")), snap, {"available"}, "snapshot"));
    snap = *ready;
  }
  ctx.print(snap, [&] {
    ctx.out() << fmt::format("Snapshot {} ({}) of disk {}: {}.\n", text(snap, "name"), text(snap, "id"), a.disk,
                             text(snap, "state"));
  });
  return {};
}

Outcome do_snapshot_ls(Context& ctx, const DiskArgs& a) {
  GC_TRY(api, ctx.api());
  GC_TRY(snaps, ctx.check((*api)->get_all(a.deleted ? "/snapshots?state=deleted" : "/snapshots")));
  ctx.print(*snaps, [&] {
    Table table({"NAME", "ID", "DISK", "SIZE", "USED", "STATE", a.deleted ? "DELETED" : "CREATED"});
    for (const auto& s : items_of(*snaps))
      table.add_row({text(s, "name"), text(s, "id"), text(s, "disk"), text(s, "size_gib") + " GiB", used_of(s),
                     text(s, "state"), a.deleted ? text(s, "deleted_at") : text(s, "created_at")});
    ctx.out() << table.render();
  });
  return {};
}

Outcome do_snapshot_rm(Context& ctx, const DiskArgs& a) {
  GC_TRY(api, ctx.api());
  GC_TRY(answer, ctx.check((*api)->del("/snapshots" + seg(a.snapshot))));
  ctx.print(*answer, [&] {
    ctx.out() << fmt::format("Snapshot {} {}.\n", text(*answer, "name"),
                             text(*answer, "state") == "deleted" ? "moved to the recycle bin" : "is being destroyed");
  });
  return {};
}

Outcome do_snapshot_restore(Context& ctx, const DiskArgs& a) {
  GC_TRY(api, ctx.api());
  GC_TRY(answer, ctx.check((*api)->post("/snapshots" + seg(a.snapshot) + "/restore", json::object{})));
  ctx.print(*answer, [&] { ctx.out() << fmt::format("Snapshot {} restored.\n", text(*answer, "name")); });
  return {};
}

}  // namespace

void add_disk_commands(CLI::App& app, Registry& registry) {
  auto a = std::make_shared<DiskArgs>();
  auto* disk = app.add_subcommand("disk", "data disks: persistent, size-limited, independent of instances");
  disk->require_subcommand(1);

  auto* create = disk->add_subcommand("create", "create a data disk (waits until it is ready)");
  create->add_option("NAME", a->disk, "disk name")->required();
  create->add_option("--size", a->size, "size in GiB")->check(CLI::Range(1, 65536));
  create->add_option("--zone", a->zone, "zone (default: the only one)");
  create->add_option("--host", a->host, "host of the zone (default: the one with most free GPUs)");
  create->add_option("--from-snapshot", a->from_snapshot, "make it from this snapshot's data");
  create->add_flag("--no-wait", a->no_wait, "answer at once, while the disk is being made");
  registry.on(create, [a](Context& ctx) { return do_create(ctx, *a); });

  auto* ls = disk->add_subcommand("ls", "list your disks");
  ls->add_flag("--deleted", a->deleted, "the recycle bin instead");
  registry.on(ls, [a](Context& ctx) { return do_ls(ctx, *a); });

  auto* show = disk->add_subcommand("show", "one disk, as JSON");
  show->add_option("DISK", a->disk, "disk name or id")->required();
  registry.on(show, [a](Context& ctx) { return do_show(ctx, *a); });

  auto* attach = disk->add_subcommand("attach", "attach a disk to a stopped instance (used at its next start)");
  attach->add_option("DISK", a->disk, "disk name or id")->required();
  attach->add_option("NAME", a->instance, "instance name or id")->required();
  attach->add_option("--path", a->path, "mount path in the instance (default /root/data)");
  registry.on(attach, [a](Context& ctx) {
    return do_disk_action(ctx, *a, "attach", json::object{{"instance", a->instance}, {"mount_path", a->path}}, "attached",
                          false);
  });

  auto* detach = disk->add_subcommand("detach", "detach a disk from its stopped instance");
  detach->add_option("DISK", a->disk, "disk name or id")->required();
  registry.on(detach, [a](Context& ctx) { return do_disk_action(ctx, *a, "detach", json::object{}, "detached", false); });

  auto* resize = disk->add_subcommand("resize", "grow a disk (never shrinks)");
  resize->add_option("DISK", a->disk, "disk name or id")->required();
  resize->add_option("--size", a->size, "new size in GiB")->required()->check(CLI::Range(1, 65536));
  resize->add_flag("--no-wait", a->no_wait, "answer at once, while the disk grows");
  registry.on(resize, [a](Context& ctx) {
    return do_disk_action(ctx, *a, "resize", json::object{{"size_gib", a->size}}, "grown", true);
  });

  auto* snapshot = disk->add_subcommand("snapshot", "take a snapshot of a disk");
  snapshot->add_option("DISK", a->disk, "disk name or id")->required();
  snapshot->add_option("--name", a->snapshot, "snapshot name")->required();
  snapshot->add_flag("--no-wait", a->no_wait, "answer at once, while the snapshot is taken");
  registry.on(snapshot, [a](Context& ctx) { return do_snapshot(ctx, *a); });

  auto* rm = disk->add_subcommand("rm", "delete a detached disk (kept in the recycle bin for [policy] recycle_days)");
  rm->add_option("DISK", a->disk, "disk name or id")->required();
  registry.on(rm, [a](Context& ctx) { return do_rm(ctx, *a); });

  auto* restore = disk->add_subcommand("restore", "bring a deleted disk back from the recycle bin");
  restore->add_option("DISK", a->disk, "disk name or id")->required();
  registry.on(restore, [a](Context& ctx) { return do_disk_action(ctx, *a, "restore", json::object{}, "restored", false); });

  auto* snap = app.add_subcommand("snapshot", "disk snapshots");
  snap->require_subcommand(1);
  auto* sls = snap->add_subcommand("ls", "list your snapshots");
  sls->add_flag("--deleted", a->deleted, "the recycle bin instead");
  registry.on(sls, [a](Context& ctx) { return do_snapshot_ls(ctx, *a); });
  auto* srm = snap->add_subcommand("rm", "delete a snapshot (to the recycle bin)");
  srm->add_option("SNAP", a->snapshot, "snapshot name or id")->required();
  registry.on(srm, [a](Context& ctx) { return do_snapshot_rm(ctx, *a); });
  auto* srestore = snap->add_subcommand("restore", "bring a deleted snapshot back");
  srestore->add_option("SNAP", a->snapshot, "snapshot name or id")->required();
  registry.on(srestore, [a](Context& ctx) { return do_snapshot_restore(ctx, *a); });
}

}  // namespace gpucloud::cli

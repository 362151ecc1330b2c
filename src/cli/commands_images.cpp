// save-image, image rm, image restore (custom images; `images` lists them, commands_market.cpp).
#include <CLI/CLI.hpp>
#include <boost/json.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/output.h"

namespace gpucloud::cli {

namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

constexpr auto kImagePoll = 1s;
constexpr auto kImageWaitLimit = std::chrono::minutes(60);  // a big system disk takes a while

struct ImageArgs {
  std::string instance, image_name, description, image;
  bool no_wait = false;
};

// Polls the image until it leaves `creating`: a dot a second on stderr (a line per state
// change when not a terminal would be noise: one line at the end instead).
Expected<json::value> wait_available(Context& ctx, ApiClient& api, json::value current) {
  const std::string id = text(current, "id");
  const auto start = ctx.deps().now();
  bool dots = false;
  int unreachable = 0;
  while (text(current, "state") == "creating") {
    if (ctx.deps().now() - start > kImageWaitLimit) {
      if (dots) ctx.err() << "\n";
      return refused(fmt::format("gave up waiting for image {} (still creating); see `gpucloud images`",
                                 text(current, "name", id)));
    }
    if (!ctx.json()) {
      if (!dots) ctx.err() << "saving";
      ctx.err() << "." << std::flush;
      dots = true;
    }
    ctx.deps().sleep(kImagePoll);
    auto next = api.get("/images" + seg(id));
    if (!next) {
      if (next.error().code == ErrorCode::unavailable && ++unreachable < 20) continue;
      if (dots) ctx.err() << "\n";
      return api_failure(next.error());
    }
    unreachable = 0;
    current = std::move(*next);
  }
  if (dots) ctx.err() << " " << text(current, "state") << "\n";
  if (text(current, "state") == "error")
    return refused(fmt::format("image {} could not be saved: {}", text(current, "name", id),
                               text(current, "state_reason", "no reason given")));
  return current;
}

Outcome do_save_image(Context& ctx, const ImageArgs& a) {
  GC_TRY(api, ctx.api());
  json::object body{{"name", a.image_name}};
  if (!a.description.empty()) body["description"] = a.description;
  GC_TRY(created, ctx.check(post_idempotent(ctx, **api, "/instances" + seg(a.instance) + "/images", body)));
  json::value image = *created;
  if (!a.no_wait) {
    GC_TRY(done, wait_available(ctx, **api, image));
    image = *done;
  }
  ctx.print(image, [&] {
    ctx.out() << fmt::format("Image {} ({}) is {}", text(image, "name"), text(image, "id"), text(image, "state"));
    if (auto own = integer(image, "own_size_bytes"); own && text(image, "state") == "available")
      ctx.out() << fmt::format("; its own size {} is billed", format_bytes(*own));
    ctx.out() << ".\n";
  });
  return {};
}

Outcome do_image_action(Context& ctx, const std::string& image, bool restore) {
  GC_TRY(api, ctx.api());
  Result<json::value> answer = restore ? (*api)->post("/images" + seg(image) + "/restore", json::object{})
                                       : (*api)->del("/images" + seg(image));
  GC_TRY(done, ctx.check(std::move(answer)));
  ctx.print(*done, [&] {
    if (restore) {
      ctx.out() << fmt::format("Image {} is restored ({}).\n", text(*done, "name", image), text(*done, "state"));
    } else {
      ctx.out() << fmt::format("Image {} is deleted; `gpucloud image restore {}` brings it back while it is in the "
                               "recycle bin.\n",
                               text(*done, "name", image), text(*done, "id", image));
    }
  });
  return {};
}

}  // namespace

void add_image_commands(CLI::App& app, Registry& registry) {
  auto a = std::make_shared<ImageArgs>();
  auto* save = app.add_subcommand("save-image", "save an instance's system disk as a private image (data disks are not included)");
  save->add_option("NAME", a->instance, "the instance (name or id)")->required();
  save->add_option("--as", a->image_name, "the new image's name")->required();
  save->add_option("--description", a->description, "what the image holds");
  save->add_flag("--no-wait", a->no_wait, "do not wait until the image is available");
  registry.on(save, [a](Context& ctx) { return do_save_image(ctx, *a); });

  auto* image = app.add_subcommand("image", "your custom images: rm, restore");
  image->require_subcommand(1);
  auto* rm = image->add_subcommand("rm", "delete a custom image (restorable while in the recycle bin)");
  rm->add_option("IMAGE", a->image, "the image (name or id)")->required();
  registry.on(rm, [a](Context& ctx) { return do_image_action(ctx, a->image, false); });
  auto* restore = image->add_subcommand("restore", "bring a deleted custom image back");
  restore->add_option("IMAGE", a->image, "the image (id, or name)")->required();
  registry.on(restore, [a](Context& ctx) { return do_image_action(ctx, a->image, true); });
}

}  // namespace gpucloud::cli

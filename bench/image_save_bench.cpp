// Save-image through the agent's own code (ImageSaver over DockerEngineDriver, exactly what
// gpucloudd's agent runs for image.save), for bench/image_save.sh: saves CONTAINER as REF and
// prints one JSON line with the seconds it took and the sizes it reported.
// Not a Google Benchmark: one save takes seconds.
//   [GPUCLOUD_DOCKER_SOCK=PATH] image_save_bench CONTAINER REF [INSTALLATION]     (REF: gpucloud-image/REPO:TAG)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/json.hpp>

#include "agent/image_saver.h"
#include "agent/runtime/docker_engine_driver.h"

namespace net = boost::asio;
namespace json = boost::json;
using namespace gpucloud;
using namespace gpucloud::agent;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: image_save_bench CONTAINER REF [INSTALLATION]\n");
    return 2;
  }
  const std::string container = argv[1], ref = argv[2], installation = argc > 3 ? argv[3] : "bench";
  net::io_context ioc;
  DockerEngineDriver::Options options;
  if (const char* sock = std::getenv("GPUCLOUD_DOCKER_SOCK")) options.engine.socket_path = sock;  // another engine
  DockerEngineDriver driver(ioc.get_executor(), options);
  ImageSaver saver(driver, installation);
  auto request = save_request_from_json(json::object{{"instance_id", "bench"}, {"image_id", "bench"}, {"ref", ref}}, installation);
  if (!request) {
    std::fprintf(stderr, "%s\n", request.error().detail.c_str());
    return 2;
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto future = net::co_spawn(ioc, saver.save(container, *request), net::use_future);
  ioc.run();
  auto result = future.get();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!result) {
    std::fprintf(stderr, "save failed: %s\n", result.error().detail.c_str());
    return 1;
  }
  json::object out = *result;
  out["seconds"] = seconds;
  std::printf("%s\n", json::serialize(out).c_str());
  return 0;
}

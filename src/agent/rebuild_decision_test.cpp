// The rebuild decision of InstanceRuntime::ensure, for a stopped container that is asked to
// run with another spec (the engine-side steps are in tests/integration/rebuild_test.cpp).
#include "agent/instance_runtime.h"

#include <cstdlib>

#include <gtest/gtest.h>

namespace gpucloud::agent {
namespace {
using Rebuild = InstanceRuntime::Rebuild;

TEST(RebuildDecision, SizeOnlyIsAnInPlaceUpdateNeverACommit) {
  EXPECT_EQ(InstanceRuntime::rebuild_for({}, 5, 100), Rebuild::none);
  EXPECT_EQ(InstanceRuntime::rebuild_for({"image"}, 5, 100), Rebuild::none) << "a newer tag never rebuilds";
  EXPECT_EQ(InstanceRuntime::rebuild_for({"cpu", "memory_gib"}, 5, 100), Rebuild::update);
  EXPECT_EQ(InstanceRuntime::rebuild_for({"memory_gib"}, 99, 100), Rebuild::update) << "no layer is added";
}

TEST(RebuildDecision, HostnameOrGpusCommitUntilTheLayerBoundThenFlatten) {
  EXPECT_EQ(InstanceRuntime::rebuild_for({"name"}, 5, 100), Rebuild::commit);
  EXPECT_EQ(InstanceRuntime::rebuild_for({"gpu_uuids", "cpu"}, 99, 100), Rebuild::commit) << "the commit makes 100";
  EXPECT_EQ(InstanceRuntime::rebuild_for({"gpu_uuids", "cpu"}, 100, 100), Rebuild::flatten) << "a commit would make 101";
  EXPECT_EQ(InstanceRuntime::rebuild_for({"name"}, 1, 1), Rebuild::flatten);
  EXPECT_EQ(InstanceRuntime::rebuild_for({"name"}, 0, 100), Rebuild::commit) << "layers unknown";
}

TEST(RebuildDecision, TheLayerBoundIs100UnlessTheEnvironmentLowersIt) {
  ::unsetenv("GPUCLOUD_MAX_SYSTEM_IMAGE_LAYERS");
  EXPECT_EQ(InstanceRuntime::default_max_system_image_layers(), 100);
  ::setenv("GPUCLOUD_MAX_SYSTEM_IMAGE_LAYERS", "3", 1);
  EXPECT_EQ(InstanceRuntime::default_max_system_image_layers(), 3);
  ::setenv("GPUCLOUD_MAX_SYSTEM_IMAGE_LAYERS", "lots", 1);
  EXPECT_EQ(InstanceRuntime::default_max_system_image_layers(), 100);
  ::unsetenv("GPUCLOUD_MAX_SYSTEM_IMAGE_LAYERS");
}

}  // namespace
}  // namespace gpucloud::agent

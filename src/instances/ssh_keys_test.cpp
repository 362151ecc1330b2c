#include "instances/ssh_keys.h"

#include <gtest/gtest.h>

namespace gpucloud::instances {
namespace {

TEST(ParsePublicKey, AcceptsAnEd25519LineAndFingerprintsIt) {
  auto key = parse_public_key("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKAntDtSWmyFqyZq2NPt45hLtG6cDJP3d5EerbbdOl3H me@laptop\n");
  ASSERT_TRUE(key) << key.error().detail;
  EXPECT_EQ(key->type, "ssh-ed25519");
  EXPECT_EQ(key->comment, "me@laptop");
  EXPECT_TRUE(key->fingerprint.starts_with("SHA256:"));
}

// The blob's first field is a 32-bit length: 0xFFFFFFFF must be refused, not wrap around
// the bounds check (found by tests/fuzz/ssh_key).
TEST(ParsePublicKey, RefusesATypeLengthThatWouldWrapAround) {
  auto key = parse_public_key("ssh-ed25519 /////3NzaC1lZDI1NTE5 x");
  ASSERT_FALSE(key);
  EXPECT_EQ(key.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(key.error().detail.find("does not match its type"), std::string::npos) << key.error().detail;
}

}  // namespace
}  // namespace gpucloud::instances

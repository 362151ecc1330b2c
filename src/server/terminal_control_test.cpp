#include "server/terminal_control.h"

#include <gtest/gtest.h>

namespace gpucloud::server {
namespace {

TEST(TerminalControl, AResizeGivesRowsAndCols) {
  auto r = parse_terminal_control(R"({"type":"resize","cols":120,"rows":40})");
  ASSERT_TRUE(r) << r.error().detail;
  EXPECT_EQ(r->rows, 40);
  EXPECT_EQ(r->cols, 120);
  EXPECT_TRUE(parse_terminal_control(R"({"type":"resize","cols":999,"rows":1})"));
}

TEST(TerminalControl, EverythingElseIsRefusedWithAReasonThatFitsACloseFrame) {
  const char* bad[] = {
      "",
      "not json",
      "[1,2]",
      R"("resize")",
      R"({"cols":80,"rows":24})",
      R"({"type":5,"cols":80,"rows":24})",
      R"({"type":"paste","data":"x"})",
      R"({"type":"resize","cols":80})",
      R"({"type":"resize","cols":"80","rows":24})",
      R"({"type":"resize","cols":80.5,"rows":24})",
      R"({"type":"resize","cols":0,"rows":24})",
      R"({"type":"resize","cols":-3,"rows":24})",
      R"({"type":"resize","cols":1000,"rows":24})",
      R"({"type":"resize","cols":80,"rows":2147483648})",
      R"({"type":"resize","cols":80,"rows":18446744073709551615})",
      R"({"type":"resize","cols":80,"rows":1e300})",
  };
  for (const char* text : bad) {
    auto r = parse_terminal_control(text);
    ASSERT_FALSE(r) << text;
    EXPECT_EQ(r.error().code, ErrorCode::invalid_argument) << text;
    EXPECT_FALSE(r.error().detail.empty()) << text;
    EXPECT_LE(r.error().detail.size(), 123u) << text;
  }
  std::string huge = R"({"type":"resize","cols":80,"rows":24,"pad":")" + std::string(5000, 'x') + "\"}";
  EXPECT_FALSE(parse_terminal_control(huge));
}

}  // namespace
}  // namespace gpucloud::server

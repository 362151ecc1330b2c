#include "server/metrics.h"

#include <gtest/gtest.h>

namespace gpucloud::server {
namespace {

TEST(Metrics, UnknownMethodsShareOneLabel) {
  Metrics m;
  for (int i = 0; i < 50; ++i) m.record_request("X-METHOD-" + std::to_string(i), "unmatched", 405, 0.001);
  m.record_request("GET", "/healthz", 200, 0.001);
  std::string out = m.render();
  EXPECT_EQ(out.find("X-METHOD"), std::string::npos) << out;
  EXPECT_NE(out.find(R"(gpucloud_http_requests_total{method="other",route="unmatched",status="405"} 50)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find(R"(gpucloud_http_requests_total{method="GET",route="/healthz",status="200"} 1)"), std::string::npos)
      << out;
}

TEST(Metrics, EveryFamilyHasHelpAndType) {
  Metrics m;
  m.record_request("GET", "/healthz", 200, 0.001);
  m.set_gauge("gpucloud_test_gauge", "A gauge for the test.", 3);
  m.connection_refused();
  std::string out = m.render();
  for (std::string family : {"gpucloud_http_requests_total", "gpucloud_http_request_duration_seconds",
                             "gpucloud_http_open_connections", "gpucloud_http_refused_connections_total",
                             "gpucloud_test_gauge"}) {
    EXPECT_NE(out.find("# HELP " + family + " "), std::string::npos) << family;
    EXPECT_NE(out.find("# TYPE " + family + " "), std::string::npos) << family;
  }
  EXPECT_NE(out.find("\ngpucloud_http_refused_connections_total 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("\ngpucloud_test_gauge 3\n"), std::string::npos) << out;
}

}  // namespace
}  // namespace gpucloud::server

#include "server/console.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace gpucloud::server {
namespace {
namespace fs = std::filesystem;

TEST(ConsolePath, MapsUrlPathsToFilesUnderTheDirectory) {
  EXPECT_EQ(console_relative_path("/"), "index.html");
  EXPECT_EQ(console_relative_path("/index.html"), "index.html");
  EXPECT_EQ(console_relative_path("/assets/app-1a2b.js"), "assets/app-1a2b.js");
  EXPECT_EQ(console_relative_path("/instances/i-abc"), "instances/i-abc");
}

TEST(ConsolePath, RefusesTraversalAndOddSegments) {
  EXPECT_FALSE(console_relative_path("/../etc/passwd"));
  EXPECT_FALSE(console_relative_path("/assets/../../etc/passwd"));
  EXPECT_FALSE(console_relative_path("/assets/.."));
  EXPECT_FALSE(console_relative_path("/./index.html"));
  EXPECT_FALSE(console_relative_path("//etc/passwd"));
  EXPECT_FALSE(console_relative_path("/assets//a.js"));
  EXPECT_FALSE(console_relative_path("/assets/"));
  EXPECT_FALSE(console_relative_path("/a\\..\\b"));
  EXPECT_FALSE(console_relative_path(std::string_view("/a\0b", 4)));
  EXPECT_FALSE(console_relative_path("relative"));
  EXPECT_FALSE(console_relative_path(""));
}

TEST(ConsoleGzip, FollowsAcceptEncodingAndItsQValues) {
  EXPECT_TRUE(accepts_gzip("gzip"));
  EXPECT_TRUE(accepts_gzip("gzip, deflate, br"));
  EXPECT_TRUE(accepts_gzip("br;q=1.0, GZIP;q=0.5"));
  EXPECT_TRUE(accepts_gzip("*"));
  EXPECT_TRUE(accepts_gzip("x-gzip"));
  EXPECT_FALSE(accepts_gzip(""));
  EXPECT_FALSE(accepts_gzip("identity"));
  EXPECT_FALSE(accepts_gzip("br, deflate"));
  EXPECT_FALSE(accepts_gzip("gzip;q=0"));
  EXPECT_FALSE(accepts_gzip("gzip; q=0.000"));
  EXPECT_FALSE(accepts_gzip("*;q=0"));
  EXPECT_FALSE(accepts_gzip("gzip;q=0, *"));  // gzip named and refused: * does not bring it back
}

TEST(ConsoleTypes, ByExtension) {
  EXPECT_EQ(console_content_type("index.html"), "text/html; charset=utf-8");
  EXPECT_EQ(console_content_type("assets/a.JS"), "text/javascript; charset=utf-8");
  EXPECT_EQ(console_content_type("assets/a.css"), "text/css; charset=utf-8");
  EXPECT_EQ(console_content_type("logo.svg"), "image/svg+xml");
  EXPECT_EQ(console_content_type("f.woff2"), "font/woff2");
  EXPECT_EQ(console_content_type("noext"), "application/octet-stream");
}

struct ConsoleDir : ::testing::Test {
  fs::path dir = fs::temp_directory_path() / ("console-test-" + std::to_string(::getpid()));
  void write(const std::string& relative, const std::string& body) {
    fs::create_directories((dir / relative).parent_path());
    std::ofstream(dir / relative, std::ios::binary) << body;
  }
  void SetUp() override {
    fs::remove_all(dir);
    write("index.html", "<!doctype html>app");
    write("assets/app-1.js", "console.log(1)");
    write("assets/app-1.js.gz", "GZ");
    fs::create_directories(dir.parent_path() / "outside");
    std::ofstream(dir.parent_path() / "outside-secret.txt") << "secret";
    fs::create_symlink(dir.parent_path() / "outside-secret.txt", dir / "link.txt");
  }
  void TearDown() override {
    fs::remove_all(dir);
    fs::remove(dir.parent_path() / "outside-secret.txt");
  }
  static std::string header(const Response& r, const std::string& name) {
    for (auto& [n, v] : r.headers)
      if (n == name) return v;
    return "";
  }
};

TEST_F(ConsoleDir, ServesFilesGzipAndClientRoutesButNothingOutside) {
  auto loaded = load_console_files(dir.string());
  ASSERT_TRUE(loaded) << loaded.error().detail;
  EXPECT_EQ(loaded->files.count("link.txt"), 0u);  // a symlink is never followed
  auto index = console_response(&*loaded, "/", "");
  EXPECT_EQ(index.status, 200);
  EXPECT_EQ(index.body, "<!doctype html>app");
  EXPECT_EQ(header(index, "Cache-Control"), "no-cache");
  EXPECT_NE(header(index, "Content-Security-Policy").find("default-src 'self'"), std::string::npos);
  EXPECT_EQ(header(index, "X-Content-Type-Options"), "nosniff");

  auto plain = console_response(&*loaded, "/assets/app-1.js", "br");
  EXPECT_EQ(plain.body, "console.log(1)");
  EXPECT_EQ(header(plain, "Content-Encoding"), "");
  EXPECT_EQ(header(plain, "Vary"), "Accept-Encoding");
  EXPECT_EQ(header(plain, "Cache-Control"), "public, max-age=31536000, immutable");
  auto gz = console_response(&*loaded, "/assets/app-1.js", "gzip, br");
  EXPECT_EQ(gz.body, "GZ");
  EXPECT_EQ(header(gz, "Content-Encoding"), "gzip");
  EXPECT_EQ(gz.content_type, "text/javascript; charset=utf-8");

  auto route = console_response(&*loaded, "/instances/i-abc", "");
  EXPECT_EQ(route.status, 200);
  EXPECT_EQ(route.body, "<!doctype html>app");
  EXPECT_EQ(console_response(&*loaded, "/assets/missing.js", "").status, 404);
  EXPECT_EQ(console_response(&*loaded, "/link.txt", "").body, "<!doctype html>app");
  EXPECT_EQ(console_response(&*loaded, "/../outside-secret.txt", "").status, 404);
  EXPECT_EQ(console_response(&*loaded, "/assets/../../outside-secret.txt", "").status, 404);
  EXPECT_EQ(console_response(nullptr, "/", "").status, 404);
}

TEST_F(ConsoleDir, FindsTheDirectoryConfiguredOrBesideTheBinary) {
  EXPECT_EQ(find_console_dir("/configured", "/x/bin/gpucloudd", dir.string()), "/configured");
  EXPECT_EQ(find_console_dir("", "/nonexistent/bin/gpucloudd", dir.string()), fs::weakly_canonical(dir).string());
  auto prefix = dir / "prefix";
  write("prefix/share/gpucloud/console/index.html", "installed");
  EXPECT_EQ(find_console_dir("", (prefix / "bin" / "gpucloudd").string(), ""),
            fs::weakly_canonical(prefix / "share/gpucloud/console").string());
  EXPECT_EQ(find_console_dir("", "/nonexistent/bin/gpucloudd", ""), "");
  auto before = console_signature(dir.string());
  write("assets/app-2.js", "new");
  EXPECT_NE(console_signature(dir.string()), before);
}

}  // namespace
}  // namespace gpucloud::server

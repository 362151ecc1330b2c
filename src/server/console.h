#pragma once
// The web console's static files (web/dist: index.html, hashed assets/*, precompressed .gz
// siblings), served at / by gpucloudd.
//
// The files are read into memory (off the loop) at start and re-read when the directory
// changes (checked every 2 s off the loop): a request never touches the disk, and a dist of a
// few hundred KB costs that much memory. Only regular files under the directory are loaded
// (symlinks and anything above it are never read), so a request path can name nothing else:
// lookups are by the normalised relative path, and a path with a ".." segment is refused
// before the lookup.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/thread_pool.hpp>

#include "core/result.h"
#include "server/http_types.h"

namespace gpucloud::server {

struct ConsoleFile {
  std::string body;
  std::optional<std::string> gzip;  // the precompressed sibling (NAME.gz), when present
  std::string content_type;
};

// What was loaded from one directory: relative path ("index.html", "assets/app-1a2b.js") ->
// file. `signature` changes when any file is added, removed, resized or touched.
struct ConsoleFiles {
  std::string dir;
  std::map<std::string, ConsoleFile, std::less<>> files;
  std::string signature;
};

constexpr std::uint64_t kConsoleMaxFileBytes = 32ull << 20;
constexpr std::uint64_t kConsoleMaxTotalBytes = 128ull << 20;

// The relative file path a URL path names ("/" -> "index.html", "/assets/a.js" ->
// "assets/a.js"), or nullopt when it cannot name a file under the directory: a "." or ".."
// segment, an empty segment, a NUL or backslash.
std::optional<std::string> console_relative_path(std::string_view url_path);
// Whether an Accept-Encoding header accepts gzip (a q=0 refuses it; "*" accepts it).
bool accepts_gzip(std::string_view accept_encoding);
// The Content-Type for a file name, by extension.
std::string console_content_type(std::string_view name);
// A cheap fingerprint of the directory (names, sizes, mtimes); "" when it is not a directory.
std::string console_signature(const std::string& dir);
// Reads every regular file under `dir` (blocking: run it off the loop).
Result<ConsoleFiles> load_console_files(const std::string& dir);
// The directory to serve: `configured` when set; else the first that holds index.html of
// <dir of exe>/../../web/dist (the build tree), <dir of exe>/../share/gpucloud/console (an
// installed prefix), and `source_dist` (the source tree, compiled in). "" when none.
// The source tree's web/dist (compiled in; "" when not known).
std::string default_console_source_dir();
std::string find_console_dir(const std::string& configured, const std::string& exe_path, const std::string& source_dist);

// The answer for a GET or HEAD of a non-API path. Client routes (no such file, not under
// assets/) answer index.html; a missing asset is 404.
Response console_response(const ConsoleFiles* files, std::string_view url_path, std::string_view accept_encoding);

// The headers every console response carries (CSP, nosniff, Referrer-Policy, framing).
void add_console_security_headers(Response& response);

// Holds the loaded files and keeps them current. Loop only, except the loads it offloads.
class Console {
 public:
  Console(boost::asio::any_io_executor loop, std::string dir);
  ~Console();
  // Loads once, then re-checks every 2 s until stop(). Spawned on the loop.
  void start();
  void stop() { stopped_ = true; }
  const std::string& dir() const { return dir_; }
  const ConsoleFiles* files() const { return files_.get(); }

 private:
  boost::asio::awaitable<void> watch();
  boost::asio::any_io_executor loop_;
  std::string dir_;
  boost::asio::thread_pool pool_{1};
  std::shared_ptr<const ConsoleFiles> files_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  bool stopped_ = false;
};

}  // namespace gpucloud::server

#include "server/console.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include "core/offload.h"

namespace gpucloud::server {
namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool read_whole(const fs::path& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream buffer;
  buffer << in.rdbuf();
  out = std::move(buffer).str();
  return static_cast<bool>(in) || in.eof();
}

// Regular files under dir (not following symlinks), with their relative paths.
template <class F>
void each_regular_file(const fs::path& dir, F f) {
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    auto status = it->symlink_status(ec);
    if (ec) break;
    if (!fs::is_regular_file(status)) continue;
    auto relative = it->path().lexically_relative(dir).generic_string();
    f(it->path(), relative);
  }
}

}  // namespace

std::optional<std::string> console_relative_path(std::string_view url_path) {
  if (url_path.empty() || url_path.front() != '/') return std::nullopt;
  url_path.remove_prefix(1);
  if (url_path.empty()) return std::string("index.html");
  std::string out;
  std::size_t start = 0;
  while (start <= url_path.size()) {
    auto slash = url_path.find('/', start);
    auto segment = url_path.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (segment.empty() || segment == "." || segment == "..") return std::nullopt;
    if (segment.find('\0') != std::string_view::npos || segment.find('\\') != std::string_view::npos) return std::nullopt;
    if (!out.empty()) out += '/';
    out += segment;
    if (slash == std::string_view::npos) break;
    start = slash + 1;
    if (start == url_path.size()) return std::nullopt;  // a trailing slash names no file
  }
  return out;
}

bool accepts_gzip(std::string_view header) {
  bool star = false, star_zero = false, gzip_seen = false, gzip_zero = false;
  while (!header.empty()) {
    auto comma = header.find(',');
    auto item = trim(header.substr(0, comma));
    header = comma == std::string_view::npos ? std::string_view() : header.substr(comma + 1);
    auto semi = item.find(';');
    std::string coding = lower(trim(item.substr(0, semi)));
    bool zero = false;
    if (semi != std::string_view::npos) {
      auto params = item.substr(semi + 1);
      while (!params.empty()) {
        auto next = params.find(';');
        auto param = trim(params.substr(0, next));
        params = next == std::string_view::npos ? std::string_view() : params.substr(next + 1);
        if (param.size() >= 2 && (param[0] == 'q' || param[0] == 'Q') && param[1] == '=') {
          // q=0, q=0.0, q=0.000: refused; anything else accepts.
          auto value = param.substr(2);
          zero = !value.empty() && value.find_first_not_of("0.") == std::string_view::npos;
        }
      }
    }
    if (coding == "gzip" || coding == "x-gzip") {
      gzip_seen = true;
      gzip_zero = zero;
    } else if (coding == "*") {
      star = true;
      star_zero = zero;
    }
  }
  if (gzip_seen) return !gzip_zero;
  return star && !star_zero;
}

std::string console_content_type(std::string_view name) {
  auto dot = name.rfind('.');
  std::string ext = dot == std::string_view::npos ? "" : lower(name.substr(dot + 1));
  static const std::map<std::string, std::string, std::less<>> types = {
      {"html", "text/html; charset=utf-8"},
      {"js", "text/javascript; charset=utf-8"},
      {"mjs", "text/javascript; charset=utf-8"},
      {"css", "text/css; charset=utf-8"},
      {"json", "application/json"},
      {"map", "application/json"},
      {"webmanifest", "application/manifest+json"},
      {"svg", "image/svg+xml"},
      {"png", "image/png"},
      {"jpg", "image/jpeg"},
      {"jpeg", "image/jpeg"},
      {"gif", "image/gif"},
      {"webp", "image/webp"},
      {"ico", "image/x-icon"},
      {"woff", "font/woff"},
      {"woff2", "font/woff2"},
      {"ttf", "font/ttf"},
      {"txt", "text/plain; charset=utf-8"},
      {"wasm", "application/wasm"},
  };
  auto it = types.find(ext);
  return it == types.end() ? "application/octet-stream" : it->second;
}

std::string console_signature(const std::string& dir) {
  std::error_code ec;
  if (dir.empty() || !fs::is_directory(dir, ec)) return "";
  std::vector<std::string> parts;
  each_regular_file(dir, [&](const fs::path& path, const std::string& relative) {
    std::error_code e;
    auto size = fs::file_size(path, e);
    auto mtime = fs::last_write_time(path, e).time_since_epoch().count();
    parts.push_back(relative + '\t' + std::to_string(size) + '\t' + std::to_string(mtime));
  });
  std::sort(parts.begin(), parts.end());
  std::string out = "dir";
  for (auto& p : parts) out += '\n' + p;
  return out;
}

Result<ConsoleFiles> load_console_files(const std::string& dir) {
  ConsoleFiles loaded;
  loaded.dir = dir;
  loaded.signature = console_signature(dir);
  if (loaded.signature.empty()) return fail(ErrorCode::not_found, "console_dir " + dir + " is not a directory");
  std::map<std::string, std::string> gzips;
  std::uint64_t total = 0;
  std::string problem;
  each_regular_file(dir, [&](const fs::path& path, const std::string& relative) {
    if (!problem.empty()) return;
    std::error_code ec;
    auto size = fs::file_size(path, ec);
    if (ec) return;
    if (size > kConsoleMaxFileBytes) {
      problem = relative + " is larger than " + std::to_string(kConsoleMaxFileBytes >> 20) + " MiB";
      return;
    }
    total += size;
    if (total > kConsoleMaxTotalBytes) {
      problem = "the console's files exceed " + std::to_string(kConsoleMaxTotalBytes >> 20) + " MiB";
      return;
    }
    std::string body;
    if (!read_whole(path, body)) return;  // vanished or unreadable meanwhile: not served
    if (relative.size() > 3 && relative.ends_with(".gz")) {
      gzips.emplace(relative.substr(0, relative.size() - 3), std::move(body));
    } else {
      loaded.files.emplace(relative, ConsoleFile{std::move(body), std::nullopt, console_content_type(relative)});
    }
  });
  if (!problem.empty()) return fail(ErrorCode::invalid_argument, "console_dir " + dir + ": " + problem);
  for (auto& [name, body] : gzips) {
    if (auto it = loaded.files.find(name); it != loaded.files.end()) {
      it->second.gzip = std::move(body);
    } else {
      // A .gz without its original is served as what it is.
      auto relative = name + ".gz";
      loaded.files.emplace(relative, ConsoleFile{std::move(body), std::nullopt, "application/gzip"});
    }
  }
  return loaded;
}

std::string default_console_source_dir() {
#ifdef GPUCLOUD_CONSOLE_SOURCE_DIR
  return GPUCLOUD_CONSOLE_SOURCE_DIR;
#else
  return "";
#endif
}

std::string find_console_dir(const std::string& configured, const std::string& exe_path, const std::string& source_dist) {
  if (!configured.empty()) return configured;
  std::vector<fs::path> candidates;
  if (!exe_path.empty()) {
    fs::path bin = fs::path(exe_path).parent_path();
    candidates.push_back(bin / ".." / ".." / "web" / "dist");
    candidates.push_back(bin / ".." / "share" / "gpucloud" / "console");
  }
  if (!source_dist.empty()) candidates.emplace_back(source_dist);
  for (auto& c : candidates) {
    c = c.lexically_normal();  // "bin/.." resolves even where bin does not exist
    std::error_code ec;
    if (fs::is_regular_file(c / "index.html", ec)) return fs::weakly_canonical(c, ec).string();
  }
  return "";
}

void add_console_security_headers(Response& r) {
  // Scripts, fonts, images and connections from this origin only; inline styles are allowed
  // because xterm.js and uPlot set element styles. No framing by other sites.
  r.headers.emplace_back("Content-Security-Policy",
                         "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                         "img-src 'self' data: blob:; font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; "
                         "object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'self'");
  r.headers.emplace_back("X-Content-Type-Options", "nosniff");
  r.headers.emplace_back("Referrer-Policy", "same-origin");
  r.headers.emplace_back("X-Frame-Options", "SAMEORIGIN");
}

Response console_response(const ConsoleFiles* files, std::string_view url_path, std::string_view accept_encoding) {
  auto not_found = [](std::string detail) {
    Response r = problem_response(Error{ErrorCode::not_found, std::move(detail), {}, 0});
    add_console_security_headers(r);
    return r;
  };
  if (!files || files->files.empty())
    return not_found("the web console is not installed (build web/, or set [server] console_dir)");
  auto relative = console_relative_path(url_path);
  if (!relative) return not_found("no such file: " + std::string(url_path));
  auto it = files->files.find(*relative);
  bool index = false;
  if (it == files->files.end()) {
    // Hashed assets must exist; any other path is a client route the app answers.
    if (relative->starts_with("assets/")) return not_found("no such file: " + std::string(url_path));
    it = files->files.find(std::string_view("index.html"));
    if (it == files->files.end()) return not_found("the web console has no index.html");
    index = true;
  }
  index = index || it->first == "index.html";
  const ConsoleFile& file = it->second;
  Response r{200, file.content_type, {}, {}, {}, {}};
  if (index) {
    r.headers.emplace_back("Cache-Control", "no-cache");
  } else if (it->first.starts_with("assets/")) {
    r.headers.emplace_back("Cache-Control", "public, max-age=31536000, immutable");
  } else {
    r.headers.emplace_back("Cache-Control", "no-cache");  // favicon and the like keep their names
  }
  if (file.gzip) {
    r.headers.emplace_back("Vary", "Accept-Encoding");
    if (accepts_gzip(accept_encoding)) {
      r.headers.emplace_back("Content-Encoding", "gzip");
      r.body = *file.gzip;
    } else {
      r.body = file.body;
    }
  } else {
    r.body = file.body;
  }
  add_console_security_headers(r);
  return r;
}

Console::Console(asio::any_io_executor loop, std::string dir) : loop_(std::move(loop)), dir_(std::move(dir)) {}

Console::~Console() {
  *alive_ = false;
  pool_.join();
}

void Console::start() { asio::co_spawn(loop_, watch(), asio::detached); }

asio::awaitable<void> Console::watch() {
  std::weak_ptr<bool> alive = alive_;
  auto still = [&] { return !alive.expired() && *alive.lock() && !stopped_; };
  asio::steady_timer tick(co_await asio::this_coro::executor);
  std::string seen;
  for (;;) {
    auto check = [dir = dir_]() { return console_signature(dir); };
    std::string signature = co_await offload<std::string>(pool_.get_executor(), std::move(check));
    if (alive.expired() || stopped_) co_return;
    if (signature != seen) {
      auto load = [dir = dir_]() { return load_console_files(dir); };
      auto loaded = co_await offload<Result<ConsoleFiles>>(pool_.get_executor(), std::move(load));
      if (!still()) co_return;
      if (loaded) {
        seen = loaded->signature;
        spdlog::info(R"({{"event":"console_loaded","dir":"{}","files":{}}})", dir_, loaded->files.size());
        files_ = std::make_shared<const ConsoleFiles>(std::move(*loaded));
      } else {
        seen = signature;
        if (!signature.empty()) spdlog::warn(R"({{"event":"console_not_loaded","detail":"{}"}})", loaded.error().detail);
        files_.reset();
      }
    }
    tick.expires_after(std::chrono::seconds(2));
    auto [ec] = co_await tick.async_wait(asio::as_tuple(asio::use_awaitable));
    if (!still()) co_return;
  }
}

}  // namespace gpucloud::server

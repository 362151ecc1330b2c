#include "server/instance_proxy.h"

#include <algorithm>
#include <utility>

#include "server/browser_session.h"

namespace gpucloud::server {

namespace {
std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}
}  // namespace

bool is_hop_by_hop_header(std::string_view n) {
  return n == "connection" || n == "keep-alive" || n == "proxy-connection" || n == "proxy-authenticate" ||
         n == "proxy-authorization" || n == "te" || n == "trailer" || n == "transfer-encoding" || n == "upgrade";
}

std::string encode_path(std::string_view path) {
  static constexpr std::string_view kKeep = "-._~!$&'()*+,;=:@/";
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(path.size());
  for (char c : path) {
    auto b = static_cast<unsigned char>(c);
    if ((b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9') || kKeep.find(c) != std::string_view::npos) {
      out += c;
    } else {
      out += '%';
      out += kHex[b >> 4];
      out += kHex[b & 15];
    }
  }
  return out;
}

std::string without_session_cookie(std::string_view header) {
  std::string out;
  while (!header.empty()) {
    auto semi = header.find(';');
    auto pair = trim(header.substr(0, semi));
    header = semi == std::string_view::npos ? std::string_view() : header.substr(semi + 1);
    if (pair.empty()) continue;
    auto eq = pair.find('=');
    if (trim(pair.substr(0, eq)) == kSessionCookie) continue;
    if (!out.empty()) out += "; ";
    out += pair;
  }
  return out;
}

bool forwards_request_header(std::string_view n) {
  if (is_hop_by_hop_header(n)) return false;
  return n != "host" && n != "authorization" && n != "cookie" && n != "x-csrf-token" && n != "origin" &&
         n != "content-length" && n != "x-forwarded-for" && n != "x-forwarded-host" && n != "x-forwarded-proto" &&
         n != "x-forwarded-prefix" && !n.starts_with("sec-websocket-");
}

bool forwards_response_header(std::string_view n, std::string_view value) {
  if (is_hop_by_hop_header(n) || n == "content-length" || n == "server") return false;
  if (n == "set-cookie") {
    auto eq = value.find('=');
    if (trim(value.substr(0, eq)) == kSessionCookie) return false;
  }
  return true;
}

std::optional<std::string> upstream_target(std::string_view path, std::string_view prefix, std::string_view query) {
  if (!path.starts_with(prefix)) return std::nullopt;
  auto rest = path.substr(prefix.size());
  if (!rest.empty() && rest.front() != '/') return std::nullopt;  // "/proxy/80" is not under "/proxy/8"
  std::string target = rest.empty() ? "/" : encode_path(rest);
  if (!query.empty()) target += "?" + std::string(query);
  return target;
}

std::string scrub(std::string text, std::string_view secret) {
  if (secret.empty()) return text;
  std::string out;
  std::size_t from = 0;
  for (auto at = text.find(secret); at != std::string::npos; at = text.find(secret, from)) {
    out.append(text, from, at - from);
    from = at + secret.size();
  }
  if (from == 0) return text;
  out.append(text, from);
  return out;
}

std::string Scrubber::feed(std::string_view chunk) {
  pending_.append(chunk);
  if (secret_.empty()) return std::exchange(pending_, {});
  pending_ = scrub(std::move(pending_), secret_);
  const std::size_t keep = std::min(pending_.size(), secret_.size() - 1);
  std::string out = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string Scrubber::finish() { return scrub(std::exchange(pending_, {}), secret_); }

}  // namespace gpucloud::server

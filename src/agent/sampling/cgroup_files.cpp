#include "agent/sampling/cgroup_files.h"

#include <algorithm>
#include <charconv>

namespace gpucloud::agent::sampling {

namespace {

std::string_view trim_cgroup_text(std::string_view s) {
  const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

std::optional<std::int64_t> whole_integer(std::string_view s) {
  std::int64_t out = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec != std::errc() || end != s.data() + s.size() || out < 0) return std::nullopt;
  return out;
}

// Splits on `sep`, keeping empty fields.
std::vector<std::string_view> split_on(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (;;) {
    auto at = s.find(sep);
    out.push_back(s.substr(0, at));
    if (at == std::string_view::npos) return out;
    s.remove_prefix(at + 1);
  }
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape_mount_path(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      const auto d = s.substr(i + 1, 3);
      if (std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '7'; })) {
        out.push_back(static_cast<char>((d[0] - '0') * 64 + (d[1] - '0') * 8 + (d[2] - '0')));
        i += 3;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

// Each line of `text`, without its newline.
template <class F>
void for_each_line(std::string_view text, F on_line) {
  while (!text.empty()) {
    auto end = text.find('\n');
    on_line(text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
}

}  // namespace

std::optional<std::int64_t> stat_field(std::string_view text, std::string_view key) {
  std::optional<std::int64_t> found;
  for_each_line(text, [&](std::string_view line) {
    if (found || line.size() <= key.size() || line.substr(0, key.size()) != key || line[key.size()] != ' ') return;
    found = whole_integer(trim_cgroup_text(line.substr(key.size() + 1)));
  });
  return found;
}

std::optional<std::int64_t> single_integer(std::string_view text) { return whole_integer(trim_cgroup_text(text)); }

std::optional<std::int64_t> memory_limit(std::string_view text) {
  const auto t = trim_cgroup_text(text);
  if (t == "max") return 0;
  auto value = whole_integer(t);
  // v1 writes "no limit" as LONG_MAX rounded down to a page (9223372036854771712).
  if (value && *value >= (std::int64_t{1} << 62)) return 0;
  return value;
}

std::vector<ProcCgroupLine> parse_proc_cgroup(std::string_view text) {
  std::vector<ProcCgroupLine> out;
  for_each_line(text, [&](std::string_view line) {
    // The path may itself hold ':' characters: only the first two separate fields.
    auto first = line.find(':');
    if (first == std::string_view::npos) return;
    auto second = line.find(':', first + 1);
    if (second == std::string_view::npos) return;
    auto id = whole_integer(line.substr(0, first));
    if (!id) return;
    ProcCgroupLine entry;
    entry.hierarchy = static_cast<int>(*id);
    const auto controllers = line.substr(first + 1, second - first - 1);
    if (!controllers.empty()) {
      for (auto c : split_on(controllers, ',')) entry.controllers.emplace_back(c);
    }
    entry.path = std::string(line.substr(second + 1));
    if (entry.path.empty()) return;
    out.push_back(std::move(entry));
  });
  return out;
}

std::vector<CgroupMount> parse_cgroup_mounts(std::string_view mountinfo) {
  std::vector<CgroupMount> out;
  for_each_line(mountinfo, [&](std::string_view line) {
    // "ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS"
    auto dash = line.find(" - ");
    if (dash == std::string_view::npos) return;
    auto before = split_on(line.substr(0, dash), ' ');
    auto after = split_on(line.substr(dash + 3), ' ');
    if (before.size() < 6 || after.size() < 3) return;
    CgroupMount mount;
    if (after[0] == "cgroup2") {
      mount.version = 2;
    } else if (after[0] == "cgroup") {
      mount.version = 1;
      for (auto option : split_on(after[2], ',')) {
        if (option == "rw" || option == "ro" || option.empty()) continue;
        mount.controllers.emplace_back(option);
      }
    } else {
      return;
    }
    mount.root = unescape_mount_path(before[3]);
    mount.mount_point = unescape_mount_path(before[4]);
    out.push_back(std::move(mount));
  });
  return out;
}

std::optional<std::string> cgroup_directory(const CgroupMount& mount, std::string_view path) {
  if (path.empty() || path.front() != '/') return std::nullopt;
  // A cgroup above this namespace's root is shown as "/../...": we cannot reach it.
  if (path == "/.." || path.rfind("/../", 0) == 0) return std::nullopt;
  std::string_view rest = path;
  if (mount.root != "/") {
    // Only the part of the hierarchy below `root` is mounted here.
    const std::string_view root = mount.root;
    if (rest.substr(0, root.size()) != root || (rest.size() > root.size() && rest[root.size()] != '/')) {
      return std::nullopt;
    }
    rest.remove_prefix(root.size());
  }
  std::string dir = mount.mount_point;
  while (!dir.empty() && dir.back() == '/') dir.pop_back();
  if (rest != "/") dir += rest;
  if (dir.empty()) dir = "/";
  return dir;
}

}  // namespace gpucloud::agent::sampling

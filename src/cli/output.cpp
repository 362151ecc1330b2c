#include "cli/output.h"

#include <algorithm>
#include <ostream>

#include <boost/json.hpp>
#include <fmt/format.h>

namespace gpucloud::cli {

namespace json = boost::json;

namespace {

// Decodes one code point; malformed bytes count as one column each.
char32_t next_code_point(std::string_view s, std::size_t& i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  int extra = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
  if (extra < 0 || i + static_cast<std::size_t>(extra) >= s.size()) {
    ++i;
    return c;
  }
  char32_t cp = extra == 0 ? c : c & (0x3F >> extra);
  for (int k = 1; k <= extra; ++k) {
    unsigned char cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xC0) != 0x80) {
      ++i;
      return c;
    }
    cp = (cp << 6) | (cc & 0x3F);
  }
  i += extra + 1;
  return cp;
}

bool is_wide(char32_t cp) {
  return (cp >= 0x1100 && cp <= 0x115F) || (cp >= 0x2E80 && cp <= 0xA4CF && cp != 0x303F) ||
         (cp >= 0xAC00 && cp <= 0xD7A3) || (cp >= 0xF900 && cp <= 0xFAFF) ||
         (cp >= 0xFE30 && cp <= 0xFE4F) || (cp >= 0xFF00 && cp <= 0xFF60) ||
         (cp >= 0xFFE0 && cp <= 0xFFE6) || (cp >= 0x1F300 && cp <= 0x1FAFF) ||
         (cp >= 0x20000 && cp <= 0x3FFFD);
}

bool is_zero_width(char32_t cp) {
  return (cp >= 0x0300 && cp <= 0x036F) || cp == 0x200B || cp == 0x200D ||
         (cp >= 0xFE00 && cp <= 0xFE0F);
}

void pad_to(std::string& line, std::size_t current, std::size_t width) {
  if (current < width) line.append(width - current, ' ');
}

void pretty(std::string& out, const json::value& v, int indent) {
  std::string pad(static_cast<std::size_t>(indent) * 2, ' ');
  if (v.is_object() && !v.get_object().empty()) {
    out += "{\n";
    bool first = true;
    for (const auto& m : v.get_object()) {
      if (!first) out += ",\n";
      first = false;
      out += pad + "  " + json::serialize(json::value(m.key())) + ": ";
      pretty(out, m.value(), indent + 1);
    }
    out += "\n" + pad + "}";
  } else if (v.is_array() && !v.get_array().empty()) {
    out += "[\n";
    bool first = true;
    for (const auto& e : v.get_array()) {
      if (!first) out += ",\n";
      first = false;
      out += pad + "  ";
      pretty(out, e, indent + 1);
    }
    out += "\n" + pad + "]";
  } else {
    out += json::serialize(v);
  }
}

}  // namespace

std::size_t display_width(std::string_view text) {
  std::size_t width = 0;
  for (std::size_t i = 0; i < text.size();) {
    char32_t cp = next_code_point(text, i);
    if (is_zero_width(cp)) continue;
    width += is_wide(cp) ? 2 : 1;
  }
  return width;
}

Table::Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}

void Table::add_row(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  rows_.push_back(Row{std::move(cells), {}});
}

void Table::add_detail(std::string line) {
  if (rows_.empty()) rows_.push_back(Row{std::vector<std::string>(headers_.size()), {}});
  rows_.back().details.push_back(std::move(line));
}

std::string Table::render(bool with_header) const {
  std::vector<std::size_t> widths(headers_.size(), 0);
  if (with_header) {
    for (std::size_t c = 0; c < headers_.size(); ++c) widths[c] = display_width(headers_[c]);
  }
  for (const auto& row : rows_) {
    for (std::size_t c = 0; c < row.cells.size(); ++c) {
      widths[c] = std::max(widths[c], display_width(row.cells[c]));
    }
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    std::string l;
    for (std::size_t c = 0; c < cells.size(); ++c) {
      if (c > 0) l += "  ";
      l += cells[c];
      if (c + 1 < cells.size()) pad_to(l, display_width(cells[c]), widths[c]);
    }
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l + "\n";
  };
  if (with_header) line(headers_);
  for (const auto& row : rows_) {
    line(row.cells);
    for (const auto& d : row.details) out += d + "\n";
  }
  return out;
}

void KeyValues::add(std::string key, std::string value) {
  lines_.emplace_back(std::move(key), std::move(value));
}

std::string KeyValues::render() const {
  std::size_t width = 0;
  for (const auto& [k, v] : lines_) width = std::max(width, display_width(k) + 1);
  std::string out;
  for (const auto& [k, v] : lines_) {
    std::string l = k + ":";
    pad_to(l, display_width(k) + 1, width);
    l += " " + v;
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l + "\n";
  }
  return out;
}

void print_json(std::ostream& out, const json::value& value) {
  out << pretty_json(value) << "\n";
}

std::string pretty_json(const json::value& value) {
  std::string out;
  pretty(out, value, 0);
  return out;
}

const json::value* member(const json::value& object, std::string_view key) {
  const auto* obj = object.if_object();
  if (obj == nullptr) return nullptr;
  const auto* v = obj->if_contains(key);
  if (v == nullptr || v->is_null()) return nullptr;
  return v;
}

std::string text(const json::value& object, std::string_view key, std::string_view fallback) {
  const auto* v = member(object, key);
  if (v == nullptr) return std::string(fallback);
  if (v->is_string()) {
    return v->get_string().empty() ? std::string(fallback) : std::string(v->get_string());
  }
  if (v->is_bool()) return v->get_bool() ? "true" : "false";
  if (v->is_int64()) return std::to_string(v->get_int64());
  if (v->is_uint64()) return std::to_string(v->get_uint64());
  return json::serialize(*v);
}

std::optional<std::int64_t> integer(const json::value& object, std::string_view key) {
  const auto* v = member(object, key);
  if (v == nullptr) return std::nullopt;
  if (v->is_int64()) return v->get_int64();
  if (v->is_uint64() && v->get_uint64() <= static_cast<std::uint64_t>(INT64_MAX)) {
    return static_cast<std::int64_t>(v->get_uint64());
  }
  return std::nullopt;
}

bool flag(const json::value& object, std::string_view key) {
  const auto* v = member(object, key);
  return v != nullptr && v->is_bool() && v->get_bool();
}

const json::array& items_of(const json::value& collection) {
  static const json::array kEmpty;
  if (collection.is_array()) return collection.get_array();
  const auto* v = member(collection, "items");
  return v != nullptr && v->is_array() ? v->get_array() : kEmpty;
}

std::string currency_of(const json::value& object, std::string_view fallback) {
  const auto* v = member(object, "currency");
  if (v != nullptr && v->is_string() && !v->get_string().empty()) {
    return std::string(v->get_string());
  }
  return std::string(fallback);
}

std::string format_gib(std::int64_t gib) { return fmt::format("{} GiB", gib); }

std::string format_bytes(std::int64_t bytes) {
  constexpr std::int64_t kKiB = 1024, kMiB = kKiB * 1024, kGiB = kMiB * 1024;
  // Tenths computed with integers.
  auto tenths = [&](std::int64_t unit) {
    std::int64_t t = (bytes * 10 + unit / 2) / unit;
    return t % 10 == 0 ? fmt::format("{}", t / 10) : fmt::format("{}.{}", t / 10, t % 10);
  };
  if (bytes >= kGiB) return tenths(kGiB) + " GiB";
  if (bytes >= kMiB) return tenths(kMiB) + " MiB";
  if (bytes >= kKiB) return tenths(kKiB) + " KiB";
  return fmt::format("{} B", bytes);
}

std::string format_duration(std::int64_t seconds) {
  if (seconds < 0) seconds = 0;
  std::int64_t d = seconds / 86400, h = seconds / 3600 % 24, m = seconds / 60 % 60,
               s = seconds % 60;
  if (d > 0) return fmt::format("{}d {}h", d, h);
  if (h > 0) return fmt::format("{}h {:02}m", h, m);
  if (m > 0) return fmt::format("{}m {:02}s", m, s);
  return fmt::format("{}s", s);
}

}  // namespace gpucloud::cli

#pragma once
// Human output: aligned tables, key: value blocks, and small helpers to read API objects
// without caring whether a field is missing or null. `--json` output prints the API's JSON.
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/json/value.hpp>

namespace gpucloud::cli {

// Terminal columns a UTF-8 string takes (CJK and fullwidth characters count two).
std::size_t display_width(std::string_view text);

class Table {
 public:
  explicit Table(std::vector<std::string> headers);
  void add_row(std::vector<std::string> cells);
  // A line printed under the last row as it is (not aligned), e.g. per-GPU detail.
  void add_detail(std::string line);
  std::size_t rows() const { return rows_.size(); }
  // Columns separated by two spaces, no trailing spaces, one line per row.
  std::string render(bool with_header = true) const;

 private:
  struct Row {
    std::vector<std::string> cells;
    std::vector<std::string> details;
  };
  std::vector<std::string> headers_;
  std::vector<Row> rows_;
};

// "key: value" lines with the values aligned.
class KeyValues {
 public:
  void add(std::string key, std::string value);
  std::string render() const;

 private:
  std::vector<std::pair<std::string, std::string>> lines_;
};

// The API's JSON, one document, followed by a newline.
void print_json(std::ostream& out, const boost::json::value& value);
// Indented JSON for human eyes.
std::string pretty_json(const boost::json::value& value);

// Field readers: missing or null → fallback ("-" by default); numbers and booleans are
// written out; strings as they are.
std::string text(const boost::json::value& object, std::string_view key,
                 std::string_view fallback = "-");
std::optional<std::int64_t> integer(const boost::json::value& object, std::string_view key);
bool flag(const boost::json::value& object, std::string_view key);
const boost::json::value* member(const boost::json::value& object, std::string_view key);
// items of {"items": [...]} (or the value itself when it is an array).
const boost::json::array& items_of(const boost::json::value& collection);

// The currency of an answer: its own "currency" member if any, else CNY.
std::string currency_of(const boost::json::value& object, std::string_view fallback = "CNY");

std::string format_gib(std::int64_t gib);         // "24 GiB"
std::string format_bytes(std::int64_t bytes);     // "1.5 GiB", "300 MiB"
std::string format_duration(std::int64_t seconds);  // "3d 4h", "2h 05m", "42s"

}  // namespace gpucloud::cli

#pragma once
// Lists of api.md: {"items": [...], "next_cursor": ...}, newest first by (created_at, id),
// keyset cursors, `limit` default 100, max 1000.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/json.hpp>

#include "core/result.h"
#include "server/http_types.h"

namespace gpucloud::server {

struct PageRequest {
  std::size_t limit = 100;
  std::optional<std::pair<std::int64_t, std::string>> after;  // (created_at micros, id) of the last item seen
};

Result<PageRequest> parse_page_request(const Request& request);
std::string encode_cursor(std::int64_t created_at_micros, const std::string& id);

// `items` must already be ordered newest first; `key(item)` gives (created_at micros, id).
template <class T, class Key, class ToJson>
boost::json::object page_of(const std::vector<T>& items, const PageRequest& page, Key key, ToJson to_json) {
  boost::json::array out;
  std::optional<std::pair<std::int64_t, std::string>> last;
  bool more = false;
  for (const T& item : items) {
    auto k = key(item);
    if (page.after && !(k < *page.after)) continue;
    if (out.size() == page.limit) {
      more = true;
      break;
    }
    out.push_back(to_json(item));
    last = std::move(k);
  }
  boost::json::object doc;
  doc["items"] = std::move(out);
  if (more && last) doc["next_cursor"] = encode_cursor(last->first, last->second);
  else doc["next_cursor"] = nullptr;
  return doc;
}

// Lists in a fixed order of their own (zones, offers, hosts as configured): the position
// is the key, so the same `limit` and `cursor` work on them.
boost::json::object page_in_order(const boost::json::array& items, const PageRequest& page);

}  // namespace gpucloud::server

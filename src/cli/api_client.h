#pragma once
// The REST API as the CLI sees it: JSON in and out under BASE/api/v1, bearer token,
// problem+json answers turned into Error values.
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/json/value.hpp>

#include "cli/http_client.h"
#include "core/result.h"

namespace gpucloud::cli {

// Turns a non-2xx answer into an Error: `detail` (else `title`, else the status line) and the
// problem's `code` when it is one of ours; integer members go into Error::numbers.
Error problem_to_error(const HttpResponse& response);

// "error: DETAIL" — what the CLI prints on stderr for an API refusal.
std::string error_message(const Error& error);

// Percent-encodes one path segment or query value (names and ids are safe already, but
// user input is arbitrary).
std::string url_escape(std::string_view text);

class ApiClient {
 public:
  ApiClient(HttpTransport& transport, std::string base_path, std::string token);

  using Headers = std::vector<std::pair<std::string, std::string>>;

  // `path` is relative to /api/v1 ("/instances/foo"). An empty answer body is JSON null.
  Result<boost::json::value> get(std::string_view path);
  Result<boost::json::value> post(std::string_view path, const boost::json::value& body,
                                  const Headers& headers = {},
                                  std::chrono::milliseconds timeout = {});
  Result<boost::json::value> put(std::string_view path, const boost::json::value& body);
  Result<boost::json::value> patch(std::string_view path, const boost::json::value& body);
  Result<boost::json::value> del(std::string_view path);

  // GET of a collection, following `next_cursor` so tables show everything; the answer is
  // {"items": [...all...], "next_cursor": null}.
  Result<boost::json::value> get_all(std::string_view path, std::size_t max_items = 100000);

  bool has_token() const { return !token_.empty(); }
  // login/register send no credential even when one is configured.
  void set_token(std::string token) { token_ = std::move(token); }

 private:
  Result<boost::json::value> call(std::string_view method, std::string_view path,
                                  const boost::json::value* body, const Headers& headers,
                                  std::chrono::milliseconds timeout);

  HttpTransport& transport_;
  std::string base_path_;
  std::string token_;
};

}  // namespace gpucloud::cli

#pragma once
// Beast's parsed request -> the plain server::Request handlers see. Its own file so the HTTP
// fuzzer (tests/fuzz/http_request.cpp) runs exactly the conversion the server runs.
#include <string>

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include "core/result.h"
#include "server/http_types.h"

namespace gpucloud::server {

// Moves the body out of `in`. A target that is not a valid origin-form path sets `valid` to
// an invalid_argument error (the caller answers 400).
Request to_request(boost::beast::http::request<boost::beast::http::string_body>& in, const std::string& client,
                   Result<void>& valid);

}  // namespace gpucloud::server

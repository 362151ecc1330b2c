#include "core/result.h"

namespace gpucloud {

std::string_view to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_argument: return "invalid_argument";
    case ErrorCode::unauthorized: return "unauthorized";
    case ErrorCode::forbidden: return "forbidden";
    case ErrorCode::not_found: return "not_found";
    case ErrorCode::conflict: return "conflict";
    case ErrorCode::insufficient_balance: return "insufficient_balance";
    case ErrorCode::no_capacity: return "no_capacity";
    case ErrorCode::quota_exceeded: return "quota_exceeded";
    case ErrorCode::rate_limited: return "rate_limited";
    case ErrorCode::payload_too_large: return "payload_too_large";
    case ErrorCode::method_not_allowed: return "method_not_allowed";
    case ErrorCode::unsupported_media_type: return "unsupported_media_type";
    case ErrorCode::unavailable: return "unavailable";
    case ErrorCode::internal: return "internal";
  }
  return "internal";
}

int http_status(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_argument: return 400;
    case ErrorCode::unauthorized: return 401;
    case ErrorCode::insufficient_balance: return 402;
    case ErrorCode::forbidden: return 403;
    case ErrorCode::quota_exceeded: return 403;
    case ErrorCode::not_found: return 404;
    case ErrorCode::method_not_allowed: return 405;
    case ErrorCode::conflict: return 409;
    case ErrorCode::no_capacity: return 409;
    case ErrorCode::payload_too_large: return 413;
    case ErrorCode::unsupported_media_type: return 415;
    case ErrorCode::rate_limited: return 429;
    case ErrorCode::internal: return 500;
    case ErrorCode::unavailable: return 503;
  }
  return 500;
}

std::string_view http_title(ErrorCode code) {
  switch (http_status(code)) {
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 402: return "Payment Required";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 413: return "Payload Too Large";
    case 415: return "Unsupported Media Type";
    case 429: return "Too Many Requests";
    case 503: return "Service Unavailable";
    default: return "Internal Server Error";
  }
}

}  // namespace gpucloud

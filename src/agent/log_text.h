#pragma once
// The agent's log lines are JSON: text goes into them as a JSON string.
#include <string>
#include <string_view>

#include <boost/json/serialize.hpp>
#include <boost/json/string.hpp>
#include <boost/json/value.hpp>

namespace gpucloud::agent {

// Any text as a JSON string, quotes included.
inline std::string q(std::string_view text) {
  return boost::json::serialize(boost::json::value(boost::json::string(text)));
}

}  // namespace gpucloud::agent

#pragma once
// One engine answer's body streamed into another engine request's body (container export
// into image import) a piece at a time, so a system disk of any size never sits in memory.
#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include "agent/runtime/engine_client.h"

namespace gpucloud::agent::docker {

// GET `source_target`, and send its body (chunked) as the body of POST `sink_target`;
// the sink's answer, whatever its status. A source answering other than 200 is an error
// carrying the engine's message. `timeout` covers the whole copy.
boost::asio::awaitable<Result<EngineResponse>> pipe_between(boost::asio::any_io_executor executor,
                                                            EngineClient::Options options,
                                                            std::string source_target, std::string sink_target,
                                                            std::string sink_content_type,
                                                            std::chrono::milliseconds timeout);

// POST `sink_target` with a body made piece by piece (chunked): `next` gives the next piece,
// empty when done (an error from it aborts the request, so the engine never sees a complete
// body). The sink's answer, whatever its status. `timeout` covers the whole request.
boost::asio::awaitable<Result<EngineResponse>> post_streamed(
    boost::asio::any_io_executor executor, EngineClient::Options options, std::string sink_target,
    std::string content_type, std::function<boost::asio::awaitable<Result<std::string_view>>()> next,
    std::chrono::milliseconds timeout);

}  // namespace gpucloud::agent::docker

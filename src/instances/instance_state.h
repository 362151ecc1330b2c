#pragma once
// An instance's state as a type. The spec's names are the wire form; code compares enums.
//   creating -> running <-> stopping -> stopped -> starting -> running
//   any live state -> releasing -> released; creating/starting -> error (with a reason)
#include <optional>
#include <string>
#include <string_view>

namespace gpucloud::instances {

enum class InstanceState { creating, running, stopping, stopped, starting, releasing, released, error };

std::string_view to_string(InstanceState state);
std::optional<InstanceState> parse_instance_state(std::string_view text);
// Engine work is under way (or was cut short by a crash): converge() drives these on.
bool is_transitional(InstanceState state);
// Holds a reservation (GPUs, CPU, memory) on its host.
bool holds_reservation(InstanceState state);

}  // namespace gpucloud::instances

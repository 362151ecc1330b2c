#include "instances/instance_state.h"

#include <array>
#include <utility>

namespace gpucloud::instances {
namespace {
constexpr std::array<std::pair<InstanceState, std::string_view>, 8> kNames{{
    {InstanceState::creating, "creating"},
    {InstanceState::running, "running"},
    {InstanceState::stopping, "stopping"},
    {InstanceState::stopped, "stopped"},
    {InstanceState::starting, "starting"},
    {InstanceState::releasing, "releasing"},
    {InstanceState::released, "released"},
    {InstanceState::error, "error"},
}};
}  // namespace

std::string_view to_string(InstanceState state) {
  for (const auto& [s, name] : kNames)
    if (s == state) return name;
  return "error";
}

std::optional<InstanceState> parse_instance_state(std::string_view text) {
  for (const auto& [s, name] : kNames)
    if (name == text) return s;
  return std::nullopt;
}

bool is_transitional(InstanceState s) {
  return s == InstanceState::creating || s == InstanceState::starting || s == InstanceState::stopping ||
         s == InstanceState::releasing;
}

bool holds_reservation(InstanceState s) {
  return s == InstanceState::creating || s == InstanceState::starting || s == InstanceState::running ||
         s == InstanceState::stopping || s == InstanceState::releasing;
}

}  // namespace gpucloud::instances

#include "scheduler/placement.h"

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace gpucloud::scheduler {

namespace {

constexpr int kFeasible = kReasonCount;  // "failed no filter"

const std::string& display_name(const HostCapacity& host) {
  return host.name.empty() ? host.id : host.name;
}

// The host that came closest at one filter: most of the resource, ties broken like the
// ranking (lower CPU use, then id) so both place() paths name the same host.
struct Closest {
  std::int64_t value = -1;
  const HostCapacity* host = nullptr;

  void offer(std::int64_t v, const HostCapacity& h) {
    if (host == nullptr || v > value ||
        (v == value &&
         (h.cpu_used < host->cpu_used || (h.cpu_used == host->cpu_used && h.id < host->id)))) {
      value = v;
      host = &h;
    }
  }
};

// What the filters saw, enough to explain a refusal.
struct Tally {
  std::array<int, kReasonCount> counts{};
  Closest gpus, cpu, memory;
  int hosts_total = 0;
  const HostCapacity* only_host = nullptr;  // when exactly one host was considered
};

struct HostFit {
  int failed = kFeasible;  // a Reason as int, or kFeasible
  int free = 0;            // free GPUs of the model (of any model for a no-GPU request)
};

// Runs the filters cheapest first, recording a rejection in `tally`.
HostFit evaluate(const HostCapacity& host, const PlacementRequest& req, Tally& tally) {
  auto reject = [&](Reason r) {
    ++tally.counts[static_cast<int>(r)];
    return HostFit{static_cast<int>(r), 0};
  };
  if (!req.zone.empty() && host.zone != req.zone) return reject(Reason::zone_mismatch);
  if (!host.ready) return reject(Reason::host_not_ready);
  HostFit fit;
  if (req.gpu_count > 0) {
    bool present = false;
    for (const auto& g : host.gpus) {
      if (g.model != req.gpu_model) continue;
      present = true;
      fit.free += g.free ? 1 : 0;
    }
    if (!present) return reject(Reason::model_absent);
    if (fit.free < req.gpu_count) {
      tally.gpus.offer(fit.free, host);
      return reject(Reason::not_enough_gpus);
    }
  } else {
    fit.free = host.free_gpus_any();
  }
  if (host.cpu_free() < req.cpu) {
    tally.cpu.offer(host.cpu_free(), host);
    return reject(Reason::not_enough_cpu);
  }
  if (host.memory_gib_free() < req.memory_gib) {
    tally.memory.offer(host.memory_gib_free(), host);
    return reject(Reason::not_enough_memory);
  }
  return fit;
}

// Strict "a ranks before b" for best fit, given each host's free count.
bool ranks_before(int free_a, const HostCapacity& a, int free_b, const HostCapacity& b) {
  if (free_a != free_b) return free_a < free_b;
  if (a.cpu_used != b.cpu_used) return a.cpu_used < b.cpu_used;
  return a.id < b.id;
}

Placement make_placement(const HostCapacity& host, const PlacementRequest& req) {
  Placement p;
  p.host_id = host.id;
  p.cpu = req.cpu;
  p.memory_gib = req.memory_gib;
  if (req.gpu_count > 0) {
    // Preferred GPUs first, then lowest indices: predictable for users and operators
    // reading nvidia-smi. The chosen indices are returned ascending.
    std::vector<std::pair<bool, int>> candidates;  // (not preferred, index)
    candidates.reserve(host.gpus.size());
    for (const auto& g : host.gpus) {
      if (!g.free || g.model != req.gpu_model) continue;
      const bool preferred = std::find(req.preferred_gpu_uuids.begin(), req.preferred_gpu_uuids.end(), g.uuid) !=
                             req.preferred_gpu_uuids.end();
      candidates.emplace_back(!preferred, g.index);
    }
    std::sort(candidates.begin(), candidates.end());
    candidates.resize(static_cast<std::size_t>(req.gpu_count));
    p.gpu_indices.reserve(candidates.size());
    for (const auto& c : candidates) p.gpu_indices.push_back(c.second);
    std::sort(p.gpu_indices.begin(), p.gpu_indices.end());
  }
  return p;
}

std::string for_gpus(const PlacementRequest& req) {
  if (req.gpu_count == 0) return "";
  return " for " + std::to_string(req.gpu_count) + " " + req.gpu_model;
}

Unschedulable explain(const PlacementRequest& req, const Tally& tally) {
  Unschedulable u;
  int limiting = 0;
  for (int r = 0; r < kReasonCount; ++r) {
    if (tally.counts[r] == 0) continue;
    u.reasons.push_back({static_cast<Reason>(r), tally.counts[r]});
    limiting = r;
  }
  u.limiting = static_cast<Reason>(limiting);
  const std::string where = req.zone.empty() ? "" : " in " + req.zone;
  const HostCapacity* one = tally.only_host;

  auto closest = [&](const Closest& c) {
    u.most_free_on_one_host = c.value;
    u.best_host_name = c.host != nullptr ? display_name(*c.host) : "";
  };

  switch (u.limiting) {
    case Reason::zone_mismatch:
      if (one != nullptr) {
        u.message = "host " + display_name(*one) + " is in " + one->zone + ", not " + req.zone;
      } else if (tally.hosts_total == 0 && req.zone.empty()) {
        u.message = "no hosts are registered";
      } else {
        u.message = "no host in " + req.zone;
      }
      break;
    case Reason::host_not_ready:
      if (one != nullptr) {
        u.message = "host " + display_name(*one) + " is not ready";
      } else {
        u.message = "no host" + where + " is ready (" +
                    std::to_string(tally.counts[static_cast<int>(Reason::host_not_ready)]) +
                    " not ready)";
      }
      break;
    case Reason::model_absent:
      if (one != nullptr) {
        u.message = "host " + display_name(*one) + " has no " + req.gpu_model + " GPUs";
      } else {
        u.message = "no ready host" + where + " has " + req.gpu_model + " GPUs";
      }
      break;
    case Reason::not_enough_gpus:
      closest(tally.gpus);
      if (one != nullptr) {
        u.message = "host " + display_name(*one) + " has " +
                    std::to_string(u.most_free_on_one_host) + " free " + req.gpu_model +
                    "; the instance needs " + std::to_string(req.gpu_count);
      } else {
        u.message = "no host" + where + " has " + std::to_string(req.gpu_count) + " free " +
                    req.gpu_model +
                    "; most free on one host: " + std::to_string(u.most_free_on_one_host) + " (" +
                    u.best_host_name + ")";
      }
      break;
    case Reason::not_enough_cpu:
      closest(tally.cpu);
      if (one != nullptr) {
        u.message =
            "host " + display_name(*one) + " has " + std::to_string(u.most_free_on_one_host) +
            " free CPU cores; the instance needs " + std::to_string(req.cpu) + for_gpus(req);
      } else {
        u.message = "no host" + where + " has " + std::to_string(req.cpu) + " free CPU cores" +
                    for_gpus(req) +
                    "; most on one host: " + std::to_string(u.most_free_on_one_host) + " (" +
                    u.best_host_name + ")";
      }
      break;
    case Reason::not_enough_memory:
      closest(tally.memory);
      if (one != nullptr) {
        u.message = "host " + display_name(*one) + " has " +
                    std::to_string(u.most_free_on_one_host) +
                    " GiB of free memory; the instance needs " + std::to_string(req.memory_gib) +
                    " GiB" + for_gpus(req);
      } else {
        u.message = "no host" + where + " has " + std::to_string(req.memory_gib) +
                    " GiB of free memory" + for_gpus(req) +
                    "; most on one host: " + std::to_string(u.most_free_on_one_host) + " GiB (" +
                    u.best_host_name + ")";
      }
      break;
  }
  return u;
}

// The linear scan, over any sequence of hosts (a vector, or the index's nodes).
template <class Hosts, class Get>
PlacementResult place_linear(const Hosts& hosts, Get get, const PlacementRequest& req,
                             Strategy strategy) {
  Tally tally;
  const HostCapacity* best = nullptr;
  int best_free = 0;
  for (const auto& item : hosts) {
    const HostCapacity& host = get(item);
    ++tally.hosts_total;
    tally.only_host = &host;
    HostFit fit = evaluate(host, req, tally);
    if (fit.failed != kFeasible) continue;
    if (strategy == Strategy::first_fit) return make_placement(host, req);
    if (best == nullptr || ranks_before(fit.free, host, best_free, *best)) {
      best = &host;
      best_free = fit.free;
    }
  }
  if (best != nullptr) return make_placement(*best, req);
  if (tally.hosts_total != 1) tally.only_host = nullptr;
  return explain(req, tally);
}

}  // namespace

std::string_view to_string(Reason reason) {
  switch (reason) {
    case Reason::zone_mismatch: return "zone_mismatch";
    case Reason::host_not_ready: return "host_not_ready";
    case Reason::model_absent: return "model_absent";
    case Reason::not_enough_gpus: return "not_enough_gpus";
    case Reason::not_enough_cpu: return "not_enough_cpu";
    case Reason::not_enough_memory: return "not_enough_memory";
  }
  return "unknown";
}

int HostCapacity::free_gpus(std::string_view model) const {
  int n = 0;
  for (const auto& g : gpus) n += (g.free && g.model == model) ? 1 : 0;
  return n;
}

int HostCapacity::free_gpus_any() const {
  int n = 0;
  for (const auto& g : gpus) n += g.free ? 1 : 0;
  return n;
}

bool HostCapacity::has_model(std::string_view model) const {
  return std::any_of(gpus.begin(), gpus.end(), [&](const GpuSlot& g) { return g.model == model; });
}

int Unschedulable::hosts_rejected(Reason reason) const {
  for (const auto& rc : reasons) {
    if (rc.reason == reason) return rc.hosts;
  }
  return 0;
}

Error Unschedulable::to_error() const {
  Error e{ErrorCode::no_capacity, message, {}, 0};
  switch (limiting) {
    case Reason::not_enough_gpus: e.numbers.emplace_back("gpus_free", most_free_on_one_host); break;
    case Reason::not_enough_cpu: e.numbers.emplace_back("cpu_free", most_free_on_one_host); break;
    case Reason::not_enough_memory:
      e.numbers.emplace_back("memory_gib_free", most_free_on_one_host);
      break;
    default: e.numbers.emplace_back("gpus_free", 0); break;
  }
  return e;
}

Status validate(const PlacementRequest& r) {
  if (r.gpu_count < 0) return fail(ErrorCode::invalid_argument, "gpu_count must not be negative");
  if (r.cpu < 0) return fail(ErrorCode::invalid_argument, "cpu must not be negative");
  if (r.memory_gib < 0) {
    return fail(ErrorCode::invalid_argument, "memory_gib must not be negative");
  }
  if (r.gpu_count > 0 && r.gpu_model.empty()) {
    return fail(ErrorCode::invalid_argument, "gpu_model is required when gpu_count > 0");
  }
  if (r.gpu_count == 0 && !r.gpu_model.empty()) {
    return fail(ErrorCode::invalid_argument, "gpu_model must be empty when gpu_count is 0");
  }
  return ok();
}

Result<PlacementResult> place(const std::vector<HostCapacity>& hosts,
                              const PlacementRequest& request, Strategy strategy) {
  if (auto v = validate(request); !v) return fail(v.error());
  return place_linear(
      hosts, [](const HostCapacity& h) -> const HostCapacity& { return h; }, request, strategy);
}

std::int64_t free_gpus_for_offer(const HostCapacity& host, const std::string& model,
                                 int cpu_per_gpu, std::int64_t mem_per_gpu) {
  if (!host.ready) return 0;
  std::int64_t n = host.free_gpus(model);
  if (cpu_per_gpu > 0) n = std::min<std::int64_t>(n, std::max(0, host.cpu_free()) / cpu_per_gpu);
  if (mem_per_gpu > 0) {
    n = std::min(n, std::max<std::int64_t>(0, host.memory_gib_free()) / mem_per_gpu);
  }
  return std::max<std::int64_t>(0, n);
}

Status reserve(HostCapacity& host, const Placement& p) {
  if (p.cpu < 0 || p.memory_gib < 0) {
    return fail(ErrorCode::invalid_argument, "cpu and memory_gib must not be negative");
  }
  std::vector<std::size_t> slots;
  slots.reserve(p.gpu_indices.size());
  for (int index : p.gpu_indices) {
    auto it = std::find_if(host.gpus.begin(), host.gpus.end(),
                           [&](const GpuSlot& g) { return g.index == index; });
    if (it == host.gpus.end()) {
      return fail(ErrorCode::conflict,
                  "host " + display_name(host) + " has no GPU " + std::to_string(index));
    }
    auto slot = static_cast<std::size_t>(it - host.gpus.begin());
    if (!it->free || std::find(slots.begin(), slots.end(), slot) != slots.end()) {
      return fail(ErrorCode::conflict, "GPU " + std::to_string(index) + " on host " +
                                           display_name(host) + " is already in use");
    }
    slots.push_back(slot);
  }
  if (p.cpu > host.cpu_free()) {
    return fail(ErrorCode::conflict, "host " + display_name(host) + " has " +
                                         std::to_string(host.cpu_free()) + " free CPU cores, " +
                                         std::to_string(p.cpu) + " needed");
  }
  if (p.memory_gib > host.memory_gib_free()) {
    return fail(ErrorCode::conflict,
                "host " + display_name(host) + " has " + std::to_string(host.memory_gib_free()) +
                    " GiB of free memory, " + std::to_string(p.memory_gib) + " GiB needed");
  }
  for (auto slot : slots) host.gpus[slot].free = false;
  host.cpu_used += p.cpu;
  host.memory_gib_used += p.memory_gib;
  return ok();
}

Status release(HostCapacity& host, std::span<const int> gpu_indices, int cpu,
               std::int64_t memory_gib) {
  if (cpu < 0 || memory_gib < 0) {
    return fail(ErrorCode::invalid_argument, "cpu and memory_gib must not be negative");
  }
  std::vector<std::size_t> slots;
  slots.reserve(gpu_indices.size());
  for (int index : gpu_indices) {
    auto it = std::find_if(host.gpus.begin(), host.gpus.end(),
                           [&](const GpuSlot& g) { return g.index == index; });
    if (it == host.gpus.end()) {
      return fail(ErrorCode::conflict,
                  "host " + display_name(host) + " has no GPU " + std::to_string(index));
    }
    auto slot = static_cast<std::size_t>(it - host.gpus.begin());
    if (it->free || std::find(slots.begin(), slots.end(), slot) != slots.end()) {
      return fail(ErrorCode::conflict, "GPU " + std::to_string(index) + " on host " +
                                           display_name(host) + " is not in use");
    }
    slots.push_back(slot);
  }
  if (cpu > host.cpu_used || memory_gib > host.memory_gib_used) {
    return fail(ErrorCode::conflict,
                "host " + display_name(host) + " has less CPU or memory in use than released");
  }
  for (auto slot : slots) host.gpus[slot].free = true;
  host.cpu_used -= cpu;
  host.memory_gib_used -= memory_gib;
  return ok();
}

// ---------------------------------------------------------------------------------------------
// ClusterIndex

namespace {

struct ModelCount {
  std::string model;
  int free = 0;
};

struct Node {
  HostCapacity host;               // gpus sorted by index
  std::vector<ModelCount> models;  // one per model present, free count as last indexed
  int free_any = 0;
  bool linked = false;  // present in the buckets (only while ready)

  // After a reserve or release: the models present do not change, only the free counts.
  void recount_free() {
    free_any = 0;
    for (auto& m : models) m.free = 0;
    for (const auto& g : host.gpus) {
      if (!g.free) continue;
      ++free_any;
      for (auto& m : models) {
        if (m.model == g.model) {
          ++m.free;
          break;
        }
      }
    }
  }

  void recount() {
    models.clear();
    free_any = 0;
    for (const auto& g : host.gpus) {
      auto it = std::find_if(models.begin(), models.end(),
                             [&](const ModelCount& m) { return m.model == g.model; });
      if (it == models.end()) it = models.insert(models.end(), ModelCount{g.model, 0});
      it->free += g.free ? 1 : 0;
      free_any += g.free ? 1 : 0;
    }
  }
};

struct Entry {
  int cpu_used;
  const std::string* id;
  Node* node;
};

struct EntryLess {
  bool operator()(const Entry& a, const Entry& b) const {
    if (a.cpu_used != b.cpu_used) return a.cpu_used < b.cpu_used;
    return *a.id < *b.id;
  }
};

using Bucket = std::set<Entry, EntryLess>;

// Ready hosts of one zone that have one model (or, for `any`, all of them), by free count.
struct Family {
  std::vector<Bucket> buckets;
  int hosts = 0;
  std::int64_t free = 0;

  void insert(int f, Node* n) {
    if (buckets.size() <= static_cast<std::size_t>(f)) buckets.resize(f + 1);
    buckets[f].insert(Entry{n->host.cpu_used, &n->host.id, n});
    ++hosts;
    free += f;
  }
  void erase(int f, Node* n) {
    buckets[f].erase(Entry{n->host.cpu_used, &n->host.id, n});
    --hosts;
    free -= f;
  }
};

struct Zone {
  std::unordered_map<std::string, Family> by_model;
  Family any;
  int hosts = 0;  // all hosts in the zone, ready or not
  int not_ready = 0;
};

Status check_host(const HostCapacity& h) {
  if (h.id.empty()) return fail(ErrorCode::invalid_argument, "host id is empty");
  if (h.cpu_used < 0 || h.cpu_used > h.cpu_total || h.memory_gib_used < 0 ||
      h.memory_gib_used > h.memory_gib_total) {
    return fail(ErrorCode::invalid_argument,
                "host " + h.id + ": CPU or memory in use is negative or above the total");
  }
  std::unordered_set<int> seen;
  for (const auto& g : h.gpus) {
    if (!seen.insert(g.index).second) {
      return fail(ErrorCode::invalid_argument,
                  "host " + h.id + ": GPU index " + std::to_string(g.index) + " appears twice");
    }
    if (g.model.empty()) {
      return fail(ErrorCode::invalid_argument, "host " + h.id + ": a GPU has no model");
    }
  }
  return ok();
}

}  // namespace

struct ClusterIndex::Impl {
  std::vector<std::unique_ptr<Node>> nodes;  // insertion order (first fit walks it)
  std::unordered_map<std::string, Node*> by_id;
  std::map<std::string, Zone, std::less<>> zones;

  Node* lookup(std::string_view id) const {
    auto it = by_id.find(std::string(id));
    return it == by_id.end() ? nullptr : it->second;
  }

  void link(Node* n) {
    if (!n->host.ready) return;
    Zone& z = zones[n->host.zone];
    for (const auto& m : n->models) z.by_model[m.model].insert(m.free, n);
    z.any.insert(n->free_any, n);
    n->linked = true;
  }

  void unlink(Node* n) {
    if (!n->linked) return;
    Zone& z = zones.find(n->host.zone)->second;
    for (const auto& m : n->models) z.by_model.find(m.model)->second.erase(m.free, n);
    z.any.erase(n->free_any, n);
    n->linked = false;
  }

  void count_in(const Node* n, int sign) {
    Zone& z = zones[n->host.zone];
    z.hosts += sign;
    if (!n->host.ready) z.not_ready += sign;
  }

  // Best fit through the buckets; the same answer and explanation as place_linear.
  PlacementResult best_fit(const PlacementRequest& req) const {
    Tally tally;
    tally.hosts_total = static_cast<int>(nodes.size());
    if (nodes.size() == 1) tally.only_host = &nodes.front()->host;

    // Small and fixed per decision: the zones asked for and their family for the model.
    struct Scope {
      const Zone* zone;
      const Family* family;  // nullptr when the zone has no ready host with the model
    };
    std::vector<Scope> scopes;
    auto add_scope = [&](const Zone& z) {
      const Family* f = nullptr;
      if (req.gpu_count == 0) {
        f = &z.any;
      } else if (auto it = z.by_model.find(req.gpu_model); it != z.by_model.end()) {
        f = &it->second;
      }
      scopes.push_back({&z, f});
    };
    if (req.zone.empty()) {
      scopes.reserve(zones.size());
      for (const auto& [name, z] : zones) add_scope(z);
    } else if (auto it = zones.find(req.zone); it != zones.end()) {
      add_scope(it->second);
    }

    int in_scope = 0;
    std::size_t max_buckets = 0;
    for (const auto& s : scopes) {
      in_scope += s.zone->hosts;
      tally.counts[static_cast<int>(Reason::host_not_ready)] += s.zone->not_ready;
      if (req.gpu_count > 0) {
        int ready = s.zone->hosts - s.zone->not_ready;
        tally.counts[static_cast<int>(Reason::model_absent)] +=
            ready - (s.family != nullptr ? s.family->hosts : 0);
      }
      if (s.family != nullptr) max_buckets = std::max(max_buckets, s.family->buckets.size());
    }
    tally.counts[static_cast<int>(Reason::zone_mismatch)] = tally.hosts_total - in_scope;

    const auto need = static_cast<std::size_t>(req.gpu_count);
    for (std::size_t f = need; f < max_buckets; ++f) {
      const Entry* best = nullptr;
      for (const auto& s : scopes) {
        if (s.family == nullptr || f >= s.family->buckets.size()) continue;
        for (const Entry& e : s.family->buckets[f]) {
          const HostCapacity& h = e.node->host;
          if (h.cpu_free() < req.cpu) {
            ++tally.counts[static_cast<int>(Reason::not_enough_cpu)];
            tally.cpu.offer(h.cpu_free(), h);
            continue;
          }
          if (h.memory_gib_free() < req.memory_gib) {
            ++tally.counts[static_cast<int>(Reason::not_enough_memory)];
            tally.memory.offer(h.memory_gib_free(), h);
            continue;
          }
          // The bucket is ordered like the ranking: the first feasible entry is its best.
          if (best == nullptr || EntryLess{}(e, *best)) best = &e;
          break;
        }
      }
      if (best != nullptr) return make_placement(best->node->host, req);
    }

    // Nothing fits: the GPU filter's rejections are the buckets below the requested count.
    if (req.gpu_count > 0) {
      for (const auto& s : scopes) {
        if (s.family == nullptr) continue;
        const auto below = std::min(need, s.family->buckets.size());
        for (std::size_t f = 0; f < below; ++f) {
          tally.counts[static_cast<int>(Reason::not_enough_gpus)] +=
              static_cast<int>(s.family->buckets[f].size());
        }
        for (std::size_t f = below; f-- > 0;) {
          if (s.family->buckets[f].empty()) continue;
          tally.gpus.offer(static_cast<std::int64_t>(f), s.family->buckets[f].begin()->node->host);
          break;
        }
      }
    }
    return explain(req, tally);
  }
};

ClusterIndex::ClusterIndex() : impl_(std::make_unique<Impl>()) {}
ClusterIndex::~ClusterIndex() = default;
ClusterIndex::ClusterIndex(ClusterIndex&&) noexcept = default;
ClusterIndex& ClusterIndex::operator=(ClusterIndex&&) noexcept = default;

Status ClusterIndex::add_host(HostCapacity host) {
  if (auto c = check_host(host); !c) return c;
  if (impl_->by_id.count(host.id) != 0) {
    return fail(ErrorCode::invalid_argument, "host " + host.id + " is already in the index");
  }
  auto node = std::make_unique<Node>();
  node->host = std::move(host);
  std::sort(node->host.gpus.begin(), node->host.gpus.end(),
            [](const GpuSlot& a, const GpuSlot& b) { return a.index < b.index; });
  node->recount();
  Node* n = node.get();
  impl_->nodes.push_back(std::move(node));
  impl_->by_id.emplace(n->host.id, n);
  impl_->count_in(n, +1);
  impl_->link(n);
  return ok();
}

Status ClusterIndex::update_host(HostCapacity host) {
  if (auto c = check_host(host); !c) return c;
  Node* n = impl_->lookup(host.id);
  if (n == nullptr) return fail(ErrorCode::not_found, "host " + host.id + " is not in the index");
  impl_->unlink(n);
  impl_->count_in(n, -1);
  n->host = std::move(host);
  std::sort(n->host.gpus.begin(), n->host.gpus.end(),
            [](const GpuSlot& a, const GpuSlot& b) { return a.index < b.index; });
  n->recount();
  impl_->count_in(n, +1);
  impl_->link(n);
  return ok();
}

Status ClusterIndex::remove_host(std::string_view host_id) {
  Node* n = impl_->lookup(host_id);
  if (n == nullptr) {
    return fail(ErrorCode::not_found, "host " + std::string(host_id) + " is not in the index");
  }
  impl_->unlink(n);
  impl_->count_in(n, -1);
  impl_->by_id.erase(n->host.id);
  auto it = std::find_if(impl_->nodes.begin(), impl_->nodes.end(),
                         [&](const auto& p) { return p.get() == n; });
  impl_->nodes.erase(it);
  return ok();
}

Status ClusterIndex::set_ready(std::string_view host_id, bool ready) {
  Node* n = impl_->lookup(host_id);
  if (n == nullptr) {
    return fail(ErrorCode::not_found, "host " + std::string(host_id) + " is not in the index");
  }
  if (n->host.ready == ready) return ok();
  impl_->unlink(n);
  impl_->count_in(n, -1);
  n->host.ready = ready;
  impl_->count_in(n, +1);
  impl_->link(n);
  return ok();
}

Result<PlacementResult> ClusterIndex::place(const PlacementRequest& request,
                                            Strategy strategy) const {
  if (auto v = validate(request); !v) return fail(v.error());
  if (strategy == Strategy::first_fit) {
    return place_linear(
        impl_->nodes, [](const auto& n) -> const HostCapacity& { return n->host; }, request,
        strategy);
  }
  return impl_->best_fit(request);
}

Status ClusterIndex::commit(const Placement& placement) {
  Node* n = impl_->lookup(placement.host_id);
  if (n == nullptr) {
    return fail(ErrorCode::not_found, "host " + placement.host_id + " is not in the index");
  }
  if (!n->host.ready) {
    return fail(ErrorCode::conflict, "host " + display_name(n->host) + " is not ready");
  }
  // reserve() changes nothing when it refuses, so relinking restores the buckets exactly.
  impl_->unlink(n);
  auto r = reserve(n->host, placement);
  if (r) n->recount_free();
  impl_->link(n);
  return r;
}

Status ClusterIndex::release(std::string_view host_id, std::span<const int> gpu_indices, int cpu,
                             std::int64_t memory_gib) {
  Node* n = impl_->lookup(host_id);
  if (n == nullptr) {
    return fail(ErrorCode::not_found, "host " + std::string(host_id) + " is not in the index");
  }
  impl_->unlink(n);
  auto r = scheduler::release(n->host, gpu_indices, cpu, memory_gib);
  if (r) n->recount_free();
  impl_->link(n);
  return r;
}

Status ClusterIndex::release(const Placement& placement) {
  return release(placement.host_id, placement.gpu_indices, placement.cpu, placement.memory_gib);
}

const HostCapacity* ClusterIndex::find(std::string_view host_id) const {
  Node* n = impl_->lookup(host_id);
  return n == nullptr ? nullptr : &n->host;
}

std::vector<HostCapacity> ClusterIndex::hosts() const {
  std::vector<HostCapacity> out;
  out.reserve(impl_->nodes.size());
  for (const auto& n : impl_->nodes) out.push_back(n->host);
  return out;
}

std::size_t ClusterIndex::size() const { return impl_->nodes.size(); }

std::int64_t ClusterIndex::free_gpus(std::string_view zone, std::string_view model) const {
  std::int64_t total = 0;
  auto add = [&](const Zone& z) {
    if (auto it = z.by_model.find(std::string(model)); it != z.by_model.end()) {
      total += it->second.free;
    }
  };
  if (zone.empty()) {
    for (const auto& [name, z] : impl_->zones) add(z);
  } else if (auto it = impl_->zones.find(zone); it != impl_->zones.end()) {
    add(it->second);
  }
  return total;
}

}  // namespace gpucloud::scheduler

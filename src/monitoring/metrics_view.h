#pragma once
// The document GET /instances/{id}/metrics answers, built from what its handler read: the
// instance, its queried series, its newest reading and the window. Apart from the handler so
// that `gpucloud top`'s tests read the very document the server writes.
#include <cstdint>
#include <vector>

#include <boost/json/object.hpp>

#include "core/time_format.h"
#include "instances/instance_record.h"
#include "monitoring/latest_readings.h"
#include "monitoring/series.h"

namespace gpucloud::monitoring {

struct MetricsWindow {
  SysTime since, until;
  std::int64_t step = 0;  // seconds
  bool raw = true;        // raw samples, else the 1-minute averages
};

// `latest`: the instance's newest reading (LatestReadings), null when there is none.
boost::json::object instance_metrics_json(const instances::Instance& instance, const std::vector<QueriedSeries>& series,
                                          const LatestInstanceReading* latest, const MetricsWindow& window);

}  // namespace gpucloud::monitoring

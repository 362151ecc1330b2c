#pragma once
// A time zone read from the system's TZif files (/usr/share/zoneinfo), for what the spec
// counts in `billing_timezone`: statement months, usage days, subscription months. g++ 12's
// <chrono> has no time-zone database, so this reads the 64-bit section of TZif v2+ itself.
#include <cstdint>
#include <string>
#include <vector>

#include "core/result.h"
#include "core/time_format.h"

namespace gpucloud {

class TimeZone {
 public:
  static TimeZone utc();
  static Result<TimeZone> load(const std::string& name);  // "UTC" or a zoneinfo name

  const std::string& name() const { return name_; }
  // Seconds east of UTC in force at `t`.
  std::int64_t offset_at(SysTime t) const;

  struct Date {
    int year = 1970, month = 1, day = 1;
  };
  Date local_date(SysTime t) const;
  // The instant of local midnight starting that date (day may be 1 to start a month).
  SysTime start_of(const Date& date) const;
  SysTime start_of_day(SysTime t) const { return start_of(local_date(t)); }
  // The same local day-of-month `months` later, clamped to the month's last day (a calendar
  // month from Jan 31 ends on Feb 28/29), at the same local time of day.
  SysTime add_months(SysTime t, int months) const;

 private:
  std::string name_ = "UTC";
  std::vector<std::int64_t> transitions_;  // unix seconds, ascending
  std::vector<std::int64_t> offsets_;      // offset in force from transitions_[i]
  std::int64_t initial_offset_ = 0;        // before the first transition
};

// Days since 1970-01-01 of a civil date, and back (proleptic Gregorian).
std::int64_t days_from_civil(int y, int m, int d);
TimeZone::Date civil_from_days(std::int64_t days);

}  // namespace gpucloud

#include "core/timezone.h"

#include <algorithm>
#include <fstream>
#include <iterator>

namespace gpucloud {

namespace {

std::int64_t be(const unsigned char* p, int n) {
  std::uint64_t v = 0;
  for (int i = 0; i < n; ++i) v = (v << 8) | p[i];
  if (n == 4) return static_cast<std::int32_t>(static_cast<std::uint32_t>(v));
  return static_cast<std::int64_t>(v);
}

std::int64_t unix_seconds(SysTime t) { return std::chrono::floor<std::chrono::seconds>(t.time_since_epoch()).count(); }

int days_in_month(int y, int m) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : kDays[m - 1];
}

}  // namespace

std::int64_t days_from_civil(int y, int m, int d) {
  y -= m <= 2;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

TimeZone::Date civil_from_days(std::int64_t z) {
  z += 719468;
  const std::int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const unsigned doe = static_cast<unsigned>(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const std::int64_t y = static_cast<std::int64_t>(yoe) + era * 400;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  const unsigned d = doy - (153 * mp + 2) / 5 + 1;
  const unsigned m = mp < 10 ? mp + 3 : mp - 9;
  return TimeZone::Date{static_cast<int>(y + (m <= 2)), static_cast<int>(m), static_cast<int>(d)};
}

TimeZone TimeZone::utc() { return TimeZone{}; }

Result<TimeZone> TimeZone::load(const std::string& name) {
  TimeZone tz;
  tz.name_ = name;
  if (name == "UTC") return tz;
  std::ifstream in("/usr/share/zoneinfo/" + name, std::ios::binary);
  if (!in) return fail(ErrorCode::invalid_argument, "time zone " + name + ": no such zoneinfo file");
  std::vector<unsigned char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto bad = [&] { return fail(ErrorCode::invalid_argument, "time zone " + name + ": not a TZif file"); };
  auto header = [&](std::size_t at, std::int64_t counts[6]) -> bool {
    if (data.size() < at + 44 || std::string(data.begin() + at, data.begin() + at + 4) != "TZif") return false;
    for (int i = 0; i < 6; ++i) counts[i] = be(&data[at + 20 + 4 * i], 4);
    return true;
  };
  std::int64_t c[6];  // isutcnt, isstdcnt, leapcnt, timecnt, typecnt, charcnt
  if (!header(0, c)) return bad();
  const int version = data[4];
  std::size_t at = 44;
  int time_size = 4;
  if (version >= '2') {
    // Skip the 32-bit body to the 64-bit header.
    at += c[3] * 4 + c[3] + c[4] * 6 + c[5] + c[2] * 8 + c[1] + c[0];
    if (!header(at, c)) return bad();
    at += 44;
    time_size = 8;
  }
  const std::size_t need = c[3] * time_size + c[3] + c[4] * 6;
  if (data.size() < at + need || c[4] == 0) return bad();
  std::vector<std::int64_t> type_offsets(c[4]);
  const std::size_t types_at = at + c[3] * time_size + c[3];
  for (std::int64_t i = 0; i < c[4]; ++i) type_offsets[i] = be(&data[types_at + 6 * i], 4);
  tz.initial_offset_ = type_offsets[0];
  for (std::int64_t i = 0; i < c[3]; ++i) {
    const std::int64_t when = be(&data[at + i * time_size], time_size);
    const unsigned idx = data[at + c[3] * time_size + i];
    if (idx >= type_offsets.size()) return bad();
    tz.transitions_.push_back(when);
    tz.offsets_.push_back(type_offsets[idx]);
  }
  return tz;
}

std::int64_t TimeZone::offset_at(SysTime t) const {
  const std::int64_t s = unix_seconds(t);
  auto it = std::upper_bound(transitions_.begin(), transitions_.end(), s);
  if (it == transitions_.begin()) return initial_offset_;
  // Past the table's last transition the last rule holds (a zone without DST today).
  return offsets_[static_cast<std::size_t>(it - transitions_.begin()) - 1];
}

TimeZone::Date TimeZone::local_date(SysTime t) const {
  const std::int64_t local = unix_seconds(t) + offset_at(t);
  return civil_from_days(local >= 0 ? local / 86400 : (local - 86399) / 86400);
}

SysTime TimeZone::start_of(const Date& date) const {
  const std::int64_t local = days_from_civil(date.year, date.month, date.day) * 86400;
  // Local midnight → UTC: take the offset near it, then once more at the guess.
  SysTime guess = SysTime(std::chrono::seconds(local - offset_at(SysTime(std::chrono::seconds(local)))));
  return SysTime(std::chrono::seconds(local - offset_at(guess)));
}

SysTime TimeZone::add_months(SysTime t, int months) const {
  const Date d = local_date(t);
  const auto into_day = t - start_of(d);
  int m0 = d.month - 1 + months;
  int y = d.year + (m0 >= 0 ? m0 / 12 : (m0 - 11) / 12);
  int m = ((m0 % 12) + 12) % 12 + 1;
  Date target{y, m, std::min(d.day, days_in_month(y, m))};
  return start_of(target) + into_day;
}

}  // namespace gpucloud

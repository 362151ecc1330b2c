#include "core/time_format.h"

#include <cstdio>

namespace gpucloud {

namespace {
// Writes `value` (>= 0) as exactly `width` decimal digits, ending before `end`.
char* put_digits(char* end, long long value, int width) {
  for (int i = 0; i < width; ++i, value /= 10) *--end = static_cast<char>('0' + value % 10);
  return end;
}
}  // namespace

// Digits by hand, not snprintf: every timestamp of every JSON answer goes through here.
std::string format_rfc3339(SysTime t) {
  using namespace std::chrono;
  auto day = floor<days>(t);
  year_month_day ymd{day};
  hh_mm_ss<microseconds> tod{t - day};
  int y = int(ymd.year());
  if (y < 0 || y > 9999) {
    char buf[48];
    int n = std::snprintf(buf, sizeof buf, "%04d-%02u-%02uT%02d:%02d:%02d", y, unsigned(ymd.month()),
                          unsigned(ymd.day()), int(tod.hours().count()), int(tod.minutes().count()),
                          int(tod.seconds().count()));
    std::string out(buf, static_cast<std::size_t>(n));
    if (auto us = tod.subseconds().count(); us != 0) {
      std::snprintf(buf, sizeof buf, ".%06lld", static_cast<long long>(us));
      out += buf;
    }
    return out + 'Z';
  }
  char buf[28];  // YYYY-MM-DDTHH:MM:SS.ffffffZ
  put_digits(buf + 4, y, 4);
  buf[4] = '-';
  put_digits(buf + 7, unsigned(ymd.month()), 2);
  buf[7] = '-';
  put_digits(buf + 10, unsigned(ymd.day()), 2);
  buf[10] = 'T';
  put_digits(buf + 13, tod.hours().count(), 2);
  buf[13] = ':';
  put_digits(buf + 16, tod.minutes().count(), 2);
  buf[16] = ':';
  put_digits(buf + 19, tod.seconds().count(), 2);
  std::size_t n = 19;
  if (auto us = tod.subseconds().count(); us != 0) {
    buf[19] = '.';
    put_digits(buf + 26, us, 6);
    n = 26;
  }
  buf[n++] = 'Z';
  return std::string(buf, n);
}

std::optional<SysTime> parse_rfc3339(std::string_view s) {
  using namespace std::chrono;
  int y, mo, d, h, mi, sec;
  if (s.size() < 20) return std::nullopt;
  std::string text(s);
  int consumed = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec, &consumed) != 6 ||
      consumed != 19)
    return std::nullopt;
  year_month_day ymd{year{y}, month{static_cast<unsigned>(mo)}, day{static_cast<unsigned>(d)}};
  if (!ymd.ok() || h > 23 || mi > 59 || sec > 60) return std::nullopt;
  std::size_t pos = 19;
  std::int64_t micros = 0;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    int digits = 0;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
      if (digits < 6) micros = micros * 10 + (text[pos] - '0');
      ++digits;
      ++pos;
    }
    if (digits == 0) return std::nullopt;
    for (; digits < 6; ++digits) micros *= 10;
  }
  minutes offset{0};
  if (pos < text.size() && (text[pos] == 'Z' || text[pos] == 'z')) {
    ++pos;
  } else if (pos + 6 == text.size() && (text[pos] == '+' || text[pos] == '-')) {
    int oh, om;
    if (std::sscanf(text.c_str() + pos + 1, "%2d:%2d", &oh, &om) != 2) return std::nullopt;
    offset = hours{oh} + minutes{om};
    if (text[pos] == '-') offset = -offset;
    pos += 6;
  } else {
    return std::nullopt;
  }
  if (pos != text.size()) return std::nullopt;
  SysTime t = sys_days{ymd} + hours{h} + minutes{mi} + seconds{sec} + microseconds{micros};
  return t - offset;
}

std::int64_t to_unix_micros(SysTime t) { return t.time_since_epoch().count(); }
SysTime from_unix_micros(std::int64_t micros) { return SysTime{std::chrono::microseconds{micros}}; }
SysTime system_now() {
  return std::chrono::time_point_cast<std::chrono::microseconds>(std::chrono::system_clock::now());
}

}  // namespace gpucloud

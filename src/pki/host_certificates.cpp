#include "pki/host_certificates.h"

namespace gpucloud::pki {

namespace {
constexpr std::int64_t kCertMicros = 1'000'000;
}

Status record_host_certificate(store::Database& db, const std::string& host_name, const std::string& serial,
                               std::int64_t not_after, std::int64_t now) {
  if (host_name.empty() || serial.empty()) return invalid("host certificate: host name and serial are required");
  return db.run("INSERT INTO host_certificates (serial, host_name, not_after, issued_at, revoked_at) "
                "VALUES (?, ?, ?, ?, NULL)",
                {serial, host_name, not_after * kCertMicros, now * kCertMicros});
}

Result<bool> certificate_valid(store::Database& db, const std::string& host_name, const std::string& serial,
                               std::int64_t now) {
  auto row = db.one(
      "SELECT 1 FROM host_certificates WHERE serial = ? AND host_name = ? AND revoked_at IS NULL AND not_after > ?",
      {serial, host_name, now * kCertMicros});
  if (!row) return fail(row.error());
  return row->has_value();
}

Result<int> revoke_host_certificates(store::Database& db, const std::string& host_name, std::int64_t now) {
  if (auto s = db.run("UPDATE host_certificates SET revoked_at = ? WHERE host_name = ? AND revoked_at IS NULL",
                      {now * kCertMicros, host_name});
      !s)
    return fail(s.error());
  return static_cast<int>(db.changes());
}

Result<std::optional<HostCertificate>> current_host_certificate(store::Database& db, const std::string& host_name) {
  auto row = db.one(
      "SELECT serial, not_after, issued_at, revoked_at FROM host_certificates WHERE host_name = ? "
      "ORDER BY issued_at DESC, not_after DESC, serial DESC LIMIT 1",
      {host_name});
  if (!row) return fail(row.error());
  if (!*row) return std::optional<HostCertificate>();
  HostCertificate c;
  c.serial = (*row)->text(0);
  c.not_after = (*row)->int64(1) / kCertMicros;
  c.issued_at = (*row)->int64(2) / kCertMicros;
  if (auto r = (*row)->opt_int64(3)) c.revoked_at = *r / kCertMicros;
  return std::optional<HostCertificate>(std::move(c));
}

}  // namespace gpucloud::pki

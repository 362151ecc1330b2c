#pragma once
// The certificates the agents' CA signed for hosts (issue 26), as the control plane records
// them: what a connecting agent's certificate is checked against (issued to this host, not
// revoked, not expired) and what an operator revokes. Repository functions on
// store::Database (portable SQL); times in the arguments are unix seconds, stored as
// microseconds like every table.
#include <cstdint>
#include <optional>
#include <string>

#include "core/result.h"
#include "store/database.h"

namespace gpucloud::pki {

// Records a certificate just signed for host_name (serial as IssuedCertificate::serial).
Status record_host_certificate(store::Database& db, const std::string& host_name, const std::string& serial,
                               std::int64_t not_after, std::int64_t now);

// True when `serial` was issued to `host_name`, is not revoked and has not expired at now.
// False for an unknown serial, another host's serial, a revoked or an expired one.
Result<bool> certificate_valid(store::Database& db, const std::string& host_name, const std::string& serial,
                               std::int64_t now);

// Revokes every certificate of host_name not yet revoked; returns how many.
Result<int> revoke_host_certificates(store::Database& db, const std::string& host_name, std::int64_t now);

struct HostCertificate {
  std::string serial;
  std::int64_t not_after = 0;  // unix seconds
  std::int64_t issued_at = 0;  // unix seconds
  std::optional<std::int64_t> revoked_at;  // unix seconds
};
// The newest certificate issued to host_name (revoked or not), or nullopt when none was.
Result<std::optional<HostCertificate>> current_host_certificate(store::Database& db, const std::string& host_name);

}  // namespace gpucloud::pki

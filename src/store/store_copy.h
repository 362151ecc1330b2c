#pragma once
// Moving an installation from SQLite to PostgreSQL (`gpucloudd migrate-store`): every table
// copied row by row in one transaction on the target, then checked — each table's row count,
// and each billing account's entry count and sum of its ledger — before success is reported.
#include <cstdint>
#include <string>
#include <vector>

#include "core/result.h"
#include "store/database.h"

namespace gpucloud::store {

struct CopiedTable {
  std::string name;
  std::int64_t rows = 0;
};

struct StoreCopyReport {
  std::vector<CopiedTable> tables;  // in the order they were copied (referenced tables first)
  std::int64_t rows = 0;
  std::int64_t ledger_accounts = 0;  // accounts whose ledgers were compared
  std::int64_t ledger_entries = 0;
  int schema_version = 0;
};

// `from` is a SQLite store and `to` a PostgreSQL one; both are brought to the latest schema
// first. The target must hold no installation yet (no user): a half-finished earlier copy is
// rolled back whole, so running it again is safe.
Result<StoreCopyReport> copy_store(Database& from, Database& to);

}  // namespace gpucloud::store

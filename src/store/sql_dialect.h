#pragma once
// The store's statements are written once, in the SQL that SQLite and PostgreSQL share, with
// `?` placeholders. to_postgres rewrites the few spellings that differ, for the PostgreSQL
// connection (the result is cached per statement, so this runs once per distinct text):
//  - `?` (and `?N`) placeholders become $1, $2, ... (not inside quotes or comments); one that
//    is only tested with IS [NOT] NULL is cast to text, since PostgreSQL cannot infer a type
//    from that test alone;
//  - SQLite's scalar MAX(a, b, ...) and MIN(a, b, ...) become GREATEST and LEAST (the
//    one-argument aggregates stay);
//  - INTEGER becomes BIGINT (SQLite's integers are 64-bit, PostgreSQL's INTEGER is 32), REAL
//    becomes DOUBLE PRECISION and BLOB BYTEA;
//  - INTEGER PRIMARY KEY AUTOINCREMENT becomes an identity column, and WITHOUT ROWID goes.
#include <string>
#include <string_view>

namespace gpucloud::store {

std::string to_postgres(std::string_view sql);

}  // namespace gpucloud::store

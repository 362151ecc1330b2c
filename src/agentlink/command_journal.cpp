#include "agentlink/command_journal.h"

#include <sodium.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include <boost/json.hpp>

#include "store/pg_listener.h"

namespace gpucloud::agentlink {
namespace json = boost::json;

namespace {

std::string seal(const std::string& key, const std::string& plain) {
  std::string out(crypto_secretbox_NONCEBYTES + crypto_secretbox_MACBYTES + plain.size(), '\0');
  auto* nonce = reinterpret_cast<unsigned char*>(out.data());
  randombytes_buf(nonce, crypto_secretbox_NONCEBYTES);
  crypto_secretbox_easy(nonce + crypto_secretbox_NONCEBYTES, reinterpret_cast<const unsigned char*>(plain.data()),
                        plain.size(), nonce, reinterpret_cast<const unsigned char*>(key.data()));
  std::string b64(sodium_base64_ENCODED_LEN(out.size(), sodium_base64_VARIANT_ORIGINAL), '\0');
  sodium_bin2base64(b64.data(), b64.size(), reinterpret_cast<const unsigned char*>(out.data()), out.size(),
                    sodium_base64_VARIANT_ORIGINAL);
  b64.resize(std::strlen(b64.c_str()));
  return b64;
}

Result<std::string> unseal(const std::string& key, const std::string& sealed) {
  std::string bin(sealed.size(), '\0');
  std::size_t len = 0;
  if (sodium_base642bin(reinterpret_cast<unsigned char*>(bin.data()), bin.size(), sealed.data(), sealed.size(), nullptr,
                        &len, nullptr, sodium_base64_VARIANT_ORIGINAL) != 0 ||
      len < crypto_secretbox_NONCEBYTES + crypto_secretbox_MACBYTES)
    return fail(ErrorCode::internal, "a journaled command is not sealed text");
  const auto* nonce = reinterpret_cast<const unsigned char*>(bin.data());
  std::string plain(len - crypto_secretbox_NONCEBYTES - crypto_secretbox_MACBYTES, '\0');
  if (crypto_secretbox_open_easy(reinterpret_cast<unsigned char*>(plain.data()), nonce + crypto_secretbox_NONCEBYTES,
                                 len - crypto_secretbox_NONCEBYTES, nonce,
                                 reinterpret_cast<const unsigned char*>(key.data())) != 0)
    return fail(ErrorCode::internal, "a journaled command does not open with this installation's journal key");
  return plain;
}

}  // namespace

Result<std::string> load_or_create_journal_key(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(path, ec)) {
    std::ifstream in(path, std::ios::binary);
    std::string key((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (key.size() != crypto_secretbox_KEYBYTES) return fail(ErrorCode::internal, path + " is not a 32-byte key");
    return key;
  }
  fs::create_directories(fs::path(path).parent_path(), ec);
  std::string key(crypto_secretbox_KEYBYTES, '\0');
  crypto_secretbox_keygen(reinterpret_cast<unsigned char*>(key.data()));
  const std::string tmp = path + ".tmp";
  {
    const mode_t old = ::umask(077);
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    ::umask(old);
    out.write(key.data(), static_cast<std::streamsize>(key.size()));
    if (!out.flush()) return fail(ErrorCode::internal, "cannot write " + tmp);
  }
  fs::rename(tmp, path, ec);
  if (ec) return fail(ErrorCode::internal, "cannot write " + path + ": " + ec.message());
  return key;
}

Status journal_command(store::Database& db, const std::string& key, const agent::Command& command, std::int64_t now) {
  if (auto s = db.run("INSERT INTO agent_commands (id, host_name, kind, body, created_at) VALUES (?, ?, ?, ?, ?) "
                      "ON CONFLICT (id) DO NOTHING",
                      {command.id, command.host_name, command.kind,
                       seal(key, json::serialize(agent::to_json(command))), now});
      !s)
    return s;
  // The replica holding the host's link (or the leader, for an in-process host) sends it.
  return store::notify_replicas(db, store::kAgentCommandsChannel, command.host_name);
}

Status record_command_result(store::Database& db, const std::string& key, const agent::CommandOutcome& outcome) {
  if (auto s = db.run("UPDATE agent_commands SET result = ? WHERE id = ? AND result IS NULL",
                      {seal(key, json::serialize(agent::to_json(outcome))), outcome.command_id});
      !s)
    return s;
  return store::notify_replicas(db, store::kAgentOutcomesChannel, outcome.command_id);
}

Result<std::optional<agent::CommandOutcome>> command_result(store::Database& db, const std::string& key,
                                                            const std::string& command_id) {
  auto row = db.one("SELECT result FROM agent_commands WHERE id = ? AND result IS NOT NULL", {command_id});
  if (!row) return fail(row.error());
  if (!*row) return std::optional<agent::CommandOutcome>();
  auto plain = unseal(key, (*row)->text(0));
  if (!plain) return fail(plain.error());
  auto parsed = agent::parse_message(*plain);
  if (!parsed) return fail(parsed.error());
  auto outcome = agent::command_outcome_from_json(*parsed);
  if (!outcome) return fail(outcome.error());
  return std::optional<agent::CommandOutcome>(std::move(*outcome));
}

Result<bool> complete_command(store::Database& db, const std::string& host_name, const agent::CommandOutcome& outcome,
                              std::int64_t now) {
  // Only the outcome's journaled text is kept, without `observed` (it may name host keys):
  // ok and the error are what an operator looks at.
  json::object kept{{"ok", outcome.ok}, {"error_code", outcome.error_code}, {"error_detail", outcome.error_detail}};
  if (auto s = db.run("UPDATE agent_commands SET completed_at = ?, outcome = ? "
                      "WHERE id = ? AND host_name = ? AND completed_at IS NULL",
                      {now, json::serialize(kept), outcome.command_id, host_name});
      !s)
    return fail(s.error());
  return db.changes() == 1;
}

Result<std::vector<agent::Command>> pending_commands(store::Database& db, const std::string& key,
                                                     const std::string& host_name, std::int64_t queries_since) {
  auto rows = db.all("SELECT body FROM agent_commands WHERE host_name = ? AND completed_at IS NULL AND "
                     "(kind NOT IN ('instance.status', 'disk.status', 'image.inspect', 'instance.exec') OR created_at >= ?) "
                     "ORDER BY created_at, id",
                     {host_name, queries_since});
  if (!rows) return fail(rows.error());
  std::vector<agent::Command> out;
  for (const auto& row : *rows) {
    auto plain = unseal(key, row.text(0));
    if (!plain) return fail(plain.error());
    auto parsed = agent::parse_message(*plain);
    if (!parsed) return fail(parsed.error());
    auto command = agent::command_from_json(*parsed);
    if (!command) return fail(command.error());
    out.push_back(std::move(*command));
  }
  return out;
}

Result<std::int64_t> purge_commands(store::Database& db, std::int64_t before, std::int64_t abandon_before) {
  if (auto s = db.run("DELETE FROM agent_commands WHERE (completed_at IS NOT NULL AND completed_at < ?) "
                      "OR (completed_at IS NULL AND created_at < ?)",
                      {before, abandon_before});
      !s)
    return fail(s.error());
  return db.changes();
}

}  // namespace gpucloud::agentlink

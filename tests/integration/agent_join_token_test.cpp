// Remote agents' join tokens and certificate revocation through the real daemon and CLI
// (issue 26): the CA made under DATA_DIR/pki when [agents] listen is set, tokens only for the
// operator, shown once, never logged; revocation of a host's certificates.
// Each test keeps a daemon of its own: they differ in config, and one restarts its daemon.
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "pki/certificate_authority.h"
#include "pki/host_certificates.h"
#include "pki/join_tokens.h"
#include "store/database.h"
#include "support/test_daemon.h"

namespace gpucloud::testing {
namespace {
namespace json = boost::json;
namespace fs = std::filesystem;

// One simulated in-process host ("node-1") and the agents' listener on a port of this test's
// own block.
std::string join_test_config(int agents_port, const std::string& host_ports) {
  return R"(
[agents]
listen = "127.0.0.1:)" + std::to_string(agents_port) + R"("

[[hosts]]
name = "node-1"
cpu = 8
memory_gib = 32
port_range = ")" + host_ports + R"("
simulated_gpus = [ { model = "RTX 4090", memory_gib = 24, count = 1 } ]

[[offers]]
gpu_model = "RTX 4090"
cpu_per_gpu = 4
memory_gib_per_gpu = 8
price_per_gpu_hour = 198
)";
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(AgentJoinTokenTest, RefusedWhileTheAgentsListenerIsOff) {
  TestDaemon daemon;  // no [agents]: all-in-one only
  daemon.start();
  std::string admin = daemon.admin_token();
  auto r = daemon.post("/api/v1/admin/hosts/join-token", json::object{{"host", "gpu-remote-1"}}, admin);
  EXPECT_EQ(r.status, 409) << r.body;
  EXPECT_EQ(r.code(), "conflict");
  EXPECT_NE(r.body.find("agents listener is not configured"), std::string::npos) << r.body;
  EXPECT_FALSE(fs::exists(fs::path(daemon.data_dir()) / "pki")) << "no CA is made without a listener";
}

TEST(AgentJoinTokenTest, OperatorMakesATokenOnceUsersCannotAndTheCliPrintsIt) {
  int block = port_block();
  TestDaemon daemon({.config_toml = join_test_config(block, std::to_string(block + 10) + "-" + std::to_string(block + 59))});
  daemon.start();
  std::string admin = daemon.admin_token();

  // The CA is there, its key private.
  fs::path pki_dir = fs::path(daemon.data_dir()) / "pki";
  struct stat st {};
  ASSERT_EQ(::stat((pki_dir / "ca.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto fingerprint = pki::fingerprint_of_pem(read_all(pki_dir / "ca.crt"));
  ASSERT_TRUE(fingerprint) << fingerprint.error().detail;

  auto made = daemon.post("/api/v1/admin/hosts/join-token", json::object{{"host", "gpu-remote-1"}}, admin);
  ASSERT_EQ(made.status, 201) << made.body;
  json::object o = made.json().as_object();
  std::string token(o.at("token").as_string());
  EXPECT_EQ(o.at("host").as_string(), "gpu-remote-1");
  EXPECT_EQ(o.at("ca_fingerprint").as_string(), *fingerprint);
  auto parsed = pki::parse_join_token(token);
  ASSERT_TRUE(parsed) << parsed.error().detail;
  EXPECT_EQ(parsed->ca_fingerprint, *fingerprint);
  EXPECT_EQ(o.at("join_command").as_string(),
            "gpucloud-agent --config agent.toml --join https://127.0.0.1:" + std::to_string(block) + " --token " + token);
  EXPECT_FALSE(o.at("expires_at").as_string().empty());

  // Operator only: a user is refused and nothing is made.
  std::string user = daemon.register_and_login("joiner-" + random_suffix());
  auto as_user = daemon.post("/api/v1/admin/hosts/join-token", json::object{{"host", "gpu-remote-9"}}, user);
  EXPECT_EQ(as_user.status, 403) << as_user.body;
  auto revoke_as_user = daemon.post("/api/v1/admin/hosts/gpu-remote-1/revoke-certificate", json::object{}, user);
  EXPECT_EQ(revoke_as_user.status, 403) << revoke_as_user.body;
  EXPECT_EQ(daemon.post("/api/v1/admin/hosts/join-token", json::object{{"host", "gpu-remote-9"}}).status, 401);

  // Bad input changes nothing: 400 for a bad name, ttl or field; 409 for an in-process host.
  auto bad_name = daemon.post("/api/v1/admin/hosts/join-token", json::object{{"host", "no spaces"}}, admin);
  EXPECT_EQ(bad_name.status, 400) << bad_name.body;
  auto bad_ttl = daemon.post("/api/v1/admin/hosts/join-token", json::object{{"host", "gpu-remote-2"}, {"ttl_seconds", 5}}, admin);
  EXPECT_EQ(bad_ttl.status, 400) << bad_ttl.body;
  auto extra = daemon.post("/api/v1/admin/hosts/join-token", json::object{{"host", "gpu-remote-2"}, {"tll", 60}}, admin);
  EXPECT_EQ(extra.status, 400) << extra.body;
  auto local = daemon.post("/api/v1/admin/hosts/join-token", json::object{{"host", "node-1"}}, admin);
  EXPECT_EQ(local.status, 409) << local.body;
  EXPECT_NE(local.body.find("in-process"), std::string::npos) << local.body;

  // A replay with the same Idempotency-Key answers without the token.
  std::map<std::string, std::string> key{{"Idempotency-Key", "join-" + random_suffix()}};
  std::string body = json::serialize(json::object{{"host", "gpu-remote-3"}, {"ttl_seconds", 600}});
  auto first = daemon.request("POST", "/api/v1/admin/hosts/join-token", body, admin, key);
  ASSERT_EQ(first.status, 201) << first.body;
  auto replay = daemon.request("POST", "/api/v1/admin/hosts/join-token", body, admin, key);
  EXPECT_EQ(replay.status, 201) << replay.body;
  EXPECT_FALSE(replay.json().as_object().contains("token")) << replay.body;
  EXPECT_FALSE(replay.json().as_object().contains("join_command")) << replay.body;
  EXPECT_EQ(replay.json().as_object().at("token_redacted"), json::value(true));

  // The CLI: the token and the command in the table form, the object with --json.
  std::map<std::string, std::string> env{{"GPUCLOUD_ENDPOINT", daemon.endpoint()}, {"GPUCLOUD_TOKEN", admin}};
  auto cli = run_cli({"admin", "host", "join-token", "gpu-remote-4", "--ttl", "2h"}, env);
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  EXPECT_NE(cli.out.find("Join token for host gpu-remote-4"), std::string::npos) << cli.out;
  EXPECT_NE(cli.out.find("gpucloud-agent --config agent.toml --join https://127.0.0.1:" + std::to_string(block) + " --token gcjoin1." +
                         *fingerprint + "."),
            std::string::npos)
      << cli.out;
  auto cli_json = run_cli({"admin", "host", "join-token", "gpu-remote-5", "--json"}, env);
  ASSERT_EQ(cli_json.exit_code, 0) << cli_json.err;
  json::object jo = json::parse(cli_json.out).as_object();
  EXPECT_EQ(jo.at("host").as_string(), "gpu-remote-5");
  EXPECT_TRUE(pki::parse_join_token(std::string(jo.at("token").as_string())));
  std::string cli_token(jo.at("token").as_string());
  auto user_cli = run_cli({"admin", "host", "join-token", "gpu-remote-6"},
                          {{"GPUCLOUD_ENDPOINT", daemon.endpoint()}, {"GPUCLOUD_TOKEN", user}});
  EXPECT_EQ(user_cli.exit_code, 1) << user_cli.out;

  // The operator's events say a token was made, never what it is.
  auto events = daemon.get("/api/v1/events?limit=200", admin);
  ASSERT_EQ(events.status, 200) << events.body;
  EXPECT_NE(events.body.find("host.join_token_created"), std::string::npos);
  for (const std::string& t : {token, cli_token}) {
    std::string secret = t.substr(t.rfind('.') + 1);
    EXPECT_EQ(events.body.find(secret), std::string::npos);
    // Nor does the daemon's log, or the store.
    EXPECT_EQ(daemon.log().find(secret), std::string::npos) << "a token's secret in the daemon's log";
  }
  daemon.stop();
  std::string store_bytes = read_all(fs::path(daemon.data_dir()) / "gpucloud.db") +
                            read_all(fs::path(daemon.data_dir()) / "gpucloud.db-wal");
  EXPECT_EQ(store_bytes.find(token.substr(token.rfind('.') + 1)), std::string::npos) << "a token's secret in the store";
  EXPECT_NE(store_bytes.find(parsed->id), std::string::npos) << "positive control: the token's id is stored";
}

TEST(AgentJoinTokenTest, RevokeAnswersForAHostWithCertificatesAndTheCaSurvivesRestarts) {
  int block = port_block();
  TestDaemon daemon({.config_toml = join_test_config(block, std::to_string(block + 10) + "-" + std::to_string(block + 59))});
  daemon.start();
  std::string admin = daemon.admin_token();
  auto none = daemon.post("/api/v1/admin/hosts/gpu-remote-7/revoke-certificate", json::object{}, admin);
  EXPECT_EQ(none.status, 404) << none.body;
  auto first = daemon.post("/api/v1/admin/hosts/join-token", json::object{{"host", "gpu-remote-7"}}, admin);
  ASSERT_EQ(first.status, 201) << first.body;

  // A certificate the CA signed for the host, recorded as the join handshake records it
  // (written while the daemon is stopped: its store is this test's own).
  daemon.stop();
  auto ca = pki::CertificateAuthority::load_or_create(fs::path(daemon.data_dir()) / "pki");
  ASSERT_TRUE(ca) << ca.error().detail;
  EXPECT_EQ(ca->fingerprint(), first.json().as_object().at("ca_fingerprint").as_string());
  auto kr = pki::make_key_and_request("gpu-remote-7");
  ASSERT_TRUE(kr);
  std::int64_t now = static_cast<std::int64_t>(::time(nullptr));
  auto issued = ca->sign_host_csr(kr->csr_pem, "gpu-remote-7", std::chrono::hours(24 * 30), now);
  ASSERT_TRUE(issued);
  {
    auto db = store::Database::open((fs::path(daemon.data_dir()) / "gpucloud.db").string(), false);
    ASSERT_TRUE(db) << db.error().detail;
    ASSERT_TRUE(pki::record_host_certificate(**db, "gpu-remote-7", issued->serial, issued->not_after, now));
  }
  daemon.start();
  admin = daemon.admin_token();

  // The same CA after the restart.
  auto second = daemon.post("/api/v1/admin/hosts/join-token", json::object{{"host", "gpu-remote-8"}}, admin);
  ASSERT_EQ(second.status, 201) << second.body;
  EXPECT_EQ(second.json().as_object().at("ca_fingerprint"), first.json().as_object().at("ca_fingerprint"));

  std::map<std::string, std::string> env{{"GPUCLOUD_ENDPOINT", daemon.endpoint()}, {"GPUCLOUD_TOKEN", admin}};
  auto cli = run_cli({"admin", "host", "revoke", "gpu-remote-7"}, env);
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  EXPECT_EQ(cli.out, "Revoked 1 certificate of host gpu-remote-7: its agent is refused until it joins again.\n");
  auto again = daemon.post("/api/v1/admin/hosts/gpu-remote-7/revoke-certificate", json::object{}, admin);
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(again.json(), json::parse(R"({"host":"gpu-remote-7","revoked":0})"));
  auto missing = run_cli({"admin", "host", "revoke", "gpu-remote-none"}, env);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("has no certificate"), std::string::npos) << missing.err;

  daemon.stop();
  auto db = store::Database::open((fs::path(daemon.data_dir()) / "gpucloud.db").string(), true);
  ASSERT_TRUE(db);
  auto valid = pki::certificate_valid(**db, "gpu-remote-7", issued->serial, now + 1);
  ASSERT_TRUE(valid);
  EXPECT_FALSE(*valid) << "revoked";
}

}  // namespace
}  // namespace gpucloud::testing

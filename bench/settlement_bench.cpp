// One settlement pass over 1,000, 10,000 and 100,000 running instances and their disks
// (issue "Billing", Measure), and a test-clock month (720 hourly passes) for 1,000.
//
// Each simulated instance has an open compute meter (198 fen per hour) and an open data-disk
// meter (100 GiB at 20,000 micro-fen per GiB-hour), 10 instances per user: N instances are
// 2N open meters over N/10 accounts. A pass is billing::settle_open_meters at +1 h in one
// write transaction of the real Store (SQLite file, WAL), which is what BillingService does
// every hour. The bare peer is the same transaction that only reads every open meter
// (no arithmetic, no writes): the floor under any settlement of these rows.
//
// Prints one row per size: pass time, per meter, ratio to the read-only peer; and a verdict:
// linear (per-meter time at 100,000 within 1.5× of 1,000's) and ≤ 1 s at 100,000.
// Then the pass as BillingService runs it (+2 h, the same work again): one transaction per
// span of about BillingService::kSettlementSpanMeters open meters; its total and its longest
// transaction, i.e. the longest the writer is held.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <unistd.h>

#include "auth/accounts.h"
#include "billing/billing_service.h"
#include "billing/ledger.h"
#include "billing/meters.h"
#include "billing/resource_meters.h"
#include "config/config.h"
#include "market/prices.h"
#include "store/store.h"

namespace fs = std::filesystem;
using namespace gpucloud;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// With GPUCLOUD_BENCH_POSTGRES_URL (postgresql://USER@HOST:PORT/DB of a role that may create
// databases; the password in GPUCLOUD_BENCH_POSTGRES_PASSWORD_FILE) each size runs again on a
// PostgreSQL database of its own (issue 27: a pass over 100,000 instances within 2 s there).
struct Postgres {
  std::string url, password;
};

std::optional<Postgres> postgres_from_env() {
  const char* url = std::getenv("GPUCLOUD_BENCH_POSTGRES_URL");
  if (!url || !*url) return std::nullopt;
  Postgres pg{url, {}};
  if (const char* file = std::getenv("GPUCLOUD_BENCH_POSTGRES_PASSWORD_FILE"); file && *file) {
    std::ifstream in(file);
    std::getline(in, pg.password);
  }
  return pg;
}

std::string with_database(const std::string& url, const std::string& name) {
  auto slash = url.find('/', url.find("://") + 3);
  return (slash == std::string::npos ? url : url.substr(0, slash)) + "/" + name;
}

struct Fixture {
  fs::path dir;
  std::unique_ptr<store::Store> store;
  SysTime t0 = from_unix_micros(1'800'000'000'000'000);
  std::optional<Postgres> pg;
  std::string database;
  ~Fixture() {
    store.reset();
    if (pg && !database.empty())
      if (auto admin = store::connect_postgres({pg->url, pg->password, "settlement-bench"}))
        (void)(*admin)->exec_script("DROP DATABASE IF EXISTS " + database + " WITH (FORCE)");
  }
};

void make(Fixture& f, int instances, const std::optional<Postgres>& pg) {
  f.dir = fs::temp_directory_path() / fmt::format("gpucloud-settle-bench-{}-{}", ::getpid(), instances);
  fs::remove_all(f.dir);
  fs::create_directories(f.dir);
  Result<std::unique_ptr<store::Store>> s = fail(ErrorCode::internal, "no store");
  if (pg) {
    f.pg = pg;
    f.database = fmt::format("settle_bench_{}_{}", ::getpid(), instances);
    auto admin = store::connect_postgres({pg->url, pg->password, "settlement-bench"});
    if (!admin) throw std::runtime_error(admin.error().detail);
    if (auto c = (*admin)->exec_script("CREATE DATABASE " + f.database); !c) throw std::runtime_error(c.error().detail);
    s = store::Store::open_postgres({with_database(pg->url, f.database), pg->password, "settlement-bench"}, 1);
  } else {
    s = store::Store::open((f.dir / "db").string(), 1);
  }
  if (!s) throw std::runtime_error(s.error().detail);
  f.store = std::move(*s);
  config::Config config;
  auto seeded = f.store->write_now([&](store::Database& db) -> Status {
    if (auto p = market::seed_prices(db, config); !p) return p;
    for (int u = 0; u < (instances + 9) / 10; ++u) {
      auto user = auth::create_user(db, fmt::format("user{}", u), std::nullopt, "x", "user", f.t0);
      if (!user) return fail(user.error());
      if (auto a = billing::open_account(db, user->id, user->username, 1'000'000'000, f.t0); !a) return a;
      for (int k = 0; k < 10 && u * 10 + k < instances; ++k) {
        const std::string id = fmt::format("i-{}-{}", u, k);
        if (auto m = billing::open_run(db, id, user->id, false, 198, f.t0); !m) return m;
        if (auto d = billing::follow_data_disk(db, "d-" + id, user->id, 100, f.t0); !d) return d;
      }
    }
    return ok();
  });
  if (!seeded) throw std::runtime_error(seeded.error().detail);
}

int run(const std::optional<Postgres>& pg) {
  std::printf("store: %s\n", pg ? "PostgreSQL" : "SQLite");
  std::printf("%-10s %-8s %12s %14s %14s %8s\n", "instances", "meters", "pass ms", "us per meter", "read-only ms", "ratio");
  double per_meter_1k = 0, per_meter_100k = 0, pass_100k = 0, longest_100k = 0;
  for (int n : {1000, 10000, 100000}) {
    Fixture f;
    make(f, n, pg);
    auto read_start = Clock::now();
    auto read = f.store->write_now([](store::Database& db) { return billing::open_meters(db); });
    const double read_ms = ms_since(read_start);
    if (!read) return 2;
    auto start = Clock::now();
    auto pass = f.store->write_now([&](store::Database& db) { return billing::settle_open_meters(db, f.t0 + std::chrono::hours(1)); });
    const double pass_ms = ms_since(start);
    if (!pass) {
      std::fprintf(stderr, "settlement failed: %s\n", pass.error().detail.c_str());
      return 2;
    }
    const double per_meter_us = pass_ms * 1000.0 / static_cast<double>(pass->meters);
    std::printf("%-10d %-8zu %12.1f %14.2f %14.1f %7.1fx\n", n, pass->meters, pass_ms, per_meter_us, read_ms,
                pass_ms / read_ms);
    {
      // The same work again at +2 h, cut into spans as BillingService::settle_all does.
      const SysTime t2 = f.t0 + std::chrono::hours(2);
      auto spanned_start = Clock::now();
      auto spans = f.store->read_now([&](store::Database& db) {
        return billing::settlement_spans(db, t2, billing::BillingService::kSettlementSpanMeters);
      });
      if (!spans) return 2;
      double longest = 0;
      std::size_t settled = 0;
      for (const auto& span : *spans) {
        auto part_start = Clock::now();
        auto part = f.store->write_now([&](store::Database& db) { return billing::settle_open_meters(db, t2, span); });
        if (!part) return 2;
        longest = std::max(longest, ms_since(part_start));
        settled += part->meters;
      }
      std::printf("%-10s %-8zu %12.1f   in %zu transactions, the longest %.1f ms\n", "  spanned", settled,
                  ms_since(spanned_start), spans->size(), longest);
      if (n == 100000) longest_100k = longest;
      // And once more at +3 h in one transaction: a pass over a ledger and meters that have
      // seen passes before, to tell the spans' own cost from a later pass's.
      auto again_start = Clock::now();
      auto again = f.store->write_now(
          [&](store::Database& db) { return billing::settle_open_meters(db, f.t0 + std::chrono::hours(3)); });
      if (!again) return 2;
      std::printf("%-10s %-8zu %12.1f   one transaction, the third pass\n", "  again", again->meters, ms_since(again_start));
    }
    if (n == 1000) per_meter_1k = per_meter_us;
    if (n == 100000) per_meter_100k = per_meter_us, pass_100k = pass_ms;
    if (n == 1000) {
      // A month of hourly settlements, as --test-clock would drive them.
      auto month_start = Clock::now();
      for (int h = 2; h <= 721; ++h) {
        auto p = f.store->write_now(
            [&](store::Database& db) { return billing::settle_open_meters(db, f.t0 + std::chrono::hours(h)); });
        if (!p) return 2;
      }
      std::printf("month: 720 hourly passes over 1,000 instances (2,000 meters): %.1f s\n", ms_since(month_start) / 1000);
    }
    fs::remove_all(f.dir);
  }
  const bool linear = per_meter_100k <= 1.5 * per_meter_1k;
  const double target = pg ? 2000 : 1000;
  std::printf("verdict: %s (per meter %.2f us at 100,000 vs %.2f us at 1,000); %s (%.0f ms at 100,000, target <= %.0f)\n",
              linear ? "linear" : "NOT linear", per_meter_100k, per_meter_1k, pass_100k <= target ? "within" : "OVER",
              pass_100k, target);
  std::printf("spanned: the writer held at most %.0f ms at a time at 100,000\n", longest_100k);
  return 0;
}

}  // namespace

int main() {
  if (int rc = run(std::nullopt); rc != 0) return rc;
  if (auto pg = postgres_from_env()) return run(pg);
  return 0;
}

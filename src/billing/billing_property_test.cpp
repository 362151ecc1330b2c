// Billing's property test (issue 12): 10,000 independent random sequences, each of 5-16
// steps over 2-4 fresh users with their own accounts and starting credits. A step is one of:
// create an instance (its system-disk meter when the disk passes the free allowance, maybe a
// data disk), converge it (creating/starting -> running opens the compute run at the price
// captured at the request; releasing -> released closes the system disk and bins or keeps the
// data disk), start (GPU or no-GPU run at the price current then), stop (at the request, or at
// an earlier observed exit), release, grow or delete a data disk, an operator credit or
// debit, a clock advance (sub-second up to 4 hours), a price change (the table saved and
// storage re-rated, as PUT /admin/prices does), the hourly settlement (cut into spans, one
// transaction each, as BillingService runs it), one account's settlement, and a crash-restart.
// The steps call what the daemon calls: the billing hooks of instances/transition.cpp and
// disks/disk_record.cpp (the resources' own rows are kept by the test in the same
// transaction, so the start-up reconcile sees what the daemon's store would hold).
//
// After EVERY step, for every user of the sequence:
//  - the ledger: seq runs 1..n without a gap, balance_after is the running sum, the sum is the
//    account's balance and n its entry count; no entry seen before changed (the test keeps
//    every field of every entry it saw and compares);
//  - charges equal the meters: for each meter, its charge entries sum to `charged` (and their
//    quantities to `settled_quantity`); charged <= floor(accrued ÷ divisor) at that moment,
//    and equal to it for a closed meter and after a settlement at that moment;
//  - every meter is where the test's own model says: open or closed, rate, and accrued and
//    quantity at that moment (Σ rate × whole seconds of each interval, by the test's arithmetic).
// The state is read in one statement by the step's own connection just before its COMMIT (the
// test is the only writer); a clock advance writes nothing, so its check re-judges the meters
// last read at the new moment. At the end of each sequence one transaction stops everything,
// settles, releases and deletes; then each instance's compute charges must equal
// floor(Σ price × whole seconds of its runs ÷ 3600) per compute meter (GPU and no-GPU runs are
// separate meters) with prices and seconds from the model alone, each storage meter's charges
// likewise, and each balance the credits less those charges.
//
// A crash-restart runs a multi-write step (a settlement span, a stop, a release, a price
// change, ...) with a countdown of TEMP triggers that aborts it at its k-th row written (or,
// for a settlement, right after its ledger insert, where billing.settle.after_ledger_insert
// sits), or just before the COMMIT; then the Store is destroyed and opened again from its
// file, and what BillingService::start runs for billing (reconcile_meters) runs and must find
// nothing to repair. One crash in forty is a real kill -9: the Store is closed, a forked child
// opens the file, runs the step until it dies and SIGKILLs itself inside the transaction.
//
// Sequences share one store file per 1,000 (fresh users, resources and prices per sequence, a
// clock of their own); a sequence replays alone, on a fresh file, with
//   GPUCLOUD_PROPERTY_SEQUENCE=N build-asan/bin/unit_tests --gtest_filter='BillingPropertyTest.*'
// (GPUCLOUD_PROPERTY_SEED=S runs other sequences; GPUCLOUD_PROPERTY_SEQUENCES=K runs K of them).
// About 60,000 transactions and 1,100 crash-restarts; about 65 s under ASan+UBSan -O0 on a
// loaded 2-core machine (SLOW_: label slow, 300 s limit).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "billing/affordability.h"
#include "billing/ledger.h"
#include "billing/meters.h"
#include "billing/resource_meters.h"
#include "config/config.h"
#include "market/prices.h"
#include "store/store.h"

// A namespace of its own: in the unity build this file shares a translation unit with other
// tests, whose anonymous-namespace helpers must not meet these.
namespace gpucloud::billing::ledger_property {
namespace {

namespace fs = std::filesystem;

constexpr int kSequenceCount = 10'000;
constexpr int kSequencesPerStoreFile = 1000;
constexpr std::uint64_t kBaseSeed = 0x6c65646765723132ULL;  // "ledger12"
constexpr const char* kGpuModel = "A100";
constexpr const char* kCurrency = "CNY";
constexpr std::int64_t kMicrosPerSecond = 1'000'000;

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
std::uint64_t sequence_seed(std::uint64_t base, int n) {
  return splitmix64(base ^ splitmix64(static_cast<std::uint64_t>(n)));
}

std::optional<std::uint64_t> env_number(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::strtoull(v, nullptr, 0);
}

// Whole seconds from `a` to `b` (0 when b is earlier): the meters' own rule, by the test's hand.
std::int64_t whole_seconds(SysTime a, SysTime b) {
  const std::int64_t d = to_unix_micros(b) - to_unix_micros(a);
  return d <= 0 ? 0 : d / kMicrosPerSecond;
}

std::string show_time(SysTime t, SysTime origin) {
  const std::int64_t d = to_unix_micros(t) - to_unix_micros(origin);
  std::string frac = std::to_string(d % kMicrosPerSecond);
  frac.insert(0, 6 - frac.size(), '0');
  return "+" + std::to_string(d / kMicrosPerSecond) + "." + frac + "s";
}

// The price table as the model knows it (what it last told the store).
struct ModelPrices {
  std::int64_t gpu_hour = 0, no_gpu_hour = 0, free_gib = 0, system_micros = 0, data_micros = 0;
};

// The model of one meter: the test's own arithmetic of what it has accrued.
struct ModelMeter {
  std::string account;
  bool compute = true;
  std::int64_t rate = 0, gib = 0;
  std::int64_t accrued = 0, quantity = 0;  // of closed intervals
  std::optional<SysTime> open_since;
  std::int64_t divisor() const { return compute ? kComputeDivisor : kStorageDivisor; }
  std::int64_t accrued_at(SysTime t) const { return accrued + (open_since ? rate * whole_seconds(*open_since, t) : 0); }
  std::int64_t quantity_at(SysTime t) const {
    return quantity + (open_since ? (compute ? 1 : gib) * whole_seconds(*open_since, t) : 0);
  }
};
using MeterKey = std::pair<std::string, std::string>;  // (resource, kind)

enum class IState { creating, starting, running, stopped, releasing, released };
const char* name_of(IState s) {
  switch (s) {
    case IState::creating: return "creating";
    case IState::starting: return "starting";
    case IState::running: return "running";
    case IState::stopped: return "stopped";
    case IState::releasing: return "releasing";
    case IState::released: return "released";
  }
  return "?";
}

struct ModelUser {
  std::string id, account, name;
  std::int64_t credits = 0;  // every credit and debit it was given
};
struct ModelInstance {
  std::string id;
  int owner = 0;
  int gpus = 0;
  std::int64_t system_disk_gib = 0;
  IState state = IState::creating;
  std::int64_t price = 0;  // the price the model computed at the create or start request
  bool no_gpu = false;
  std::optional<SysTime> run_since;
  std::optional<std::size_t> disk;  // attached data disk
  // The runs, by the model alone: Σ price × whole seconds and Σ whole seconds, per meter kind.
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> runs;
  std::string kind() const { return no_gpu || gpus == 0 ? "compute_no_gpu" : "compute"; }
};
enum class DState { attached, available, deleted };
struct ModelDisk {
  std::string id;
  int owner = 0;
  std::int64_t size_gib = 0;
  DState state = DState::attached;
  bool delete_on_release = false;
};

// What the test saw of one account's ledger: every field of every entry, as one text, plus
// running sums and each meter's charges.
struct SeenLedger {
  std::string text;
  std::int64_t entries = 0, sum = 0;
  std::map<MeterKey, std::pair<std::int64_t, std::int64_t>> charges;  // Σ -amount, Σ quantity
};

// One write transaction of a step; `apply` moves the model when it committed.
struct Txn {
  std::string what;
  std::function<Status(store::Database&)> work;
  std::function<void()> apply;
};

// The store file a block of sequences shares; closed and opened again by crash-restarts.
class PropertyStore {
 public:
  explicit PropertyStore(fs::path dir) : dir_(std::move(dir)) {}
  ~PropertyStore() { close(); }
  std::string path() const { return (dir_ / "billing.db").string(); }
  Status fresh() {
    close();
    for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(path() + suffix);
    if (auto s = open(); !s) return s;
    config::Config config;
    return store_->write_now([&](store::Database& db) -> Status {
      if (auto s = market::seed_prices(db, config); !s) return s;
      auto seeded = market::load_prices(db);
      if (!seeded) return fail(seeded.error());
      base_prices_ = *seeded;
      if (auto s = db.run("INSERT INTO hosts (id, name, zone, state, simulated, inventory_source, engine, cpu, "
                          "memory_gib, port_min, port_max, created_at) VALUES ('h-prop', 'prop-node', 'zone-a', "
                          "'ready', 1, 'simulated', 'unix:///x', 4, 16, 30000, 30099, 0)");
          !s)
        return s;
      return db.run(
          "INSERT INTO images (id, name, engine_image, visibility, state, created_at) "
          "VALUES ('img-prop', 'prop', 'prop:1', 'public', 'available', 0)");
    });
  }
  Status open() {
    auto s = store::Store::open(path(), 1);
    if (!s) return fail(s.error());
    store_ = std::move(*s);
    return ok();
  }
  void close() { store_.reset(); }
  // The table as seeded; a price change replaces it whole, as PUT /admin/prices does.
  const market::PriceTable& base_prices() const { return base_prices_; }
  store::Store& operator*() { return *store_; }
  store::Store* operator->() { return store_.get(); }

 private:
  fs::path dir_;
  std::unique_ptr<store::Store> store_;
  market::PriceTable base_prices_;
};

// The TEMP triggers of a crash: every row written to these tables counts down `budget`; the
// write that finds it at zero aborts (RAISE), so the step dies there. `at_meter_update`: only
// meter updates count (a settlement then dies right after its ledger insert).
std::string crash_triggers(int budget, bool at_meter_update) {
  std::string sql = "CREATE TEMP TABLE prop_crash_budget (n INTEGER NOT NULL); INSERT INTO prop_crash_budget VALUES (" +
                    std::to_string(budget) + ");";
  const char* all[][2] = {{"INSERT", "ledger_entries"},
                          {"UPDATE", "billing_accounts"},
                          {"INSERT", "meters"},
                          {"UPDATE", "meters"},
                          {"UPDATE", "instances"}};
  int n = 0;
  for (const auto& [op, table] : all) {
    if (at_meter_update && (std::string(op) != "UPDATE" || std::string(table) != "meters")) continue;
    sql += std::string(" CREATE TEMP TRIGGER prop_crash_") + std::to_string(n++) + " BEFORE " + op + " ON main." +
           table +
           " BEGIN SELECT RAISE(ABORT, 'simulated crash') WHERE (SELECT n FROM prop_crash_budget) <= 0; "
           "UPDATE prop_crash_budget SET n = n - 1; END;";
  }
  return sql;
}

// Where the time goes (printed at the end): commits, checks, crash-restarts.
struct Clocks {
  double commit = 0, check = 0, crash = 0, fork = 0, restart = 0, fresh = 0;
};
Clocks clocks;
// Hourly entries that grouped several meters of one kind (each checked line by line).
int grouped_entries = 0;
struct Timed {
  explicit Timed(double& into) : into_(into), from_(std::chrono::steady_clock::now()) {}
  ~Timed() { into_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - from_).count(); }
  double& into_;
  std::chrono::steady_clock::time_point from_;
};

class Sequence {
 public:
  Sequence(PropertyStore& store, int number, std::uint64_t seed)
      : store_(store),
        number_(number),
        rng_(seed),
        start_(from_unix_micros(1'800'000'000'000'000) + std::chrono::hours(24 * 7) * number),
        now_(start_) {}

  // Runs the whole sequence; false with failure() set at the first broken invariant.
  bool run() {
    if (!begin()) return false;
    const int steps = static_cast<int>(uniform(5, 16));
    for (step_ = 1; step_ <= steps; ++step_)
      if (!step()) return false;
    return finish();
  }
  const std::string& failure() const { return failure_; }
  std::string trace() const {
    std::string out;
    for (const auto& t : trace_)
      out += "    step " + std::to_string(t.step) + " " + show_time(t.at, start_) + ": " + t.what + "\n";
    return out;
  }
  int crashes() const { return crashes_; }
  int kills() const { return kills_; }
  int transactions() const { return transactions_; }

 private:
  enum class Op {
    create,
    converge,
    start,
    stop,
    release,
    disk_grow,
    disk_delete,
    credit,
    advance,
    price_change,
    settle_hourly,
    settle_account,
    crash_restart
  };

  std::int64_t uniform(std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng_);
  }
  bool chance(int percent) { return uniform(1, 100) <= percent; }
  template <class T>
  std::size_t pick(const std::vector<T>& v) {
    return static_cast<std::size_t>(uniform(0, static_cast<std::int64_t>(v.size()) - 1));
  }

  bool broken(const std::string& why) {
    failure_ = "step " + std::to_string(step_) + " at " + show_time(now_, start_) + ": " + why;
    return false;
  }
  void note(std::string line) { trace_.push_back(Noted{step_, now_, std::move(line)}); }

  // ---- the model ----------------------------------------------------------------------

  ModelMeter& model_meter(const MeterKey& key, const std::string& account, bool compute) {
    auto [it, fresh] = meters_.try_emplace(key);
    if (fresh) {
      it->second.account = account;
      it->second.compute = compute;
    }
    return it->second;
  }
  static void fold(ModelMeter& m, SysTime t) {
    if (!m.open_since) return;
    const std::int64_t s = whole_seconds(*m.open_since, t);
    m.accrued += m.rate * s;
    m.quantity += (m.compute ? 1 : m.gib) * s;
    m.open_since.reset();
  }
  // What open_meter/close_meter promise: a new rate (or size) starts a new interval from `t`.
  void model_follow(const MeterKey& key, const std::string& account, bool compute, std::optional<std::int64_t> gib,
                    std::int64_t rate, SysTime t) {
    if (!gib || *gib <= 0) {
      if (auto it = meters_.find(key); it != meters_.end()) fold(it->second, t);
      return;
    }
    ModelMeter& m = model_meter(key, account, compute);
    if (m.open_since && m.rate == rate && m.gib == *gib) return;
    fold(m, t);
    m.rate = rate;
    m.gib = *gib;
    m.open_since = t;
  }
  // open_run: the instance's meter of its kind accrues at the run's price from `t`.
  void model_open_run(const ModelInstance& i, SysTime t) {
    ModelMeter& m = model_meter({i.id, i.kind()}, users_[i.owner].account, true);
    if (m.open_since && m.rate == i.price) return;
    fold(m, t);
    m.rate = i.price;
    m.gib = 0;
    m.open_since = t;
  }
  std::optional<std::int64_t> billed_system_gib(const ModelInstance& i) const {
    if (i.state == IState::released) return std::nullopt;
    const std::int64_t billed = i.system_disk_gib - prices_.free_gib;
    return billed > 0 ? std::optional<std::int64_t>(billed) : std::nullopt;
  }
  std::optional<std::int64_t> billed_disk_gib(const ModelDisk& d) const {
    return d.state == DState::deleted ? std::nullopt : std::optional<std::int64_t>(d.size_gib);
  }
  void model_system_disk(const ModelInstance& i, SysTime t) {
    const auto gib = billed_system_gib(i);
    model_follow({i.id, "system_disk"}, users_[i.owner].account, false, gib, gib.value_or(0) * prices_.system_micros,
                 t);
  }
  void model_data_disk(const ModelDisk& d, SysTime t) {
    const auto gib = billed_disk_gib(d);
    model_follow({d.id, "data_disk"}, users_[d.owner].account, false, gib, gib.value_or(0) * prices_.data_micros, t);
  }
  std::int64_t model_price(int gpus, bool gpu_run) const {
    return gpus > 0 && gpu_run ? prices_.gpu_hour * gpus : prices_.no_gpu_hour;
  }
  // The run ends at `end` (clamped to its start, as transition() does).
  void model_end_run(ModelInstance& i, SysTime end) {
    if (!i.run_since) return;
    if (end < *i.run_since) end = *i.run_since;
    const std::int64_t s = whole_seconds(*i.run_since, end);
    auto& totals = i.runs[i.kind()];
    totals.first += i.price * s;
    totals.second += s;
    fold(meters_.at({i.id, i.kind()}), end);
    i.run_since.reset();
  }

  // ---- running transactions -------------------------------------------------------------

  // One committed transaction; a 402 (the daemon's refusal at the door) leaves the model as it is.
  bool commit(const Txn& t) {
    ++transactions_;
    std::vector<store::Row> after;
    std::optional<Timed> timed(std::in_place, clocks.commit);
    auto s = store_->write_now([&](store::Database& db) -> Status {
      if (auto w = t.work(db); !w) return w;
      // What the step leaves, read by its own connection just before its COMMIT: the test is
      // the only writer, so this is exactly the state the COMMIT makes (a failed COMMIT fails
      // the test). One statement, no second transaction: the checks stay cheap.
      auto rows = read_state(db);
      if (!rows) return fail(rows.error());
      after = std::move(*rows);
      return ok();
    });
    timed.reset();
    Timed checking(clocks.check);
    if (!s) {
      if (s.error().code == ErrorCode::insufficient_balance) {
        note(t.what + " -- refused: " + s.error().detail);
        return check_meters();  // refused before any write, rolled back: the state last read
      }
      note(t.what + " -- FAILED");
      return broken(t.what + " failed: " + s.error().detail);
    }
    t.apply();
    note(t.what);
    return evaluate(after);
  }

  // The transaction dies half-way (in this process, or in a child killed with SIGKILL), then
  // the store restarts the way the daemon does. The model does not move.
  bool crash(const Txn& t, bool at_meter_update) {
    ++crashes_;
    const int budget = at_meter_update ? 0 : static_cast<int>(uniform(0, 8));
    const std::string triggers = crash_triggers(budget, at_meter_update);
    const bool kill = uniform(1, 40) == 1;
    std::string how;
    if (kill) {
      Timed timed(clocks.fork);
      ++kills_;
      // No SQLite connection may cross the fork: the store is closed first, the child opens
      // the file on its own, and dies inside its transaction.
      store_.close();
      const std::string path = store_.path();
      const bool spill = chance(50);
      const pid_t pid = ::fork();
      if (pid < 0) return broken("fork: " + std::string(std::strerror(errno)));
      if (pid == 0) {
        auto db = store::Database::open(path, false);
        if (!db) ::_exit(10);
        // A tiny page cache spills the transaction's pages into the WAL before it dies.
        if (spill && !(*db)->exec_script("PRAGMA cache_size = 1")) ::_exit(11);
        if (!(*db)->exec_script("BEGIN IMMEDIATE")) ::_exit(12);
        if (!(*db)->exec_script(triggers)) ::_exit(13);
        (void)t.work(**db);
        ::kill(::getpid(), SIGKILL);
        ::_exit(14);
      }
      int status = 0;
      if (::waitpid(pid, &status, 0) != pid) return broken("waitpid failed");
      if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
        return broken("the crashing child was to die of SIGKILL; it ended with status " + std::to_string(status));
      how = std::string("killed -9 in a child") + (spill ? " (pages spilled to the WAL)" : "");
    } else {
      Timed timed(clocks.crash);
      bool armed = false, finished = false;
      std::string died;
      auto s = store_->write_now([&](store::Database& db) -> Status {
        if (auto a = db.exec_script(triggers); !a) return a;
        armed = true;
        auto w = t.work(db);
        finished = w.has_value();
        if (!w) died = w.error().detail;
        return fail(ErrorCode::internal, "simulated crash");  // never commits
      });
      if (s || !armed) return broken("could not arm the crash of " + t.what + (s ? "" : ": " + s.error().detail));
      how = finished ? "died before its COMMIT" : "died half-way (" + died + ")";
      store_.close();
    }
    note("CRASH in " + t.what + " (" +
         (at_meter_update ? "at the meters update" : "after " + std::to_string(budget) + " rows") + ", " + how + ")");
    return restart();
  }

  // The daemon's start for billing: open the store from its file, reconcile the meters.
  bool restart() {
    Timed timed(clocks.restart);
    if (auto s = store_.open(); !s) return broken("the store did not open again: " + s.error().detail);
    auto fixed = store_->write_now([&](store::Database& db) { return reconcile_meters(db, now_); });
    if (!fixed) return broken("reconcile_meters failed at the restart: " + fixed.error().detail);
    note("restarted; reconcile_meters changed " + std::to_string(*fixed));
    if (*fixed != 0)
      return broken("the start-up reconcile had to change " + std::to_string(*fixed) +
                    " meter(s): the hooks left the meters out of step with the resources");
    return check();
  }

  // ---- the steps ------------------------------------------------------------------------

  // The sequence's users (ids of the test's making: a replay gets the same ones, so the hourly
  // pass cuts its spans the same way), their accounts with their starting credits, its prices.
  bool begin() {
    const int users = static_cast<int>(uniform(2, 4));
    for (int k = 0; k < users; ++k) {
      ModelUser u;
      char id[40];
      std::snprintf(id, sizeof id, "p%05d%c", number_, 'a' + k);
      u.id = std::string("u-") + id;
      u.account = account_id_for_user(u.id);
      u.name = std::string("prop-") + id;
      const std::int64_t credits[] = {0, 100, 5'000, 50'000, 1'000'000};
      u.credits = credits[uniform(0, 4)];
      users_.push_back(u);
    }
    ModelPrices p = random_prices();
    Txn t{
        "begin: " + std::to_string(users) + " users, " + describe(p),
        [users = users_, table = store_.base_prices(), p, now = now_](store::Database& db) -> Status {
          if (auto s = write_prices(db, table, p, now, false); !s) return s;
          for (const auto& u : users) {
            if (auto s = db.run("INSERT INTO users (id, username, password_hash, role, created_at) VALUES (?, ?, 'x', "
                                "'user', ?)",
                                {u.id, u.name, to_unix_micros(now)});
                !s)
              return s;
            if (auto s = open_account(db, u.id, u.name, u.credits, now); !s) return s;
          }
          return ok();
        },
        [this, p] { prices_ = p; }};
    for (const auto& u : users_) seen_[u.account];
    return commit(t);
  }

  ModelPrices random_prices() {
    ModelPrices p;
    p.gpu_hour = chance(5) ? 0 : uniform(1, 3000);
    p.no_gpu_hour = chance(5) ? 0 : uniform(1, 400);
    const std::int64_t free[] = {0, 10, 30, 50, 100};
    p.free_gib = free[uniform(0, 4)];
    p.system_micros = chance(10) ? 0 : uniform(1, 200'000);
    p.data_micros = chance(10) ? 0 : (chance(20) ? uniform(1'000'000, 3'000'000) : uniform(1, 100'000));
    return p;
  }
  static std::string describe(const ModelPrices& p) {
    return "prices gpu " + std::to_string(p.gpu_hour) + "/h, no-gpu " + std::to_string(p.no_gpu_hour) + "/h, free " +
           std::to_string(p.free_gib) + " GiB, system " + std::to_string(p.system_micros) + " u/GiB-h, data " +
           std::to_string(p.data_micros) + " u/GiB-h";
  }
  // What PUT /admin/prices does: the table replaced, then storage re-rated from now.
  // `rerate` false at a sequence's start, when nothing of it exists to re-rate.
  static Status write_prices(store::Database& db, market::PriceTable table, const ModelPrices& p, SysTime now,
                             bool rerate = true) {
    table.gpus[kGpuModel] = market::GpuPrice{p.gpu_hour, p.gpu_hour * 150, p.gpu_hour * 600};
    table.no_gpu_per_hour = p.no_gpu_hour;
    table.system_disk_free_gib = p.free_gib;
    table.system_disk_per_gib_hour_micros = p.system_micros;
    table.data_disk_per_gib_hour_micros = p.data_micros;
    if (auto s = market::save_prices(db, table); !s) return s;
    return rerate ? rerate_storage(db, now) : ok();
  }
  // The daemon's hourly price (instances/actions.cpp), from the store's table.
  static Result<std::int64_t> store_price(store::Database& db, int gpus, bool gpu_run) {
    auto table = market::load_prices(db);
    if (!table) return fail(table.error());
    if (gpus == 0 || !gpu_run) return table->no_gpu_per_hour;
    auto it = table->gpus.find(kGpuModel);
    return it == table->gpus.end() ? 0 : it->second.per_gpu_hour * gpus;
  }

  std::vector<std::size_t> instances_in(std::initializer_list<IState> states) const {
    std::vector<std::size_t> out;
    for (std::size_t k = 0; k < instances_.size(); ++k)
      for (IState s : states)
        if (instances_[k].state == s) out.push_back(k);
    return out;
  }
  std::vector<std::size_t> disks_in(std::initializer_list<DState> states) const {
    std::vector<std::size_t> out;
    for (std::size_t k = 0; k < disks_.size(); ++k)
      for (DState s : states)
        if (disks_[k].state == s) out.push_back(k);
    return out;
  }

  Txn plan_create() {
    ModelInstance i;
    i.id = "i-p" + std::to_string(number_) + "-" + std::to_string(instances_.size());
    i.owner = static_cast<int>(uniform(0, static_cast<std::int64_t>(users_.size()) - 1));
    const int gpus[] = {0, 1, 1, 2, 4, 8};
    i.gpus = gpus[uniform(0, 5)];
    const std::int64_t system[] = {10, 20, 30, 40, 50, 100, 200, 1000};
    i.system_disk_gib = system[uniform(0, 7)];
    std::optional<ModelDisk> disk;
    if (chance(50)) {
      disk = ModelDisk{"d-p" + std::to_string(number_) + "-" + std::to_string(disks_.size()), i.owner, uniform(1, 2000),
                       DState::attached, chance(50)};
    }
    const ModelUser& u = users_[i.owner];
    std::string what = "create " + i.id + " for " + u.id + " (" + std::to_string(i.gpus) + " GPUs, system disk " +
                       std::to_string(i.system_disk_gib) + " GiB" +
                       (disk ? ", data disk " + disk->id + " " + std::to_string(disk->size_gib) + " GiB" +
                                   (disk->delete_on_release ? " deleted on release" : " kept")
                             : std::string()) +
                       ")";
    return Txn{
        what,
        [i, disk, owner = u.id, now = now_](store::Database& db) -> Status {
          auto price = store_price(db, i.gpus, true);
          if (!price) return fail(price.error());
          if (auto s = check_affordable(db, owner, *price, "one hour of its price", kCurrency, now); !s) return s;
          if (auto s = db.run("INSERT INTO instances (id, owner, name, state, zone, host_id, gpu_model, gpu_count, "
                              "cpu, memory_gib, no_gpu, system_disk_gib, image_id, billing_mode, price_per_hour, "
                              "created_at) VALUES (?, ?, ?, 'creating', 'zone-a', 'h-prop', ?, ?, 4, 16, 0, ?, "
                              "'img-prop', 'hourly', ?, ?)",
                              {i.id, owner, i.id, i.gpus > 0 ? std::optional<std::string>(kGpuModel) : std::nullopt,
                               i.gpus, i.system_disk_gib, *price, to_unix_micros(now)});
              !s)
            return s;
          // begin_instance: the system disk bills from now.
          if (auto s = follow_system_disk(db, i.id, owner, i.system_disk_gib, now); !s) return s;
          if (!disk) return ok();
          // A new data disk made with the instance (disks/disk_record.cpp insert_disk).
          if (auto s = db.run("INSERT INTO disks (id, owner, name, zone, host_id, size_gib, applied_size_gib, "
                              "state, instance_id, mount_path, delete_on_release, created_at) VALUES (?, ?, ?, "
                              "'zone-a', 'h-prop', ?, ?, 'attached', ?, '/data', ?, ?)",
                              {disk->id, owner, disk->id, disk->size_gib, disk->size_gib, i.id, disk->delete_on_release,
                               to_unix_micros(now)});
              !s)
            return s;
          return follow_data_disk(db, disk->id, owner, disk->size_gib, now);
        },
        [this, i, disk] {
          ModelInstance m = i;
          m.price = model_price(m.gpus, true);
          if (disk) {
            disks_.push_back(*disk);
            m.disk = disks_.size() - 1;
            model_data_disk(disks_.back(), now_);
          }
          instances_.push_back(m);
          model_system_disk(instances_.back(), now_);
        }};
  }

  // creating/starting -> running (the run opens at the price captured at the request);
  // releasing -> released (the system disk closes; the data disk is binned or kept).
  Txn plan_converge(std::size_t k) {
    const ModelInstance& i = instances_[k];
    if (i.state == IState::releasing) return plan_released(k);
    return Txn{
        "converge " + i.id + " " + name_of(i.state) + " -> running",
        [id = i.id, now = now_](store::Database& db) -> Status {
          auto row = db.one(
              "SELECT owner, no_gpu, gpu_count, price_per_hour FROM instances WHERE id = ? AND state "
              "IN ('creating', 'starting')",
              {id});
          if (!row) return fail(row.error());
          if (!*row) return fail(ErrorCode::internal, "instance " + id + " is not creating or starting");
          const auto& r = **row;
          if (auto s = db.run("UPDATE instances SET state = 'running', started_at = ?, generation = generation + 1 "
                              "WHERE id = ?",
                              {to_unix_micros(now), id});
              !s)
            return s;
          // transition(): the run opens at the price captured at the request.
          return open_run(db, id, r.text(0), r.int64(1) != 0 || r.int64(2) == 0, r.int64(3), now);
        },
        [this, k] {
          ModelInstance& m = instances_[k];
          m.state = IState::running;
          m.run_since = now_;
          model_open_run(m, now_);
        }};
  }

  // releasing -> released: the system disk stops billing, the data disk is binned or kept.
  Txn plan_released(std::size_t k) {
    const ModelInstance& i = instances_[k];
    const std::string owner = users_[i.owner].id;
    return Txn{
        "converge " + i.id + " releasing -> released",
        [id = i.id, owner, now = now_](store::Database& db) -> Status {
          if (auto s = db.run("UPDATE instances SET state = 'released', released_at = ?, generation = generation + 1 "
                              "WHERE id = ? AND state = 'releasing'",
                              {to_unix_micros(now), id});
              !s)
            return s;
          if (db.changes() != 1) return fail(ErrorCode::internal, "instance " + id + " is not releasing");
          if (auto s = follow_system_disk(db, id, owner, std::nullopt, now); !s) return s;
          // disks::release_instance_disks
          auto attached =
              db.all("SELECT id, owner, size_gib, delete_on_release FROM disks WHERE instance_id = ?", {id});
          if (!attached) return fail(attached.error());
          for (const auto& d : *attached) {
            const bool bin = d.int64(3) != 0;
            // Binned (delete_on_release) or detached and kept.
            if (auto s = db.run("UPDATE disks SET state = CASE WHEN ? THEN 'deleted' ELSE 'available' END, "
                                "instance_id = NULL, mount_path = NULL, delete_on_release = 0, "
                                "deleted_at = CASE WHEN ? THEN ? END, generation = generation + 1 WHERE id = ?",
                                {bin, bin, to_unix_micros(now), d.text(0)});
                !s)
              return s;
            if (auto s = follow_data_disk(db, d.text(0), d.text(1),
                                          bin ? std::nullopt : std::optional<std::int64_t>(d.int64(2)), now);
                !s)
              return s;
          }
          return ok();
        },
        [this, k] {
          ModelInstance& m = instances_[k];
          m.state = IState::released;
          model_system_disk(m, now_);
          if (m.disk) {
            ModelDisk& d = disks_[*m.disk];
            d.state = d.delete_on_release ? DState::deleted : DState::available;
            model_data_disk(d, now_);
            m.disk.reset();
          }
        }};
  }

  Txn plan_start(std::size_t k) {
    const ModelInstance& i = instances_[k];
    const bool gpu_run = i.gpus > 0 && chance(75);
    return Txn{"start " + i.id + (i.gpus > 0 && !gpu_run ? " without GPUs" : ""),
               [id = i.id, gpus = i.gpus, gpu_run, owner = users_[i.owner].id, now = now_](store::Database& db) -> Status {
                 auto price = store_price(db, gpus, gpu_run);
                 if (!price) return fail(price.error());
                 if (auto s = check_affordable(db, owner, *price, "one hour of its price", kCurrency, now); !s) return s;
                 if (auto s = db.run("UPDATE instances SET state = 'starting', no_gpu = ?, price_per_hour = ?, "
                                     "generation = generation + 1 WHERE id = ? AND state = 'stopped'",
                                     {gpus > 0 && !gpu_run, *price, id});
                     !s)
                   return s;
                 return db.changes() == 1 ? ok() : fail(ErrorCode::internal, "instance " + id + " is not stopped");
               },
               [this, k, gpu_run] {
                 ModelInstance& m = instances_[k];
                 m.state = IState::starting;
                 m.no_gpu = m.gpus > 0 && !gpu_run;
                 m.price = model_price(m.gpus, gpu_run);
               }};
  }

  // running/starting -> stopped; a run ends at the request, or at an earlier observed exit.
  Txn plan_stop(std::size_t k) {
    const ModelInstance& i = instances_[k];
    SysTime end = now_;
    // An exit the daemon observed late, also before a settlement that already charged past it
    // (what was charged beyond the exit comes back as a refund).
    if (i.run_since && chance(30)) end = from_unix_micros(uniform(to_unix_micros(*i.run_since), to_unix_micros(now_)));
    const bool running = i.state == IState::running;
    return Txn{
        "stop " + i.id + (running && end != now_ ? " (exited at " + show_time(end, start_) + ")" : ""),
        [id = i.id, running, end, from = std::string(name_of(i.state)), now = now_](store::Database& db) -> Status {
          if (auto s = db.run("UPDATE instances SET state = 'stopped', started_at = NULL, stopped_at = ?, "
                              "generation = generation + 1 WHERE id = ? AND state = ?",
                              {to_unix_micros(end), id, from});
              !s)
            return s;
          if (db.changes() != 1) return fail(ErrorCode::internal, "instance " + id + " is not " + from);
          return running ? close_run(db, id, end, now) : ok();
        },
        [this, k, end] {
          ModelInstance& m = instances_[k];
          model_end_run(m, end);
          m.state = IState::stopped;
        }};
  }

  // `from`: the state it will be in when this runs (the finish stops it first).
  Txn plan_release(std::size_t k, std::optional<IState> from_state = std::nullopt) {
    const ModelInstance& i = instances_[k];
    const IState from = from_state.value_or(i.state);
    const bool running = from == IState::running;
    return Txn{"release " + i.id + " (" + name_of(from) + ")",
               [id = i.id, running, from = std::string(name_of(from)), now = now_](store::Database& db) -> Status {
                 if (auto s = db.run("UPDATE instances SET state = 'releasing', started_at = NULL, "
                                     "generation = generation + 1 WHERE id = ? AND state = ?",
                                     {id, from});
                     !s)
                   return s;
                 if (db.changes() != 1) return fail(ErrorCode::internal, "instance " + id + " is not " + from);
                 return running ? close_run(db, id, now, now) : ok();
               },
               [this, k] {
                 ModelInstance& m = instances_[k];
                 model_end_run(m, now_);
                 m.state = IState::releasing;
               }};
  }

  Txn plan_disk_grow(std::size_t k) {
    const ModelDisk& d = disks_[k];
    const std::int64_t size = d.size_gib + uniform(1, 500);
    return Txn{"grow " + d.id + " to " + std::to_string(size) + " GiB",
               [id = d.id, owner = users_[d.owner].id, size, now = now_](store::Database& db) -> Status {
                 if (auto s = db.run("UPDATE disks SET size_gib = ?, applied_size_gib = ?, generation = generation + 1 "
                                     "WHERE id = ?",
                                     {size, size, id});
                     !s)
                   return s;
                 return follow_data_disk(db, id, owner, size, now);
               },
               [this, k, size] {
                 disks_[k].size_gib = size;
                 model_data_disk(disks_[k], now_);
               }};
  }

  Txn plan_disk_delete(std::size_t k) {
    const ModelDisk& d = disks_[k];
    return Txn{"delete " + d.id + " (into the recycle bin)",
               [id = d.id, owner = users_[d.owner].id, now = now_](store::Database& db) -> Status {
                 if (auto s = db.run("UPDATE disks SET state = 'deleted', deleted_at = ?, generation = generation + 1 "
                                     "WHERE id = ? AND state = 'available'",
                                     {to_unix_micros(now), id});
                     !s)
                   return s;
                 if (db.changes() != 1) return fail(ErrorCode::internal, "disk " + id + " is not available");
                 return follow_data_disk(db, id, owner, std::nullopt, now);
               },
               [this, k] {
                 disks_[k].state = DState::deleted;
                 model_data_disk(disks_[k], now_);
               }};
  }

  // POST /admin/users/{id}/credit: a credit, or (negative) an adjustment.
  Txn plan_credit() {
    const auto who = static_cast<std::size_t>(uniform(0, static_cast<std::int64_t>(users_.size()) - 1));
    const std::int64_t amount = chance(70) ? uniform(1, 200'000) : -uniform(1, 100'000);
    return Txn{"credit " + std::to_string(amount) + " to " + users_[who].id,
               [u = users_[who], amount, now = now_](store::Database& db) -> Status {
                 NewEntry e{amount > 0 ? EntryKind::credit : EntryKind::adjustment,           amount, u.id, {}, {}, 0,
                            std::string(amount > 0 ? "credit" : "adjustment") + " (by admin)"};
                 auto posted = post_entry(db, u.account, e, now);
                 return posted ? ok() : fail(posted.error());
               },
               [this, who, amount] { users_[who].credits += amount; }};
  }

  Txn plan_price_change() {
    ModelPrices p = random_prices();
    return Txn{
        "price change: " + describe(p),
        [table = store_.base_prices(), p, now = now_](store::Database& db) { return write_prices(db, table, p, now); },
        [this, p] {
          prices_ = p;
          // Storage follows the new prices from now; compute keeps each run's price.
          for (const auto& i : instances_) model_system_disk(i, now_);
          for (const auto& d : disks_) model_data_disk(d, now_);
        }};
  }

  // The hourly pass as BillingService::settle_all runs it: spans of accounts, one
  // transaction each (small spans here, so a pass is cut).
  bool plan_settle_hourly(std::vector<Txn>& out) {
    const auto max_meters = static_cast<std::size_t>(uniform(1, 4) == 4 ? 20'000 : uniform(1, 3));
    auto spans = store_->write_now([&](store::Database& db) { return settlement_spans(db, now_, max_meters); });
    if (!spans) return broken("settlement_spans failed: " + spans.error().detail);
    if (spans->empty())
      out.push_back(Txn{"hourly settlement (nothing open)", [](store::Database&) { return ok(); }, [] {}});
    for (std::size_t k = 0; k < spans->size(); ++k) {
      const AccountSpan span = (*spans)[k];
      out.push_back(Txn{"hourly settlement, span " + std::to_string(k + 1) + "/" + std::to_string(spans->size()) +
                            " [" + span.first + ", " + span.last + "]",
                        [span, now = now_](store::Database& db) -> Status {
                          auto r = settle_open_meters(db, now, span);
                          return r ? ok() : fail(r.error());
                        },
                        [this, span] {
                          for (const auto& u : users_)
                            if (u.account >= span.first && u.account <= span.last) {
                              settled_now_[u.account] = true;
                              last_settlement_[u.account] = now_;
                            }
                        }});
    }
    return true;
  }

  // Several transactions' work as one (the finish).
  static Txn combine(const std::string& what, std::vector<Txn> parts) {
    std::string whats = what + ":";
    for (const auto& p : parts) whats += " [" + p.what + "]";
    return Txn{whats,
               [parts](store::Database& db) -> Status {
                 for (const auto& p : parts)
                   if (auto s = p.work(db); !s) return s;
                 return ok();
               },
               [parts] {
                 for (const auto& p : parts) p.apply();
               }};
  }

  // Every account in one transaction (settle_open_meters without an account).
  Txn plan_settle_all() {
    return Txn{"settlement of every account",
               [now = now_](store::Database& db) -> Status {
                 auto r = settle_open_meters(db, now);
                 return r ? ok() : fail(r.error());
               },
               [this] {
                 for (const auto& u : users_) {
                   settled_now_[u.account] = true;
                   last_settlement_[u.account] = now_;
                 }
               }};
  }

  Txn plan_settle_account() {
    const auto who = static_cast<std::size_t>(uniform(0, static_cast<std::int64_t>(users_.size()) - 1));
    const std::string account = users_[who].account;
    return Txn{"settlement of " + account,
               [account, now = now_](store::Database& db) -> Status {
                 auto r = settle_open_meters(db, now, std::optional<std::string>(account));
                 return r ? ok() : fail(r.error());
               },
               [this, account] {
                 settled_now_[account] = true;
                 last_settlement_[account] = now_;
               }};
  }

  void advance() {
    std::int64_t micros = 0;
    const auto roll = uniform(1, 100);
    if (roll <= 15)
      micros = uniform(1, kMicrosPerSecond - 1);  // sub-second
    else if (roll <= 55)
      micros = uniform(1, 120) * kMicrosPerSecond;  // seconds
    else if (roll <= 85)
      micros = uniform(120, 3600) * kMicrosPerSecond;  // minutes
    else
      micros = uniform(3600, 4 * 3600) * kMicrosPerSecond;  // hours
    if (chance(30)) micros += uniform(0, kMicrosPerSecond - 1);
    now_ += std::chrono::microseconds(micros);
    settled_now_.clear();
    note("clock +" + std::to_string(micros) + " us");
  }

  // A step: its transactions (several for a cut settlement pass), each checked after it.
  // `for_crash`: only steps that write.
  bool plan(Op op, std::vector<Txn>& out, bool& settles) {
    settles = false;
    switch (op) {
      case Op::create: out.push_back(plan_create()); return true;
      case Op::converge: {
        auto c = instances_in({IState::creating, IState::starting, IState::releasing});
        if (c.empty()) return true;
        out.push_back(plan_converge(c[pick(c)]));
        return true;
      }
      case Op::start: {
        auto c = instances_in({IState::stopped});
        if (!c.empty()) out.push_back(plan_start(c[pick(c)]));
        return true;
      }
      case Op::stop: {
        auto c = instances_in({IState::running, IState::starting});
        if (!c.empty()) out.push_back(plan_stop(c[pick(c)]));
        return true;
      }
      case Op::release: {
        auto c = instances_in({IState::creating, IState::starting, IState::running, IState::stopped});
        if (!c.empty()) out.push_back(plan_release(c[pick(c)]));
        return true;
      }
      case Op::disk_grow: {
        auto c = disks_in({DState::attached, DState::available});
        if (!c.empty()) out.push_back(plan_disk_grow(c[pick(c)]));
        return true;
      }
      case Op::disk_delete: {
        auto c = disks_in({DState::available});
        if (!c.empty()) out.push_back(plan_disk_delete(c[pick(c)]));
        return true;
      }
      case Op::credit: out.push_back(plan_credit()); return true;
      case Op::price_change: out.push_back(plan_price_change()); return true;
      case Op::settle_hourly: settles = true; return plan_settle_hourly(out);
      case Op::settle_account:
        settles = true;
        out.push_back(plan_settle_account());
        return true;
      case Op::advance:
      case Op::crash_restart: return true;
    }
    return true;
  }

  bool step() {
    static constexpr std::pair<Op, int> kWeights[] = {
        {Op::create, 10},      {Op::converge, 12},    {Op::start, 8},         {Op::stop, 8},
        {Op::release, 5},      {Op::disk_grow, 3},    {Op::disk_delete, 3},   {Op::credit, 6},
        {Op::advance, 25},     {Op::price_change, 3}, {Op::settle_hourly, 8}, {Op::settle_account, 5},
        {Op::crash_restart, 1}};
    int total = 0;
    for (const auto& [op, w] : kWeights) total += w;
    auto roll = uniform(1, total);
    Op op = Op::advance;
    for (const auto& [o, w] : kWeights) {
      if (roll <= w) {
        op = o;
        break;
      }
      roll -= w;
    }
    if (op == Op::advance) {
      advance();
      return check_after_advance();
    }
    if (op == Op::crash_restart) return crash_restart();
    std::vector<Txn> txns;
    bool settles = false;
    if (!plan(op, txns, settles)) return false;
    if (txns.empty()) {  // nothing to act on: the clock moves instead
      advance();
      return check_after_advance();
    }
    for (const auto& t : txns)
      if (!commit(t)) return false;
    return true;
  }

  bool crash_restart() {
    static constexpr Op kWriters[] = {Op::create,        Op::converge,      Op::start,         Op::stop,
                                      Op::release,       Op::disk_grow,     Op::credit,        Op::price_change,
                                      Op::settle_hourly, Op::settle_hourly, Op::settle_account};
    std::vector<Txn> txns;
    bool settles = false;
    for (int attempt = 0; attempt < 8 && txns.empty(); ++attempt) {
      const Op op = kWriters[uniform(0, static_cast<std::int64_t>(std::size(kWriters)) - 1)];
      if (!plan(op, txns, settles)) return false;
    }
    if (txns.empty()) txns.push_back(plan_credit());
    // A cut pass dies in one of its spans: those before it committed.
    const auto dies = static_cast<std::size_t>(uniform(0, static_cast<std::int64_t>(txns.size()) - 1));
    for (std::size_t k = 0; k < dies; ++k)
      if (!commit(txns[k])) return false;
    return crash(txns[dies], settles && chance(50));
  }

  // Everything stopped and settled: compute charges against the model; then released and
  // deleted: every meter closed and settled, storage and balances against the model.
  bool finish() {
    step_ = 0;
    note("finish");
    // One transaction stops everything, settles every account at this moment, releases every
    // instance and deletes every data disk left: then every meter is closed and settled.
    std::vector<Txn> ends;
    for (std::size_t k = 0; k < instances_.size(); ++k)
      if (instances_[k].state == IState::running || instances_[k].state == IState::starting)
        ends.push_back(plan_stop(k));
    ends.push_back(plan_settle_all());
    for (std::size_t k = 0; k < instances_.size(); ++k) {
      const IState st = instances_[k].state;
      if (st == IState::released) continue;
      if (st != IState::releasing)
        ends.push_back(plan_release(k, st == IState::creating ? IState::creating : IState::stopped));
      ends.push_back(plan_released(k));
    }
    for (std::size_t k = 0; k < disks_.size(); ++k) {
      const ModelDisk& d = disks_[k];
      bool kept = d.state == DState::available;
      for (const auto& i : instances_)
        if (i.disk == k && !d.delete_on_release) kept = true;
      if (kept) ends.push_back(plan_disk_delete(k));
    }
    if (!commit(combine("finish: stop, settle, release and delete everything", std::move(ends)))) return false;
    // Each instance's compute charges by the model's runs alone.
    for (std::size_t k = 0; k < instances_.size(); ++k) {
      const ModelInstance& i = instances_[k];
      for (const char* kind : {"compute", "compute_no_gpu"}) {
        const auto totals = i.runs.count(kind) ? i.runs.at(kind) : std::pair<std::int64_t, std::int64_t>{0, 0};
        const auto& charges = seen_[users_[i.owner].account].charges;
        const auto it = charges.find({i.id, kind});
        const auto got = it == charges.end() ? std::pair<std::int64_t, std::int64_t>{0, 0} : it->second;
        // Seconds after the last whole unit charged are in no entry: at most the runs' seconds.
        if (got.first != totals.first / kComputeDivisor || got.second > totals.second)
          return broken(i.id + " " + kind + ": charged " + std::to_string(got.first) + " for " +
                        std::to_string(got.second) + " s; its runs (by the model) were " +
                        std::to_string(totals.second) + " s worth " + std::to_string(totals.first) +
                        " price-seconds, so floor(Σ P×s / 3600) = " + std::to_string(totals.first / kComputeDivisor));
      }
    }
    // Every meter closed: what each charged is the model's floor(accrued ÷ divisor).
    std::map<std::string, std::int64_t> expected_charges;
    for (const auto& [key, m] : meters_) {
      if (m.open_since) return broken(key.first + " " + key.second + " is still open in the model after the finish");
      const auto& charges = seen_[m.account].charges;
      const auto it = charges.find(key);
      const std::int64_t got = it == charges.end() ? 0 : it->second.first;
      if (got != m.accrued / m.divisor())
        return broken(key.first + " " + key.second + ": charged " + std::to_string(got) + ", the model accrued " +
                      std::to_string(m.accrued) + " so floor(÷ " + std::to_string(m.divisor()) +
                      ") = " + std::to_string(m.accrued / m.divisor()));
      expected_charges[m.account] += m.accrued / m.divisor();
    }
    for (const auto& u : users_) {
      const std::int64_t expected = u.credits - expected_charges[u.account];
      if (seen_[u.account].sum != expected)
        return broken(u.account + ": balance " + std::to_string(seen_[u.account].sum) + ", the model says credits " +
                      std::to_string(u.credits) + " less charges " + std::to_string(expected_charges[u.account]) +
                      " = " + std::to_string(expected));
    }
    return true;
  }

  // ---- the invariants, after every step -------------------------------------------------

  // Only the clock moved: nothing was written, so the ledgers are as just checked; the meters
  // as last read are checked at the new moment.
  bool check_after_advance() {
    Timed timed(clocks.check);
    return check_meters();
  }

  // Every field of the accounts' entries, each account's as one text (ledger_entries_chain
  // gives seq order, no sort), the balances, and the sequence's meters by their resource ids'
  // ranges, in one statement: cheap under ASan, where every statement and allocation costs.
  static std::string account_sql(int n) {
    const std::string p = "?" + std::to_string(n);
    return "SELECT 'a', id, balance, entries, (SELECT group_concat(line, char(10)) FROM (SELECT id || '|' || seq || "
           "'|' || COALESCE(user_id, '-') || '|' || time || '|' || amount || '|' || balance_after || '|' || kind || "
           "'|' || COALESCE(resource, '-') || '|' || COALESCE(resource_kind, '-') || '|' || quantity || '|' || "
           "description || '|' || replace(lines, char(10), ';') AS line FROM ledger_entries WHERE account_id = " +
           p + " ORDER BY seq)), NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM billing_accounts WHERE id = " + p;
  }
  inline static const std::string kCheckSql =
      account_sql(1) + " UNION ALL " + account_sql(2) + " UNION ALL " + account_sql(3) + " UNION ALL " +
      account_sql(4) +
      " UNION ALL SELECT 'm', account_id, charged, settled_quantity, resource, kind, divisor, rate, gib, open_since, "
      "accrued, quantity FROM meters WHERE (resource >= ?5 AND resource < ?6) OR (resource >= ?7 AND resource < ?8)";

  // One meter as the store has it.
  struct StoreMeter {
    std::string account;
    MeterKey key;  // (resource, kind)
    bool compute = false;
    std::int64_t divisor = 0, rate = 0, gib = 0, accrued = 0, quantity = 0, charged = 0, settled_quantity = 0;
    std::optional<SysTime> open_since;
  };

  // Reads the sequence's accounts, ledgers and meters in one statement (one snapshot), checks
  // the ledgers and balances, then the meters at now_.
  Result<std::vector<store::Row>> read_state(store::Database& db) const {
    std::string a[4];
    for (std::size_t k = 0; k < users_.size() && k < 4; ++k) a[k] = users_[k].account;
    const std::string n = std::to_string(number_);
    return db.all(kCheckSql,
                  {a[0], a[1], a[2], a[3], "i-p" + n + "-", "i-p" + n + ".", "d-p" + n + "-", "d-p" + n + "."});
  }

  // A fresh read of the store (after a restart).
  bool check() {
    Timed timed(clocks.check);
    auto rows = store_->write_now([&](store::Database& db) { return read_state(db); });
    if (!rows) return broken("reading the store failed: " + rows.error().detail);
    return evaluate(*rows);
  }

  bool evaluate(const std::vector<store::Row>& rows) {
    std::size_t accounts = 0;
    meters_seen_.clear();
    for (const auto& r : rows) {
      if (r.text(0) == "m") {
        StoreMeter m;
        m.account = r.text(1);
        m.charged = r.int64(2);
        m.settled_quantity = r.int64(3);
        m.key = {r.text(4), r.text(5)};
        m.compute = m.key.second.rfind("compute", 0) == 0;
        m.divisor = r.int64(6);
        m.rate = r.int64(7);
        m.gib = r.int64(8);
        if (!r.is_null(9)) m.open_since = from_unix_micros(r.int64(9));
        m.accrued = r.int64(10);
        m.quantity = r.int64(11);
        meters_seen_.push_back(std::move(m));
        continue;
      }
      ++accounts;
      if (!check_ledger(r.text(1), r.text(4), r.int64(2), r.int64(3))) return false;
    }
    if (accounts != users_.size()) return broken("an account is missing");
    return check_meters();
  }

  static std::vector<std::string> split(const std::string& line, std::size_t fields) {
    std::vector<std::string> f;
    std::size_t s = 0;
    while (f.size() + 1 < fields) {
      const std::size_t bar = line.find('|', s);
      if (bar == std::string::npos) break;
      f.push_back(line.substr(s, bar - s));
      s = bar + 1;
    }
    f.push_back(line.substr(s));
    return f;
  }

  // Nothing seen before changed; what is new chains on; the sum is the balance.
  bool check_ledger(const std::string& account, const std::string& text, std::int64_t balance, std::int64_t entries) {
    SeenLedger& seen = seen_[account];
    if (text.size() < seen.text.size() || text.compare(0, seen.text.size(), seen.text) != 0 ||
        (text.size() > seen.text.size() && !seen.text.empty() && text[seen.text.size()] != '\n')) {
      std::size_t at = 0;
      while (at < seen.text.size() && at < text.size() && seen.text[at] == text[at]) ++at;
      const std::size_t line = at == 0 ? std::string::npos : seen.text.rfind('\n', at - 1);
      const std::size_t from = line == std::string::npos ? 0 : line + 1;
      return broken(account + ": an entry seen before changed or went away. Before: \"" +
                    seen.text.substr(from, seen.text.find('\n', from) - from) + "\"; now: \"" +
                    (from < text.size() ? text.substr(from, text.find('\n', from) - from) : std::string("(nothing)")) +
                    "\"");
    }
    std::size_t pos = seen.text.empty() ? 0 : seen.text.size() + 1;
    while (pos < text.size()) {
      std::size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      const std::string line = text.substr(pos, end - pos);
      pos = end + 1;
      const std::vector<std::string> f = split(line, 12);
      if (f.size() != 12) return broken(account + ": cannot read the entry \"" + line + "\"");
      const std::int64_t seq = std::stoll(f[1]), amount = std::stoll(f[4]), after = std::stoll(f[5]),
                         quantity = std::stoll(f[9]);
      if (seq != seen.entries + 1)
        return broken(account + ": seq " + std::to_string(seq) + " follows seq " + std::to_string(seen.entries) +
                      " (a gap or a repeat): \"" + line + "\"");
      if (after != seen.sum + amount)
        return broken(account + ": balance_after " + std::to_string(after) + " is not the running sum " +
                      std::to_string(seen.sum) + " + " + std::to_string(amount) + ": \"" + line + "\"");
      // A refund on a resource (charged past a run's end) counts against its meter's charges.
      if (f[6] == "charge" || (f[6] == "refund" && !f[7].empty())) {
        if ((f[6] == "charge") != (amount < 0))
          return broken(account + ": a " + f[6] + " of " + std::to_string(amount) + ": \"" + line + "\"");
        if (f[11].empty()) {
          auto& c = seen.charges[{f[7], f[8]}];
          c.first -= amount;
          c.second += quantity;
        } else {
          // An hourly entry for several meters of one kind: no resource of its own, and its
          // lines add up to it.
          std::string joined = f[11];
          std::replace(joined.begin(), joined.end(), ';', '\n');
          auto lines = billing::decode_lines(joined);
          if (!lines || f[6] != "charge" || f[7] != "-" || lines->size() < 2)
            return broken(account + ": an entry with lines that do not read as a charge's: \"" + line + "\"");
          std::int64_t line_amounts = 0, line_quantities = 0;
          for (const auto& l : *lines) {
            if (l.resource_kind != f[8] || l.amount >= 0)
              return broken(account + ": a line of another kind or not a charge: \"" + line + "\"");
            auto& c = seen.charges[{l.resource, l.resource_kind}];
            c.first -= l.amount;
            c.second += l.quantity;
            line_amounts += l.amount;
            line_quantities += l.quantity;
          }
          if (line_amounts != amount || line_quantities != quantity)
            return broken(account + ": the lines do not add up to the entry: \"" + line + "\"");
          ++grouped_entries;
        }
      }
      seen.entries = seq;
      seen.sum = after;
      if (!seen.text.empty()) seen.text += '\n';
      seen.text += line;
    }
    if (balance != seen.sum)
      return broken(account + ": balance " + std::to_string(balance) + " but its entries sum to " +
                    std::to_string(seen.sum));
    if (entries != seen.entries)
      return broken(account + ": entries " + std::to_string(entries) + " but its chain has " +
                    std::to_string(seen.entries));
    return true;
  }

  // Charges equal the meters, and the meters are the model's, at now_. After a clock advance
  // (nothing written) this runs alone on the meters last read.
  bool check_meters() {
    for (const StoreMeter& sm : meters_seen_) {
      const MeterKey& key = sm.key;
      auto name = [&] { return sm.account + " " + sm.key.first + " " + sm.key.second; };
      const std::int64_t elapsed = sm.open_since ? whole_seconds(*sm.open_since, now_) : 0;
      const std::int64_t accrued_now = sm.accrued + sm.rate * elapsed;
      const std::int64_t quantity_now = sm.quantity + (sm.compute ? 1 : sm.gib) * elapsed;
      const auto& charges = seen_[sm.account].charges;
      const auto c = charges.find(key);
      const std::int64_t entries_charged = c == charges.end() ? 0 : c->second.first;
      const std::int64_t entries_quantity = c == charges.end() ? 0 : c->second.second;
      if (entries_charged != sm.charged)
        return broken(name() + ": its charge entries sum to " + std::to_string(entries_charged) + " but charged is " +
                      std::to_string(sm.charged));
      if (entries_quantity != sm.settled_quantity)
        return broken(name() + ": its charge entries cover " + std::to_string(entries_quantity) +
                      " but settled_quantity is " + std::to_string(sm.settled_quantity));
      if (sm.charged > accrued_now / sm.divisor)
        return broken(name() + ": charged " + std::to_string(sm.charged) + " is more than floor(accrued " +
                      std::to_string(accrued_now) + " / " + std::to_string(sm.divisor) + ")");
      const bool settled = !sm.open_since || settled_now_.count(sm.account);
      if (settled && sm.charged != accrued_now / sm.divisor)
        return broken(name() + ": charged " + std::to_string(sm.charged) + " after its " +
                      (sm.open_since ? "settlement" : "close") + " at this moment, but floor(accrued " +
                      std::to_string(accrued_now) + " / " + std::to_string(sm.divisor) +
                      ") = " + std::to_string(accrued_now / sm.divisor));
      const auto m = meters_.find(key);
      if (m == meters_.end()) return broken(name() + ": a meter the model knows nothing of");
      const ModelMeter& mm = m->second;
      if (mm.account != sm.account) return broken(name() + ": the model has it on account " + mm.account);
      if (mm.open_since != sm.open_since)
        return broken(name() + ": open since " + (sm.open_since ? show_time(*sm.open_since, start_) : "(closed)") +
                      "; the model says " + (mm.open_since ? show_time(*mm.open_since, start_) : "(closed)"));
      if (mm.open_since && (mm.rate != sm.rate || (!mm.compute && mm.gib != sm.gib)))
        return broken(name() + ": rate " + std::to_string(sm.rate) + " for " + std::to_string(sm.gib) +
                      " GiB; the model says " + std::to_string(mm.rate) + " for " + std::to_string(mm.gib) + " GiB");
      if (mm.accrued_at(now_) != accrued_now || mm.quantity_at(now_) != quantity_now || mm.divisor() != sm.divisor)
        return broken(name() + ": accrued " + std::to_string(accrued_now) + " (" + std::to_string(quantity_now) +
                      " units) by now; the model says " + std::to_string(mm.accrued_at(now_)) + " (" +
                      std::to_string(mm.quantity_at(now_)) + ")");
    }
    if (meters_seen_.size() != meters_.size()) {
      for (const auto& [key, m] : meters_) {
        bool there = false;
        for (const auto& sm : meters_seen_) there = there || sm.key == key;
        if (!there)
          return broken(key.first + " " + key.second + ": the model has this meter (" +
                        (m.open_since ? "open at " + std::to_string(m.rate) + " per hour" : std::string("closed")) +
                        "), the store has none");
      }
    }
    // A charge for a meter the store does not have.
    for (const auto& u : users_)
      for (const auto& [key, c] : seen_[u.account].charges)
        if (!meters_.count(key))
          return broken(u.account + ": charges for " + key.first + " " + key.second + ", which has no meter");
    return true;
  }

  PropertyStore& store_;
  int number_;
  std::mt19937_64 rng_;
  SysTime start_, now_;
  int step_ = 0;
  ModelPrices prices_;
  std::vector<ModelUser> users_;
  std::vector<ModelInstance> instances_;
  std::vector<ModelDisk> disks_;
  std::map<MeterKey, ModelMeter> meters_;
  std::map<std::string, SeenLedger> seen_;
  std::vector<StoreMeter> meters_seen_;             // the meters as last read
  std::map<std::string, bool> settled_now_;         // accounts settled at now_ (until the clock moves)
  std::map<std::string, SysTime> last_settlement_;  // each account's latest settlement
  struct Noted {
    int step;
    SysTime at;
    std::string what;
  };
  std::vector<Noted> trace_;  // formatted only when the sequence fails
  std::string failure_;
  int crashes_ = 0, kills_ = 0, transactions_ = 0;
};

class BillingPropertyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static int n = 0;
    // In memory where the machine has /dev/shm: the store's files are real (closed, reopened,
    // recovered after a kill), but the checkpoints' fsyncs would double the run on a disk.
    std::error_code ec;
    const fs::path base = fs::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK) == 0
                              ? fs::path("/dev/shm")
                              : fs::temp_directory_path();
    dir_ = base / ("gpucloud-billing-property-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(BillingPropertyTest, SLOW_RandomSequencesKeepLedgersBalancedAndChargesEqualToTheMeters) {
  const std::uint64_t base = env_number("GPUCLOUD_PROPERTY_SEED").value_or(kBaseSeed);
  const auto only = env_number("GPUCLOUD_PROPERTY_SEQUENCE");
  const int count = only ? 1 : static_cast<int>(env_number("GPUCLOUD_PROPERTY_SEQUENCES").value_or(kSequenceCount));
  PropertyStore store(dir_);
  int crashes = 0, kills = 0, transactions = 0;
  for (int k = 0; k < count; ++k) {
    const int n = only ? static_cast<int>(*only) : k;
    if (k % kSequencesPerStoreFile == 0) {
      Timed timed(clocks.fresh);
      auto s = store.fresh();
      ASSERT_TRUE(s) << s.error().detail;
    }
    Sequence sequence(store, n, sequence_seed(base, n));
    const bool passed = sequence.run();
    crashes += sequence.crashes();
    kills += sequence.kills();
    transactions += sequence.transactions();
    if (!passed) {
      ADD_FAILURE() << "sequence " << n << " (base seed 0x" << std::hex << base << std::dec
                    << "; replay it alone with GPUCLOUD_PROPERTY_SEQUENCE=" << n
                    << (base != kBaseSeed ? " GPUCLOUD_PROPERTY_SEED=" + std::to_string(base) : std::string())
                    << ") failed: " << sequence.failure() << "\n  its steps:\n"
                    << sequence.trace();
      return;
    }
  }
  std::printf(
      "[ property ] %d sequences, %d transactions, %d crash-restarts (%d killed -9 in a child); seconds in "
      "commits %.1f, checks %.1f, crashes %.1f, kills %.1f, reopens %.1f, new store files %.1f\n",
      count, transactions, crashes, kills, clocks.commit, clocks.check, clocks.crash, clocks.fork, clocks.restart,
      clocks.fresh);
  std::printf("[ property ] %d hourly entries grouped several meters\n", grouped_entries);
  if (count >= 1000) {  // the mix really crashes: about 0.11 crash-restarts a sequence, 1 in 40 a kill -9
    EXPECT_GT(crashes, count / 20);
    EXPECT_GT(kills, count / 2000);
    // About 270 in 10,000 sequences: an account with two running instances or two data disks
    // at an hourly settlement.
    EXPECT_GT(grouped_entries, count / 50) << "the sequences rarely settle an account with several meters of a kind";
  }
}

// Found by the property test, which keeps it out of its sequences (plan_stop: an observed exit
// is never earlier than the account's last settlement). A run whose container exited before a
// settlement that the daemon ran before it noticed the exit (reconcile every 10 s; or a
// restart) keeps the charges past the exit: close_meter folds the run up to the exit, finds
// floor(accrued ÷ divisor) below `charged` and charges nothing, refunds nothing, so the meter
// stays over-charged (later runs of the same meter absorb it; a release never does). The spec:
// "compute is charged up to the container's exit time". Enable when that is fixed.
TEST_F(BillingPropertyTest, AnExitObservedAfterASettlementIsNotChargedPastTheExit) {
  PropertyStore store(dir_);
  ASSERT_TRUE(store.fresh());
  const SysTime t0 = from_unix_micros(1'800'000'000'000'000);
  const std::string user = "u-exit", account = account_id_for_user(user);
  ASSERT_TRUE(store->write_now([&](store::Database& db) -> Status {
    if (auto s = db.run("INSERT INTO users (id, username, password_hash, role, created_at) VALUES (?, 'exit', 'x', "
                        "'user', 0)",
                        {user});
        !s)
      return s;
    return open_account(db, user, "exit", 10'000, t0);
  }));
  // 1 fen a second from t0; the hourly pass at t0 + 100 s charges 100.
  ASSERT_TRUE(store->write_now([&](store::Database& db) { return open_run(db, "i-exit", user, false, 3600, t0); }));
  ASSERT_TRUE(store->write_now([&](store::Database& db) -> Status {
    auto r = settle_open_meters(db, t0 + std::chrono::seconds(100));
    return r ? ok() : fail(r.error());
  }));
  // The container had exited at t0 + 50 s; the daemon sees it at t0 + 105 s.
  ASSERT_TRUE(store->write_now([&](store::Database& db) {
    return close_run(db, "i-exit", t0 + std::chrono::seconds(50), t0 + std::chrono::seconds(105));
  }));
  auto charged = store->write_now([&](store::Database& db) { return compute_charged(db, "i-exit"); });
  ASSERT_TRUE(charged);
  EXPECT_EQ(*charged, 50) << "50 s at 1 fen a second";
  auto balance = store->write_now([&](store::Database& db) { return load_account(db, account); });
  ASSERT_TRUE(balance);
  EXPECT_EQ(balance->balance, 10'000 - 50);
}

}  // namespace
}  // namespace gpucloud::billing::ledger_property

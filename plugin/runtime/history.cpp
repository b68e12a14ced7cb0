#include "plugin/runtime/history.h"

#include <sqlite3.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <tuple>

#include "plugin/runtime/detail/time.h"

namespace cloudtune::runtime {
namespace {

// Statements are prepared, stepped and finalized here (RAII); text and doubles bind by index.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql, -1, &s_, nullptr) != SQLITE_OK) s_ = nullptr;
  }
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  bool ok() const { return s_ != nullptr; }
  Stmt& Bind(int i, const std::string& v) {
    sqlite3_bind_text(s_, i, v.c_str(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& Bind(int i, double v) {
    sqlite3_bind_double(s_, i, v);
    return *this;
  }
  Stmt& Bind(int i, long long v) {
    sqlite3_bind_int64(s_, i, v);
    return *this;
  }
  Stmt& Bind(int i, int v) { return Bind(i, static_cast<long long>(v)); }
  int Step() { return s_ ? sqlite3_step(s_) : SQLITE_ERROR; }
  void Reset() {
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
  }
  std::string Text(int i) const {
    const auto* t = reinterpret_cast<const char*>(sqlite3_column_text(s_, i));
    return t ? std::string(t, static_cast<size_t>(sqlite3_column_bytes(s_, i))) : std::string();
  }
  double Double(int i) const { return sqlite3_column_double(s_, i); }
  long long Int(int i) const { return sqlite3_column_int64(s_, i); }

 private:
  sqlite3* db_;
  sqlite3_stmt* s_ = nullptr;
};

bool Exec(sqlite3* db, const char* sql, std::string* error) {
  char* msg = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &msg) == SQLITE_OK) return true;
  if (error) *error = msg ? msg : sqlite3_errmsg(db);
  sqlite3_free(msg);
  return false;
}

constexpr const char* kCreate = R"sql(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT OR IGNORE INTO meta(key, value) VALUES('schema', 'cloudtune.history/1');
CREATE TABLE IF NOT EXISTS jobs(
  id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, signature TEXT NOT NULL,
  parameters INTEGER NOT NULL, recorded_at TEXT NOT NULL, instance_type TEXT NOT NULL,
  objective TEXT NOT NULL, steps INTEGER NOT NULL, progress REAL NOT NULL, hours REAL NOT NULL,
  cost_usd REAL NOT NULL, grad_sqr REAL NOT NULL, grad_var REAL NOT NULL,
  base_batch REAL NOT NULL, models TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS jobs_by_signature ON jobs(signature, id);
CREATE TABLE IF NOT EXISTS configurations(
  job INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE, instance_type TEXT NOT NULL,
  num_nodes INTEGER NOT NULL, num_replicas INTEGER NOT NULL, local_bsz INTEGER NOT NULL,
  accum_steps INTEGER NOT NULL, step_time REAL NOT NULL, sync_time REAL NOT NULL,
  rows INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS noise(
  job INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE, batch REAL NOT NULL,
  progress REAL NOT NULL, iteration REAL NOT NULL, grad_sqr REAL NOT NULL,
  grad_var REAL NOT NULL);
)sql";

std::string Hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

}  // namespace

bool HistoryOptions::IsValid(std::string* error) const {
  if (!(busy_timeout_seconds > 0)) {
    if (error) *error = "history busy_timeout_seconds must be > 0";
    return false;
  }
  return true;
}

std::string DefaultHistoryPath() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) return std::string(xdg) + "/cloudtune/history.sqlite";
  const char* home = std::getenv("HOME");
  if (home && *home) return std::string(home) + "/.cache/cloudtune/history.sqlite";
  return "";
}

std::string ModelSignature::ToString() const {
  return std::to_string(parameters) + "-" + shapes_hash;
}

ModelSignature MakeSignature(const std::vector<std::vector<int64_t>>& shapes) {
  // FNV-1a over (rank, dims...) of every tensor, so [2,3],[4] and [2],[3,4] differ.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](int64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= static_cast<uint64_t>(v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  ModelSignature s;
  for (const auto& shape : shapes) {
    mix(static_cast<int64_t>(shape.size()));
    long long n = 1;
    for (int64_t d : shape) {
      mix(d);
      n *= d;
    }
    s.parameters += n;
  }
  s.shapes_hash = Hex64(h);
  return s;
}

nlohmann::json HistoryJob::ToJson() const {
  nlohmann::json j = {{"schema", kHistorySchema},
                      {"id", id},
                      {"job_id", job_id},
                      {"signature", signature},
                      {"parameters", parameters},
                      {"recorded_at", recorded_at},
                      {"instance_type", instance_type},
                      {"objective", objective},
                      {"steps", steps},
                      {"progress", progress},
                      {"hours", hours},
                      {"cost_usd", cost_usd},
                      {"noise",
                       {{"grad_sqr", last_noise.grad_sqr},
                        {"grad_var", last_noise.grad_var},
                        {"base_batch", last_noise.base_batch}}},
                      {"models", models}};
  j["configurations"] = nlohmann::json::array();
  for (const auto& m : configurations)
    j["configurations"].push_back({{"instance_type", m.key.instance_type},
                                   {"num_nodes", m.key.num_nodes},
                                   {"num_replicas", m.key.num_replicas},
                                   {"local_bsz", m.key.local_bsz},
                                   {"accum_steps", m.key.accum_steps},
                                   {"step_time", m.step_time},
                                   {"sync_time", m.sync_time},
                                   {"rows", m.rows}});
  j["noise_history"] = nlohmann::json::array();
  for (const auto& o : noise)
    j["noise_history"].push_back({{"batch", o.batch},
                                  {"progress", o.progress},
                                  {"iteration", o.iteration},
                                  {"grad_sqr", o.grad_sqr},
                                  {"grad_var", o.grad_var}});
  return j;
}

std::unique_ptr<History> History::Open(const std::string& path, const HistoryOptions& options,
                                       std::string* error) {
  auto fail = [&](const std::string& what) -> std::unique_ptr<History> {
    if (error) *error = path + ": " + what;
    return nullptr;
  };
  std::string why;
  if (!options.IsValid(&why)) return fail(why);
  if (path.empty()) return fail("no history path");
  std::error_code ec;
  const auto dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  sqlite3* db = nullptr;
  const int rc =
      sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    const std::string m = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return fail("cannot open: " + m);
  }
  std::unique_ptr<History> h(new History(db, path));
  sqlite3_busy_timeout(db, static_cast<int>(options.busy_timeout_seconds * 1000));
  // What is there: a fresh file (no tables), ours (meta says so), or something else.
  int tables = -1;
  {
    Stmt s(db, "SELECT count(*) FROM sqlite_master WHERE type = 'table'");
    if (!s.ok() || s.Step() != SQLITE_ROW) {
      const int code = sqlite3_errcode(db);
      if (code == SQLITE_NOTADB || code == SQLITE_CORRUPT)
        return fail(std::string("not a cloudtune history database (") + sqlite3_errmsg(db) + ")");
      return fail(std::string("cannot read: ") + sqlite3_errmsg(db));
    }
    tables = static_cast<int>(s.Int(0));
  }
  if (tables > 0) {
    Stmt s(db, "SELECT value FROM meta WHERE key = 'schema'");
    if (!s.ok() || s.Step() != SQLITE_ROW)
      return fail("not a cloudtune history database (no schema in table meta)");
    if (s.Text(0) != kHistorySchema)
      return fail("schema '" + s.Text(0) + "' is not " + kHistorySchema);
  }
  if (!Exec(db, "PRAGMA foreign_keys=ON;", &why)) return fail("cannot configure: " + why);
  if (tables == 0) {
    // A new database: the WAL journal (kept in the file from now on) and the tables, created
    // once. An existing one is only read here: a look-up never waits for another job's writer.
    if (!Exec(db, "PRAGMA journal_mode=WAL;", &why))
      return fail("cannot use a WAL journal: " + why);
    if (!Exec(db, (std::string("BEGIN IMMEDIATE;") + kCreate + "COMMIT;").c_str(), &why)) {
      Exec(db, "ROLLBACK;", nullptr);
      return fail("cannot create the tables: " + why);
    }
  }
  // A file that is SQLite but damaged inside shows here, not at open.
  {
    Stmt s(db, "PRAGMA quick_check");
    if (!s.ok() || s.Step() != SQLITE_ROW || s.Text(0) != "ok")
      return fail("the database is damaged (quick_check: " +
                  (s.ok() ? s.Text(0) : std::string(sqlite3_errmsg(db))) + ")");
  }
  return h;
}

History::~History() { sqlite3_close(db_); }

long long History::Record(const HistoryJob& job, std::string* error) {
  std::string why;
  auto fail = [&](const std::string& what) -> long long {
    Exec(db_, "ROLLBACK;", nullptr);
    if (error) *error = path_ + ": cannot record the job: " + what;
    return 0;
  };
  if (!Exec(db_, "BEGIN IMMEDIATE;", &why)) {
    if (error) *error = path_ + ": cannot record the job: " + why;
    return 0;
  }
  Stmt j(db_,
         "INSERT INTO jobs(job_id, signature, parameters, recorded_at, instance_type, objective, "
         "steps, progress, hours, cost_usd, grad_sqr, grad_var, base_batch, models) "
         "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)");
  if (!j.ok()) return fail(sqlite3_errmsg(db_));
  j.Bind(1, job.job_id).Bind(2, job.signature).Bind(3, job.parameters);
  j.Bind(4, job.recorded_at.empty() ? detail::UtcNow() : job.recorded_at);
  j.Bind(5, job.instance_type).Bind(6, job.objective).Bind(7, job.steps);
  j.Bind(8, job.progress).Bind(9, job.hours).Bind(10, job.cost_usd);
  j.Bind(11, job.last_noise.grad_sqr).Bind(12, job.last_noise.grad_var);
  j.Bind(13, job.last_noise.base_batch).Bind(14, job.models.dump());
  if (j.Step() != SQLITE_DONE) return fail(sqlite3_errmsg(db_));
  const long long id = sqlite3_last_insert_rowid(db_);
  Stmt c(db_,
         "INSERT INTO configurations(job, instance_type, num_nodes, num_replicas, local_bsz, "
         "accum_steps, step_time, sync_time, rows) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)");
  if (!c.ok()) return fail(sqlite3_errmsg(db_));
  for (const auto& m : job.configurations) {
    c.Bind(1, id).Bind(2, m.key.instance_type).Bind(3, m.key.num_nodes);
    c.Bind(4, m.key.num_replicas).Bind(5, m.key.local_bsz).Bind(6, m.key.accum_steps);
    c.Bind(7, m.step_time).Bind(8, m.sync_time).Bind(9, m.rows);
    if (c.Step() != SQLITE_DONE) return fail(sqlite3_errmsg(db_));
    c.Reset();
  }
  Stmt n(db_,
         "INSERT INTO noise(job, batch, progress, iteration, grad_sqr, grad_var) "
         "VALUES(?1, ?2, ?3, ?4, ?5, ?6)");
  if (!n.ok()) return fail(sqlite3_errmsg(db_));
  for (const auto& o : job.noise) {
    n.Bind(1, id).Bind(2, o.batch).Bind(3, o.progress).Bind(4, o.iteration);
    n.Bind(5, o.grad_sqr).Bind(6, o.grad_var);
    if (n.Step() != SQLITE_DONE) return fail(sqlite3_errmsg(db_));
    n.Reset();
  }
  if (!Exec(db_, "COMMIT;", &why)) return fail(why);
  return id;
}

std::vector<HistoryJob> History::Query(const std::string& where, long long arg, int limit,
                                       bool full) const {
  std::vector<HistoryJob> out;
  const std::string sql =
      "SELECT id, job_id, signature, parameters, recorded_at, instance_type, objective, steps, "
      "progress, hours, cost_usd, grad_sqr, grad_var, base_batch, models FROM jobs " +
      where + " ORDER BY id DESC" + (limit > 0 ? " LIMIT " + std::to_string(limit) : "");
  Stmt s(db_, sql.c_str());
  if (!s.ok()) return out;
  if (!where.empty()) s.Bind(1, arg);
  while (s.Step() == SQLITE_ROW) {
    HistoryJob j;
    j.id = s.Int(0);
    j.job_id = s.Text(1);
    j.signature = s.Text(2);
    j.parameters = s.Int(3);
    j.recorded_at = s.Text(4);
    j.instance_type = s.Text(5);
    j.objective = s.Text(6);
    j.steps = s.Int(7);
    j.progress = s.Double(8);
    j.hours = s.Double(9);
    j.cost_usd = s.Double(10);
    j.last_noise.grad_sqr = s.Double(11);
    j.last_noise.grad_var = s.Double(12);
    j.last_noise.base_batch = s.Double(13);
    j.models = nlohmann::json::parse(s.Text(14), nullptr, false);
    if (j.models.is_discarded()) j.models = nlohmann::json::object();
    out.push_back(std::move(j));
  }
  if (!full) return out;
  for (auto& j : out) {
    Stmt c(db_,
           "SELECT instance_type, num_nodes, num_replicas, local_bsz, accum_steps, step_time, "
           "sync_time, rows FROM configurations WHERE job = ?1 ORDER BY rowid");
    c.Bind(1, j.id);
    while (c.Step() == SQLITE_ROW) {
      core::Measurement m;
      m.key.instance_type = c.Text(0);
      m.key.num_nodes = static_cast<int>(c.Int(1));
      m.key.num_replicas = static_cast<int>(c.Int(2));
      m.key.local_bsz = static_cast<int>(c.Int(3));
      m.key.accum_steps = static_cast<int>(c.Int(4));
      m.step_time = c.Double(5);
      m.sync_time = c.Double(6);
      m.rows = static_cast<int>(c.Int(7));
      j.configurations.push_back(m);
    }
    Stmt n(db_,
           "SELECT batch, progress, iteration, grad_sqr, grad_var FROM noise WHERE job = ?1 "
           "ORDER BY rowid");
    n.Bind(1, j.id);
    while (n.Step() == SQLITE_ROW)
      j.noise.push_back({n.Double(0), n.Double(1), n.Double(2), n.Double(3), n.Double(4)});
  }
  return out;
}

std::vector<HistoryJob> History::List(int limit) const { return Query("", 0, limit, false); }

std::optional<HistoryJob> History::Get(long long id) const {
  auto v = Query("WHERE id = ?1", id, 1, true);
  if (v.empty()) return std::nullopt;
  return std::move(v.front());
}

std::optional<HistoryJob> History::Latest(const std::string& signature) const {
  // Signatures are text: bind through a lookup of the newest id (the index covers it).
  Stmt s(db_, "SELECT max(id) FROM jobs WHERE signature = ?1");
  if (!s.ok()) return std::nullopt;
  s.Bind(1, signature);
  if (s.Step() != SQLITE_ROW || s.Int(0) <= 0) return std::nullopt;
  return Get(s.Int(0));
}

WarmPrior MakeWarmPrior(const HistoryJob& job) {
  WarmPrior p;
  p.from_job = job.id;
  p.job_id = job.job_id;
  for (const auto& m : job.configurations)
    if (m.step_time > 0 && m.sync_time >= 0 && m.sync_time < m.step_time && m.rows > 0)
      p.configurations.push_back(m);
  p.noise = job.last_noise;
  p.noise_history = job.noise;
  return p;
}

core::Snapshot WarmSnapshot(const core::Snapshot& live, const WarmPrior& prior) {
  core::Snapshot s = live;
  using Key = std::tuple<std::string, int, int, int, int>;
  std::set<Key> own;
  for (const auto& m : live.profile)
    own.insert({m.key.instance_type, m.key.num_nodes, m.key.num_replicas, m.key.local_bsz,
                m.key.accum_steps});
  std::vector<core::Measurement> merged;
  for (const auto& m : prior.configurations)
    if (!own.count({m.key.instance_type, m.key.num_nodes, m.key.num_replicas, m.key.local_bsz,
                    m.key.accum_steps}))
      merged.push_back(m);
  merged.insert(merged.end(), live.profile.begin(), live.profile.end());
  s.profile = std::move(merged);
  if (!live.noise_valid && prior.noise.usable()) {
    s.noise = prior.noise;
    s.noise_valid = true;
  }
  s.noise_history = prior.noise_history;
  s.noise_history.insert(s.noise_history.end(), live.noise_history.begin(),
                         live.noise_history.end());
  return s;
}

}  // namespace cloudtune::runtime

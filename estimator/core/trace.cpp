#include "estimator/core/trace.h"

#include <cmath>
#include <fstream>
#include <iomanip>
#include <istream>
#include <limits>
#include <map>
#include <ostream>
#include <sstream>

#include "estimator/core/csv.h"
#include "estimator/core/error.h"

namespace cloudtune::estimator {

namespace csv = core::csv;
namespace detail {

struct Accum {
  Measurement m;
  double step_sum = 0, sync_sum = 0;
  int first_line = 0;
};

}  // namespace detail

namespace {

void Parse(std::istream& in, const std::string& name, std::map<ConfigKey, detail::Accum>* acc) {
  using csv::Fail;
  std::string line;
  int lineno = 0;
  std::vector<std::string> header;
  while (std::getline(in, line)) {
    ++lineno;
    if (!csv::Trim(line).empty()) {
      header = csv::Split(line);
      break;
    }
  }
  if (header.empty()) Fail(name, lineno > 0 ? lineno : 1, 0, "empty file (no header)");
  std::map<std::string, int> col;
  for (size_t i = 0; i < header.size(); ++i) col[header[i]] = static_cast<int>(i);
  const int header_line = lineno;
  auto need = [&](const char* c) {
    auto it = col.find(c);
    if (it == col.end()) Fail(name, header_line, 0, std::string("missing column '") + c + "'");
    return it->second;
  };
  auto opt = [&](const char* c) {
    auto it = col.find(c);
    return it == col.end() ? -1 : it->second;
  };
  const int c_place = opt("placement");
  int c_nodes = -1, c_reps = -1;
  if (c_place < 0) {
    c_nodes = need("num_nodes");
    c_reps = need("num_replicas");
  }
  const int c_bsz = need("local_bsz"), c_step = need("step_time"), c_sync = need("sync_time");
  const int c_accum = opt("accum_steps"), c_type = opt("instance_type");

  int rows = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (csv::Trim(line).empty()) continue;
    auto f = csv::Split(line);
    if (f.size() != header.size())
      Fail(name, lineno, 0,
           "expected " + std::to_string(header.size()) + " fields, found " +
               std::to_string(f.size()));
    ConfigKey k;
    int max_per_node = 0;
    if (c_place >= 0) {
      const std::string& p = f[c_place];
      if (p.empty()) Fail(name, lineno, c_place + 1, "placement: empty value");
      k.num_nodes = static_cast<int>(p.size());
      k.num_replicas = 0;
      for (char ch : p) {
        if (ch < '1' || ch > '9')
          Fail(name, lineno, c_place + 1,
               "placement: '" + p + "' is not a string of per-node GPU counts (digits 1-9)");
        k.num_replicas += ch - '0';
        max_per_node = std::max(max_per_node, ch - '0');
      }
    } else {
      k.num_nodes = csv::Count(f[c_nodes], name, lineno, c_nodes + 1, "num_nodes", 1);
      k.num_replicas = csv::Count(f[c_reps], name, lineno, c_reps + 1, "num_replicas", 1);
      if (k.num_replicas < k.num_nodes)
        Fail(name, lineno, c_reps + 1,
             "num_replicas: " + f[c_reps] + " is less than num_nodes " + f[c_nodes]);
    }
    k.local_bsz = csv::Count(f[c_bsz], name, lineno, c_bsz + 1, "local_bsz", 1);
    if (c_accum >= 0 && !f[c_accum].empty())
      k.accum_steps = csv::Count(f[c_accum], name, lineno, c_accum + 1, "accum_steps", 0);
    if (c_type >= 0) k.instance_type = f[c_type];
    double st = csv::Number(f[c_step], name, lineno, c_step + 1, "step_time");
    double sy = csv::Number(f[c_sync], name, lineno, c_sync + 1, "sync_time");
    if (st <= 0) Fail(name, lineno, c_step + 1, "step_time: must be positive");
    auto& a = (*acc)[k];
    if (a.m.rows == 0) {
      a.m.key = k;
      a.first_line = lineno;
    }
    a.m.rows++;
    a.step_sum += st;
    a.sync_sum += sy;
    a.m.max_gpus_per_node = std::max(a.m.max_gpus_per_node, max_per_node);
    ++rows;
  }
  if (rows == 0) Fail(name, header_line, 0, "no data rows after the header");
}

std::vector<Measurement> Finish(std::map<ConfigKey, detail::Accum>& acc, const std::string& name,
                                int sync_col) {
  std::vector<Measurement> out;
  out.reserve(acc.size());
  for (auto& [k, a] : acc) {
    a.m.step_time = a.step_sum / a.m.rows;
    a.m.sync_time = a.sync_sum / a.m.rows;
    if (a.m.sync_time >= a.m.step_time) {
      std::ostringstream os;
      os << "sync_time: configuration (num_nodes=" << k.num_nodes
         << ", num_replicas=" << k.num_replicas << ", local_bsz=" << k.local_bsz
         << ", accum_steps=" << k.accum_steps << ") has mean sync_time " << a.m.sync_time
         << " >= step_time " << a.m.step_time;
      csv::Fail(name, a.first_line, sync_col, os.str());
    }
    out.push_back(a.m);
  }
  return out;
}

int SyncColumn(const std::string& header_line) {
  auto h = csv::Split(header_line);
  for (size_t i = 0; i < h.size(); ++i)
    if (h[i] == "sync_time") return static_cast<int>(i) + 1;
  return 0;
}

}  // namespace

std::vector<Measurement> ParseTrace(std::istream& in, const std::string& name) {
  std::stringstream buf;
  buf << in.rdbuf();
  std::string text = buf.str();
  std::string first;
  {
    std::istringstream s(text);
    while (std::getline(s, first) && csv::Trim(first).empty()) {
    }
  }
  std::map<ConfigKey, detail::Accum> acc;
  std::istringstream s(text);
  Parse(s, name, &acc);
  return Finish(acc, name, SyncColumn(first));
}

std::vector<Measurement> ReadTraces(const std::vector<std::string>& paths) {
  if (paths.empty()) throw InputError("no trace files given");
  std::map<ConfigKey, detail::Accum> acc;
  std::string last;
  int sync_col = 0;
  for (const auto& p : paths) {
    std::ifstream f(p);
    if (!f) throw InputError(p + ": cannot open");
    std::stringstream buf;
    buf << f.rdbuf();
    std::string text = buf.str();
    std::string first;
    std::istringstream s0(text);
    while (std::getline(s0, first) && csv::Trim(first).empty()) {
    }
    sync_col = SyncColumn(first);
    std::istringstream s(text);
    // Each file's configurations are checked (sync < step) on their own before merging, so the
    // error names the file whose rows are wrong.
    std::map<ConfigKey, detail::Accum> mine;
    Parse(s, p, &mine);
    Finish(mine, p, sync_col);
    for (auto& [k, a] : mine) {
      auto& t = acc[k];
      if (t.m.rows == 0)
        t = a;
      else {
        t.m.rows += a.m.rows;
        t.step_sum += a.step_sum;
        t.sync_sum += a.sync_sum;
        t.m.max_gpus_per_node = std::max(t.m.max_gpus_per_node, a.m.max_gpus_per_node);
      }
    }
    last = p;
  }
  return Finish(acc, last, sync_col);
}

void WriteTrace(std::ostream& out, const std::vector<Measurement>& ms) {
  out << "num_nodes,num_replicas,local_bsz,accum_steps,step_time,sync_time,instance_type\n";
  out << std::setprecision(17);
  for (const auto& m : ms)
    out << m.key.num_nodes << "," << m.key.num_replicas << "," << m.key.local_bsz << ","
        << m.key.accum_steps << "," << m.step_time << "," << m.sync_time << ","
        << m.key.instance_type << "\n";
}

}  // namespace cloudtune::estimator

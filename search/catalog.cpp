#include "search/catalog.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <set>
#include <sstream>

#include "estimator/core/csv.h"
#include "estimator/core/error.h"

namespace cloudtune::search {
namespace detail {
extern const char* const kDefaultInstancesCsv;
extern const char* const kDefaultGpuSpecsCsv;
}  // namespace detail

namespace {

using core::csv::Trim;

// A CSV table read by header.
struct Table {
  std::string name;
  std::map<std::string, size_t> cols;
  std::vector<std::pair<int, std::vector<std::string>>> rows;  // (line, cells)
};

Table ReadTable(std::istream& in, const std::string& name) {
  Table t;
  t.name = name;
  std::string line;
  int lineno = 0;
  bool header = false;
  while (std::getline(in, line)) {
    ++lineno;
    if (Trim(line).empty() || Trim(line)[0] == '#') continue;
    auto cells = core::csv::Split(line);
    if (!header) {
      for (size_t i = 0; i < cells.size(); ++i) t.cols[cells[i]] = i;
      header = true;
      continue;
    }
    t.rows.emplace_back(lineno, std::move(cells));
  }
  if (!header) throw InputError(name + ": empty file (no header)");
  return t;
}

struct Row {
  const Table& t;
  int line;
  const std::vector<std::string>& cells;
  std::string entry;  // entry name for messages

  std::string Where(const std::string& field) const {
    return t.name + ":" + std::to_string(line) + ": " + (entry.empty() ? "" : entry + ": ") +
           field + ": ";
  }
  // Cell text ("" when the column or the cell is absent).
  std::string Get(const std::string& col) const {
    auto it = t.cols.find(col);
    if (it == t.cols.end() || it->second >= cells.size()) return "";
    return cells[it->second];
  }
  std::string Required(const std::string& col) const {
    if (!t.cols.count(col)) throw InputError(t.name + ": missing column '" + col + "'");
    std::string v = Get(col);
    if (v.empty()) throw InputError(Where(col) + "missing value");
    return v;
  }
  // Non-negative number, or `dflt` when empty.
  double Number(const std::string& col, double dflt, bool required = false) const {
    std::string v = required ? Required(col) : Get(col);
    if (v.empty()) return dflt;
    char* end = nullptr;
    double x = std::strtod(v.c_str(), &end);
    if (end == v.c_str() || *end != '\0' || !std::isfinite(x))
      throw InputError(Where(col) + "'" + v + "' is not a number");
    if (x < 0) throw InputError(Where(col) + "negative value " + v);
    return x;
  }
};

}  // namespace

bool CatalogOptions::IsValid(std::string* error) const {
  auto fail = [&](const std::string& m) {
    if (error) *error = m;
    return false;
  };
  if (!(default_revocation_per_hour >= 0) || !std::isfinite(default_revocation_per_hour))
    return fail("default_revocation_per_hour must be >= 0");
  if (!(default_network_gbps > 0) || !std::isfinite(default_network_gbps))
    return fail("default_network_gbps must be > 0");
  if (!(open_band_midpoint > 0.2 && open_band_midpoint < 1))
    return fail("open_band_midpoint must be in (0.2, 1)");
  return true;
}

const char* CostUnitName(CostUnit u) { return u == CostUnit::kGpuHours ? "gpu_hours" : "usd"; }

std::string FormatCost(double x, CostUnit u) {
  std::ostringstream s;
  if (u == CostUnit::kUsd) s << "$";
  s << std::fixed << std::setprecision(x < 10 ? 3 : 2) << x;
  if (u == CostUnit::kGpuHours) s << " GPU-h";
  return s.str();
}

int Catalog::Find(const std::string& name) const {
  for (size_t i = 0; i < types.size(); ++i)
    if (types[i].name == name) return static_cast<int>(i);
  return -1;
}

const GpuSpec* Catalog::Gpu(const std::string& model) const {
  auto it = gpus.find(model);
  return it == gpus.end() ? nullptr : &it->second;
}

estimator::Hardware HardwareOf(const Catalog& catalog, const std::string& type) {
  auto lower = [](std::string s) {
    for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return s;
  };
  estimator::Hardware h;
  auto from_gpu = [&](const GpuSpec& g) {
    h.gpu_tflops = g.fp32_tflops;  // the figure given for every GPU alike (see Hardware)
    h.memory_bandwidth_gbs = g.memory_bandwidth_gbs;
  };
  const int i = catalog.Find(type);
  if (i >= 0) {
    const InstanceType& t = catalog.types[i];
    if (const GpuSpec* g = catalog.Gpu(t.gpu_model)) from_gpu(*g);
    if (t.network_measured) h.network_gbps = t.network_gbps;
    return h;
  }
  const std::string want = lower(type);
  for (const auto& [model, g] : catalog.gpus)
    if (lower(model) == want) from_gpu(g);
  return h;
}

double RevocationRateFromMonthlyShare(double p) { return -std::log1p(-p) / 730.0; }

double BandMidpoint(const std::string& band, const CatalogOptions& options,
                    const std::string& where) {
  if (band == "<5%") return 0.025;
  if (band == "5-10%") return 0.075;
  if (band == "10-15%") return 0.125;
  if (band == "15-20%") return 0.175;
  if (band == ">20%") return options.open_band_midpoint;
  throw InputError(where + "unknown interruption band '" + band +
                   "' (expected <5%, 5-10%, 10-15%, 15-20% or >20%)");
}

std::map<std::string, GpuSpec> ParseGpuSpecs(std::istream& in, const std::string& name) {
  Table t = ReadTable(in, name);
  std::map<std::string, GpuSpec> out;
  for (const auto& [line, cells] : t.rows) {
    Row r{t, line, cells, ""};
    GpuSpec g;
    g.model = r.Required("gpu_model");
    r.entry = g.model;
    if (out.count(g.model)) throw InputError(r.Where("gpu_model") + "duplicate GPU model");
    g.fp32_tflops = r.Number("fp32_tflops", 0);
    g.fp16_tflops = r.Number("fp16_tflops", 0);
    double fp16nt = r.Number("fp16_nontensor_tflops", 0);
    g.memory_gib = r.Number("memory_gib", 0);
    g.memory_bandwidth_gbs = r.Number("memory_bandwidth_gbs", 0);
    g.train_tflops = g.fp16_tflops > 0 ? g.fp16_tflops : (fp16nt > 0 ? fp16nt : g.fp32_tflops);
    out[g.model] = g;
  }
  return out;
}

std::vector<InstanceType> ParseInstances(std::istream& in, const std::string& name,
                                         const std::map<std::string, GpuSpec>& gpus,
                                         const CatalogOptions& options,
                                         std::map<std::string, GpuSpec>* added) {
  std::string err;
  if (!options.IsValid(&err)) throw InputError("catalog options: " + err);
  Table t = ReadTable(in, name);
  for (const char* c :
       {"cloud", "region", "instance_type", "gpu_model", "gpus", "ondemand_usd_per_hour"})
    if (!t.cols.count(c)) throw InputError(name + ": missing column '" + std::string(c) + "'");
  std::vector<InstanceType> out;
  std::set<std::string> seen;
  std::map<std::string, GpuSpec> defined;  // GPUs the rows give figures for
  for (const auto& [line, cells] : t.rows) {
    Row r{t, line, cells, ""};
    InstanceType it;
    it.name = r.Required("instance_type");
    r.entry = it.name;
    if (!seen.insert(it.name).second)
      throw InputError(r.Where("instance_type") + "duplicate instance type");
    it.cloud = r.Required("cloud");
    it.region = r.Required("region");
    it.gpu_model = r.Required("gpu_model");
    if (!gpus.count(it.gpu_model) && !defined.count(it.gpu_model)) {
      GpuSpec g;
      g.model = it.gpu_model;
      g.fp32_tflops = r.Number("gpu_fp32_tflops", 0);
      g.memory_bandwidth_gbs = r.Number("gpu_memory_bandwidth_gbs", 0);
      g.memory_gib = r.Number("gpu_memory_gib", 0);
      g.train_tflops = g.fp32_tflops;
      if (!(g.fp32_tflops > 0) && !(g.memory_bandwidth_gbs > 0))
        throw InputError(r.Where("gpu_model") + "unknown GPU '" + it.gpu_model +
                         "' (not in the GPU specs: give its figures, gpu_fp32_tflops and/or "
                         "gpu_memory_bandwidth_gbs)");
      defined[g.model] = g;
    }
    const GpuSpec& gpu =
        gpus.count(it.gpu_model) ? gpus.at(it.gpu_model) : defined.at(it.gpu_model);
    // Counts are bounded before the conversion to int (a huge value would not fit).
    double g = r.Number("gpus", 0, true);
    if (g < 1 || g != std::floor(g) || g > 1e6)
      throw InputError(r.Where("gpus") + "must be a positive integer (at most 1000000), got " +
                       r.Get("gpus"));
    it.gpus = static_cast<int>(g);
    it.gpu_memory_gib = r.Number("gpu_memory_gib", gpu.memory_gib);
    const double vcpus = r.Number("vcpus", 0);
    if (vcpus > 1e6) throw InputError(r.Where("vcpus") + "more than 1000000: " + r.Get("vcpus"));
    it.vcpus = static_cast<int>(vcpus);
    it.memory_gib = r.Number("memory_gib", 0);
    it.network_gbps = r.Number("network_gbps", 0);
    it.network_measured = it.network_gbps > 0;
    if (!it.network_measured) it.network_gbps = options.default_network_gbps;
    it.ondemand_per_hour = r.Number("ondemand_usd_per_hour", 0, true);
    if (it.ondemand_per_hour <= 0)
      throw InputError(r.Where("ondemand_usd_per_hour") + "price must be > 0");
    it.spot_per_hour = r.Number("spot_usd_per_hour", -1);
    std::string rate = r.Get("revocation_per_hour");
    std::string band = r.Get("interruption_band");
    if (!rate.empty()) {
      it.revocation_per_hour = r.Number("revocation_per_hour", 0);
      it.revocation_measured = true;
      it.revocation_source = "catalog";
    } else if (!band.empty()) {
      it.revocation_per_hour =
          RevocationRateFromMonthlyShare(BandMidpoint(band, options, r.Where("interruption_band")));
      it.revocation_measured = true;
      it.revocation_source = "spot-advisor " + band;
    } else {
      it.revocation_per_hour = options.default_revocation_per_hour;
      it.revocation_source = "default";
    }
    out.push_back(std::move(it));
  }
  if (added) added->insert(defined.begin(), defined.end());
  return out;
}

std::string DefaultCatalogSnapshot() {
  return "embedded: data/catalog (derived from shared/data/catalog; AWS us-east-1 "
         "skypilot-catalog@27f67dd + Spot Advisor bands 2025-06-28, GCP us-central1 Cyclenerd "
         "2026-07-30, Azure eastus skypilot v6@098741e)";
}

const Catalog& DefaultCatalog() {
  static const Catalog catalog = [] {
    Catalog c;
    std::istringstream gs(detail::kDefaultGpuSpecsCsv);
    c.gpus = ParseGpuSpecs(gs, "<embedded gpu_specs.csv>");
    std::istringstream is(detail::kDefaultInstancesCsv);
    c.types = ParseInstances(is, "<embedded instances.csv>", c.gpus);
    c.source = DefaultCatalogSnapshot();
    return c;
  }();
  return catalog;
}

Catalog LoadCatalog(const std::string& path, const Catalog& base, bool extend,
                    const CatalogOptions& options) {
  std::ifstream f(path);
  if (!f) throw InputError(path + ": cannot open");
  Catalog c = base;
  auto rows = ParseInstances(f, path, base.gpus, options, &c.gpus);
  if (!extend) c.types.clear();
  for (auto& t : rows) {
    int i = c.Find(t.name);
    if (i >= 0)
      c.types[i] = t;
    else
      c.types.push_back(t);
  }
  c.source = extend ? base.source + " + " + path : path;
  return c;
}

std::string InstanceForGpu(const Catalog& catalog, const std::string& device_name,
                           int gpus_per_node) {
  auto upper = [](std::string v) {
    for (char& c : v) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return v;
  };
  // The device name's words (split at anything but letters and digits).
  std::vector<std::string> words;
  std::string w;
  for (char c : upper(device_name) + " ") {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      w += c;
    } else if (!w.empty()) {
      words.push_back(w);
      w.clear();
    }
  }
  std::string best_model;
  size_t best_parts = 0;
  for (const auto& [model, spec] : catalog.gpus) {
    std::vector<std::string> parts;
    std::string part;
    for (char c : upper(model) + "-") {
      if (c == '-' || c == ' ') {
        if (!part.empty()) parts.push_back(part);
        part.clear();
      } else {
        part += c;
      }
    }
    bool all = !parts.empty();
    for (const auto& p : parts)
      all = all && std::find(words.begin(), words.end(), p) != words.end();
    if (all && parts.size() > best_parts) {
      best_model = model;
      best_parts = parts.size();
    }
  }
  if (best_model.empty()) return "";
  const InstanceType* best = nullptr;
  for (const auto& t : catalog.types) {
    if (t.gpu_model != best_model || t.gpus < std::max(1, gpus_per_node)) continue;
    if (!best || t.gpus < best->gpus ||
        (t.gpus == best->gpus && t.ondemand_per_hour < best->ondemand_per_hour))
      best = &t;
  }
  return best ? best->name : "";
}

std::vector<std::string> TypesOn(const Catalog& catalog, const std::vector<std::string>& clouds,
                                 const std::vector<std::string>& gpus) {
  auto lower = [](std::string v) {
    for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return v;
  };
  auto listed = [&](const std::vector<std::string>& list, const std::string& v) {
    return list.empty() || std::any_of(list.begin(), list.end(),
                                       [&](const std::string& x) { return lower(x) == lower(v); });
  };
  auto check = [&](const std::vector<std::string>& list, const char* what,
                   std::string InstanceType::*field) {
    std::set<std::string> has;
    for (const InstanceType& t : catalog.types)
      if (!(t.*field).empty() && t.cloud != "local") has.insert(t.*field);
    for (const std::string& x : list) {
      if (std::any_of(has.begin(), has.end(),
                      [&](const std::string& h) { return lower(h) == lower(x); }))
        continue;
      std::string known;
      for (const std::string& h : has) known += (known.empty() ? "" : ", ") + h;
      throw InputError(std::string("no instance type of the catalog has ") + what + " '" + x +
                       "' (it has " + (known.empty() ? "none" : known) + ")");
    }
  };
  check(clouds, "cloud", &InstanceType::cloud);
  check(gpus, "GPU model", &InstanceType::gpu_model);
  std::vector<std::string> out;
  for (const InstanceType& t : catalog.types)
    if (t.cloud != "local" && listed(clouds, t.cloud) && listed(gpus, t.gpu_model))
      out.push_back(t.name);
  if (out.empty())
    throw InputError("no instance type of the catalog is on those clouds with those GPUs");
  return out;
}

Catalog ResolveCatalog(const std::string& path, const CatalogOptions& options) {
  std::string p = path;
  if (p.empty()) return DefaultCatalog();
  bool extend = p[0] == '+';
  if (extend) p = p.substr(1);
  return LoadCatalog(p, DefaultCatalog(), extend, options);
}

}  // namespace cloudtune::search

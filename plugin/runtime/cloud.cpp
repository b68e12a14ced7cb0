#include "plugin/runtime/cloud.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "estimator/core/csv.h"
#include "plugin/runtime/http_client.h"

namespace cloudtune::runtime {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string ReadSmallFile(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return core::csv::Trim(s);
}

// The requests of one probe share the remaining budget.
class Budget {
 public:
  explicit Budget(double seconds)
      : end_(Clock::now() +
             std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds))) {}
  bool Left() const { return Clock::now() < end_; }
  HttpAnswer Ask(const HttpUrl& base, HttpRequestSpec spec) const {
    const auto left = std::chrono::duration_cast<milliseconds>(end_ - Clock::now());
    if (left.count() <= 0) {
      HttpAnswer spent;
      spent.error = "time budget spent";
      return spent;
    }
    spec.connect_timeout = left / 2;
    spec.read_timeout = left - spec.connect_timeout;
    spec.max_body_bytes = 16 * 1024;
    return HttpExchange(base, spec);
  }

 private:
  Clock::time_point end_;
};

std::string Join(const std::string& prefix, const std::string& path) {
  std::string p = prefix;
  while (!p.empty() && p.back() == '/') p.pop_back();
  return p + path;
}

bool ProbeAws(const HttpUrl& base, const Budget& b, CloudInstance* out) {
  HttpRequestSpec put;
  put.put = true;
  put.target = Join(base.target, "/latest/api/token");
  put.headers = {{"X-aws-ec2-metadata-token-ttl-seconds", "60"}};
  const HttpAnswer token = b.Ask(base, put);
  if (!token.ok || token.status != 200 || token.body.empty()) return false;
  HttpRequestSpec get;
  get.headers = {{"X-aws-ec2-metadata-token", core::csv::Trim(token.body)}};
  get.target = Join(base.target, "/latest/meta-data/instance-type");
  const HttpAnswer type = b.Ask(base, get);
  if (!type.ok || type.status != 200) return false;
  out->provider = "aws";
  out->instance_type = core::csv::Trim(type.body);
  out->source = "AWS instance metadata (IMDSv2)";
  get.target = Join(base.target, "/latest/meta-data/instance-life-cycle");
  const HttpAnswer life = b.Ask(base, get);
  if (life.ok && life.status == 200) out->purchase = AwsLifeCycle(life.body);
  return true;
}

bool ProbeGcp(const HttpUrl& base, const Budget& b, CloudInstance* out) {
  HttpRequestSpec get;
  get.headers = {{"Metadata-Flavor", "Google"}};
  get.target = Join(base.target, "/computeMetadata/v1/instance/machine-type");
  const HttpAnswer type = b.Ask(base, get);
  if (!type.ok || type.status != 200 || type.Header("Metadata-Flavor") != "Google") return false;
  out->provider = "gcp";
  out->instance_type = GcpMachineType(type.body);
  out->source = "GCP instance metadata";
  get.target = Join(base.target, "/computeMetadata/v1/instance/scheduling/provisioning-model");
  HttpAnswer sched = b.Ask(base, get);
  if (!(sched.ok && sched.status == 200)) {
    get.target = Join(base.target, "/computeMetadata/v1/instance/scheduling/preemptible");
    sched = b.Ask(base, get);
  }
  if (sched.ok && sched.status == 200) out->purchase = GcpScheduling(sched.body);
  return !out->instance_type.empty();
}

bool ProbeAzure(const HttpUrl& base, const Budget& b, CloudInstance* out) {
  HttpRequestSpec get;
  get.headers = {{"Metadata", "true"}};
  get.target = Join(base.target, "/metadata/instance/compute?api-version=2021-02-01");
  const HttpAnswer a = b.Ask(base, get);
  if (!a.ok || a.status != 200) return false;
  std::string size;
  std::optional<core::Purchase> purchase;
  if (!AzureCompute(a.body, &size, &purchase)) return false;
  out->provider = "azure";
  out->instance_type = size;
  out->purchase = purchase;
  out->source = "Azure instance metadata";
  return true;
}

bool AskMetadata(const CloudDetectOptions& o, std::string* why, CloudInstance* out) {
  std::string url = o.url;
  std::string hint;
  if (url == "off") {
    *why = "metadata off (CLOUDTUNE_METADATA_URL=off)";
    return false;
  }
  if (url == "auto") {
    hint = CloudFromDmi(o.dmi_dir);
    if (hint.empty()) {
      *why = "not a cloud VM (DMI)";
      return false;
    }
    url = "http://169.254.169.254";
  }
  HttpUrl base;
  if (!ParseHttpUrl(url, &base, why)) return false;
  if (base.target == "/") base.target.clear();
  const Budget budget(o.budget_seconds);
  using Probe = bool (*)(const HttpUrl&, const Budget&, CloudInstance*);
  std::vector<std::pair<std::string, Probe>> probes = {
      {"aws", ProbeAws}, {"gcp", ProbeGcp}, {"azure", ProbeAzure}};
  std::stable_partition(probes.begin(), probes.end(),
                        [&](const auto& p) { return p.first == hint; });
  for (const auto& [name, probe] : probes) {
    if (!budget.Left()) break;
    CloudInstance got;
    if (probe(base, budget, &got)) {
      *out = got;
      return true;
    }
  }
  *why = "no metadata answer from " + url + " within " +
         std::to_string(static_cast<int>(o.budget_seconds * 1000)) + " ms";
  return false;
}

}  // namespace

std::string CloudFromDmi(const std::string& dmi_dir) {
  const std::string vendor = Lower(ReadSmallFile(dmi_dir + "/sys_vendor"));
  const std::string product = Lower(ReadSmallFile(dmi_dir + "/product_name"));
  const std::string bios = Lower(ReadSmallFile(dmi_dir + "/bios_vendor"));
  const std::string tag = ReadSmallFile(dmi_dir + "/chassis_asset_tag");
  if (vendor.find("amazon") != std::string::npos || bios.find("amazon") != std::string::npos)
    return "aws";
  if (vendor.find("google") != std::string::npos || product.find("google") != std::string::npos)
    return "gcp";
  // Azure's VMs carry this asset tag (Hyper-V hosts elsewhere do not).
  if (tag == "7783-7084-3265-9085-8269-3286-77") return "azure";
  return "";
}

std::optional<core::Purchase> AwsLifeCycle(const std::string& body) {
  const std::string v = Lower(core::csv::Trim(body));
  if (v == "spot") return core::Purchase::kSpot;
  if (v == "on-demand" || v == "normal" || v == "scheduled") return core::Purchase::kOnDemand;
  return std::nullopt;
}

std::string GcpMachineType(const std::string& body) {
  const std::string v = core::csv::Trim(body);
  const auto slash = v.find_last_of('/');
  return slash == std::string::npos ? v : v.substr(slash + 1);
}

std::optional<core::Purchase> GcpScheduling(const std::string& body) {
  const std::string v = Lower(core::csv::Trim(body));
  if (v == "spot" || v == "true") return core::Purchase::kSpot;
  if (v == "standard" || v == "false") return core::Purchase::kOnDemand;
  return std::nullopt;
}

bool AzureCompute(const std::string& body, std::string* vm_size,
                  std::optional<core::Purchase>* purchase) {
  const auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("vmSize") || !j["vmSize"].is_string()) return false;
  *vm_size = j["vmSize"].get<std::string>();
  purchase->reset();
  if (j.contains("priority") && j["priority"].is_string()) {
    const std::string p = Lower(j["priority"].get<std::string>());
    if (p == "spot" || p == "low") *purchase = core::Purchase::kSpot;
    if (p == "regular") *purchase = core::Purchase::kOnDemand;
  }
  return !vm_size->empty();
}

// Instance type names are short words of letters, digits, '.', '_' and '-' (m5.xlarge,
// n1-standard-8, Standard_NC4as_T4_v3); anything else is not an answer to the question.
bool PlausibleTypeName(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (unsigned char c : s)
    if (!std::isalnum(c) && c != '.' && c != '_' && c != '-') return false;
  return true;
}

CloudInstance DetectCloudInstance(const CloudDetectOptions& o, const search::Catalog& catalog) {
  CloudInstance out;
  std::string why;
  if (AskMetadata(o, &why, &out)) {
    if (catalog.Find(out.instance_type) >= 0) return out;
    out.note = PlausibleTypeName(out.instance_type)
                   ? out.source + " says '" + out.instance_type + "', which is not in the catalog"
                   : out.source + " answered " + std::to_string(out.instance_type.size()) +
                         " byte(s) that are not an instance type name";
    out.instance_type.clear();
  } else {
    out.note = why;
  }
  if (!o.gpu_name.empty()) {
    const std::string type = search::InstanceForGpu(catalog, o.gpu_name, o.gpus_per_node);
    if (!type.empty()) {
      out.instance_type = type;
      out.provider = "cuda";
      out.source = "CUDA device '" + o.gpu_name + "' x " + std::to_string(o.gpus_per_node) +
                   " (cheapest catalog type with that GPU)";
      return out;
    }
    out.note += "; CUDA device '" + o.gpu_name + "' matches no catalog GPU";
  }
  return out;
}

}  // namespace cloudtune::runtime

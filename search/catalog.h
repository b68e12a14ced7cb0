// The instance catalog: GPU instance types with prices, spot revocation rates and GPU specs.
//
// A default catalog derived from ../shared/data/catalog (see data/catalog/README.md) is embedded
// in the binary. A user catalog CSV (`--catalog FILE`, CLOUDTUNE_CATALOG) replaces or extends it.
//
// Catalog CSV (columns read by header, any order; one row per instance type):
//   required: cloud, region, instance_type, gpu_model, gpus, ondemand_usd_per_hour
//   optional: spot_usd_per_hour (empty = no spot offer), gpu_memory_gib, vcpus, memory_gib,
//             network_gbps, revocation_per_hour, interruption_band ("<5%", "5-10%", "10-15%",
//             "15-20%", ">20%": an AWS Spot Advisor band)
// GPU spec CSV: gpu_model, fp32_tflops, fp16_tflops, fp16_nontensor_tflops, memory_gib,
//   memory_bandwidth_gbs (all but gpu_model may be empty).
#pragma once

#include <iosfwd>
#include <map>
#include <string>
#include <vector>

#include "estimator/throughput_types.h"

namespace cloudtune::search {

// Defaults for values the data does not give. They are never presented as measured: each
// InstanceType records whether its rate/bandwidth came from data or from these.
struct CatalogOptions {
  // Revocation rate per hour of a spot instance with no band (AWS) and of GCP/Azure spot VMs
  // (neither publishes per-type data). 0.0025/h ~ 1.8% of instances revoked per month.
  double default_revocation_per_hour = 0.0025;
  // Network bandwidth (Gbps) assumed where the catalog has none (GCP, Azure).
  double default_network_gbps = 10.0;
  // Midpoint (share per month) used for the open-ended ">20%" band.
  double open_band_midpoint = 0.30;
  bool IsValid(std::string* error) const;
};

struct GpuSpec {
  std::string model;
  double fp32_tflops = 0;           // 0 = unknown
  double fp16_tflops = 0;           // dense tensor-core FP16; 0 = unknown
  double memory_gib = 0;            // 0 = unknown
  double memory_bandwidth_gbs = 0;  // 0 = unknown
  // Best-known training TFLOPS (fp16 tensor, else fp16 non-tensor, else fp32); 0 = unknown.
  double train_tflops = 0;
};

struct InstanceType {
  std::string cloud, region, name, gpu_model;
  int gpus = 0;                      // GPUs per instance
  double gpu_memory_gib = 0;         // per GPU; 0 = unknown
  int vcpus = 0;                     // 0 = unknown
  double memory_gib = 0;             // 0 = unknown
  double network_gbps = 0;           // per instance
  bool network_measured = false;     // false: network_gbps is CatalogOptions' default
  double ondemand_per_hour = 0;      // USD per instance-hour
  double spot_per_hour = -1;         // USD per instance-hour; < 0 = no spot offer
  double revocation_per_hour = 0;    // spot revocation rate per instance (events per hour)
  bool revocation_measured = false;  // true: from an explicit rate or a Spot Advisor band
  std::string revocation_source;     // "spot-advisor <5%", "catalog", "default"
  bool has_spot() const { return spot_per_hour >= 0; }
};

// What a catalog's prices count. kUsd: US dollars (per instance-hour). kGpuHours: the job's own
// machines, which no catalog prices, at 1 per GPU-hour, so that every cost reads as GPU-hours
// (the plugin's "local" instance type).
enum class CostUnit { kUsd, kGpuHours };
const char* CostUnitName(CostUnit u);  // "usd", "gpu_hours" (the recommendation's "cost_unit")
// A cost as reasons, log lines and tables print it: "$1.234" ("$12.34" from 10), or "1.234 GPU-h"
// ("12.34 GPU-h").
std::string FormatCost(double x, CostUnit u);

class Catalog {
 public:
  std::vector<InstanceType> types;
  std::map<std::string, GpuSpec> gpus;  // by model name
  std::string source;                   // where it came from (embedded snapshot or file paths)
  CostUnit cost_unit = CostUnit::kUsd;  // what ondemand_per_hour and spot_per_hour count

  // Index of the type named `name`, or -1.
  int Find(const std::string& name) const;
  const GpuSpec* Gpu(const std::string& model) const;
};

// Converts a monthly interrupted share p (0..1) into a constant hourly rate: -ln(1-p)/730.
double RevocationRateFromMonthlyShare(double p);
// Monthly share for a Spot Advisor band label (midpoint; ">20%" -> open_band_midpoint).
// Throws cloudtune::InputError naming `where` for an unknown label.
double BandMidpoint(const std::string& band, const CatalogOptions& options,
                    const std::string& where);

// Parses GPU specs. Throws cloudtune::InputError "NAME:LINE: MODEL: FIELD: what".
std::map<std::string, GpuSpec> ParseGpuSpecs(std::istream& in, const std::string& name);

// Parses instance rows against known GPU specs. A row may name a GPU that `gpus` does not know
// (an on-premises or newer GPU) when it gives the GPU's figures in the optional columns
// `gpu_fp32_tflops` (dense FP32 TFLOPS of one GPU) and/or `gpu_memory_bandwidth_gbs` (GB/s), with
// `gpu_memory_gib`; later rows may name it too, and the new specs are added to `*added` (when not
// null) for the throughput model's priors (HardwareOf). For a GPU `gpus` knows these columns are
// not read. Throws cloudtune::InputError "NAME:LINE: TYPE: FIELD: what" on a missing
// column/value, a non-number, a negative price, rate or figure, a duplicate type, or a GPU model
// neither known nor given figures.
std::vector<InstanceType> ParseInstances(std::istream& in, const std::string& name,
                                         const std::map<std::string, GpuSpec>& gpus,
                                         const CatalogOptions& options = {},
                                         std::map<std::string, GpuSpec>* added = nullptr);

// The embedded default catalog.
// The catalog type for a job on `gpus_per_node` GPUs named `device_name` (the CUDA device name,
// e.g. "Tesla T4", "NVIDIA A100-SXM4-80GB"): the GPU model whose name's parts all appear in the
// device name (the most specific one: "A100-80GB" before "A100"), then among its types the one with
// the fewest GPUs >= gpus_per_node, then the cheapest on demand. "" when nothing matches.
std::string InstanceForGpu(const Catalog& catalog, const std::string& device_name,
                           int gpus_per_node);

const Catalog& DefaultCatalog();
// The names of the catalog's types that are on one of `clouds` (e.g. "aws") and have one of `gpus`
// (GPU models, e.g. "T4"), both case-insensitive; an empty list does not restrict. Throws
// cloudtune::InputError naming a cloud or GPU model that no type of the catalog has, with those it
// has, or saying that no type is on those clouds with those GPUs.
std::vector<std::string> TypesOn(const Catalog& catalog, const std::vector<std::string>& clouds,
                                 const std::vector<std::string>& gpus);
// What the catalog knows of the hardware of `type` (for the throughput model across types): an
// instance type's name gives its GPU's specs and its network bandwidth (when measured, not the
// default); otherwise a GPU model's name (e.g. "T4", "a100"; case-insensitive) gives the GPU's
// specs. Unknown (all 0) when neither matches.
estimator::Hardware HardwareOf(const Catalog& catalog, const std::string& type);
std::string DefaultCatalogSnapshot();  // e.g. "shared/data/catalog 2026-11 ..."

// Loads a user catalog file on top of `base`: extend = true replaces same-named types and adds new
// ones; extend = false starts from an empty list (GPU specs are kept). Throws InputError.
Catalog LoadCatalog(const std::string& path, const Catalog& base, bool extend,
                    const CatalogOptions& options = {});
// The catalog a job or the CLI uses: DefaultCatalog() when `path` is empty; a path prefixed with
// "+" extends the default, any other replaces it. (The CLOUDTUNE_CATALOG setting reaches it through
// runtime::Options or the CLI's --catalog default.)
Catalog ResolveCatalog(const std::string& path, const CatalogOptions& options = {});

}  // namespace cloudtune::search

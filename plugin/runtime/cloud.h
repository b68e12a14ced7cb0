// Where the job runs, found without being told: the cloud's instance metadata service (AWS IMDSv2
// instance type and life cycle; GCP machine type and spot/preemptible scheduling; Azure vmSize and
// priority), else the CUDA device's name mapped to the catalog's GPU, else "local" (prices
// unknown). CLOUDTUNE_INSTANCE_TYPE overrides all of it. The metadata service is asked only on a
// machine whose firmware (DMI) says it is a cloud VM, or at an explicit CLOUDTUNE_METADATA_URL, and
// everything is bounded by one time budget (about 200 ms).
#pragma once

#include <optional>
#include <string>

#include "estimator/core/types.h"
#include "search/catalog.h"

namespace cloudtune::runtime {

struct CloudInstance {
  std::string instance_type;               // the catalog's name; "" = not found
  std::optional<core::Purchase> purchase;  // spot / on-demand when the cloud says
  std::string provider;                    // "aws", "gcp", "azure", "cuda" or ""
  std::string source;                      // what told us, for the log and the start record
  std::string note;                        // why it is unknown, or what did not match
};

struct CloudDetectOptions {
  // CLOUDTUNE_METADATA_URL: "auto" = http://169.254.169.254 when the DMI vendor is a cloud's;
  // "off" = never ask; or an http:// base URL (e.g. a test's fake server) asked in every format.
  std::string url = "auto";
  // Time budget for all the metadata requests together, seconds.
  double budget_seconds = 0.2;
  // Where the DMI identification files are (sys_vendor, product_name, chassis_asset_tag).
  std::string dmi_dir = "/sys/class/dmi/id";
  // The CUDA device name (e.g. "Tesla T4"), "" when the job does not run on a GPU.
  std::string gpu_name;
  // GPUs per machine of the job (for the CUDA mapping).
  int gpus_per_node = 1;
};

// Asks what the options allow. Never throws; at most about budget_seconds.
CloudInstance DetectCloudInstance(const CloudDetectOptions& options,
                                  const search::Catalog& catalog);

// The cloud a DMI vendor string names ("aws", "gcp", "azure"), or "" (not a cloud VM).
std::string CloudFromDmi(const std::string& dmi_dir);

// Interprets metadata answers (exposed for tests): the AWS life cycle "spot"/"on-demand"; the GCP
// machine-type path ".../machineTypes/NAME" and provisioning model "SPOT"/"STANDARD" (or
// preemptible "TRUE"); the Azure compute JSON {"vmSize","priority":"Spot"|"Low"|"Regular"}.
std::optional<core::Purchase> AwsLifeCycle(const std::string& body);
std::string GcpMachineType(const std::string& body);
std::optional<core::Purchase> GcpScheduling(const std::string& body);
bool AzureCompute(const std::string& body, std::string* vm_size,
                  std::optional<core::Purchase>* purchase);

}  // namespace cloudtune::runtime

// The smallest training loop around an installed cloudtune: Init, a few steps, Shutdown. No
// tensors: only the calls every job makes. Prints whether the plugin was on; with CLOUDTUNE unset
// it must stay off, with CLOUDTUNE=1 it writes the sidecar named by CLOUDTUNE_SIDECAR.
#include <cloudtune/cloudtune.h>

#include <cstdio>

int main() {
  cloudtune::JobInfo job;
  job.rank = 0;
  job.world_size = 1;
  job.num_nodes = 1;
  job.local_bsz = 32;
  const bool on = cloudtune::Init(job);
  for (int step = 0; step < 5; ++step) {
    cloudtune::StepBegin();
    cloudtune::StepEnd(job.local_bsz, 1);
  }
  const bool enabled = cloudtune::Enabled();
  cloudtune::Shutdown();
  std::printf("consumer: init=%d enabled=%d\n", on ? 1 : 0, enabled ? 1 : 0);
  return on == enabled ? 0 : 1;
}

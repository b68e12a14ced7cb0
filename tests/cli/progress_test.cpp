// The progress indicator: a rewritten line on a terminal, cleared at the end; nothing at all when
// stderr is not a terminal (the CLI tests check that its outputs stay clean then).
#include "cli/progress.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "cli/cli_runner.h"

namespace cloudtune::cli {
namespace {

TEST(Progress, RewritesOneLineAndClearsIt) {
  ::testing::internal::CaptureStderr();
  {
    Progress p("replay", 3, /*enabled=*/true);
    p.Step(1, "cifar10 seed 1");
    p.Step(2, "imagenet seed 1");
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("\rreplay: cifar10 seed 1 (1/3)"), std::string::npos) << err;
  EXPECT_NE(err.find("\rreplay: imagenet seed 1 (2/3)"), std::string::npos) << err;
  EXPECT_EQ(err.back(), '\r');  // cleared: the next output starts at the line's beginning
  EXPECT_EQ(err.find('\n'), std::string::npos);
}

TEST(Progress, SilentOffATerminal) {
  ::testing::internal::CaptureStderr();
  {
    Progress p("fit", 2, /*enabled=*/false);
    p.Step(1, "reading");
  }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

// Under a pseudo-terminal (util-linux `script`) the CLI shows it; in a pipe it does not.
TEST(Progress, TheCliShowsItOnlyOnATerminal) {
  if (std::system("command -v script >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "util-linux 'script' is not installed";
  const std::string trace =
      std::string(CLOUDTUNE_SOURCE_DIR) + "/tests/data/g4dn_cifar10_configs.csv";
  const std::string out = cli_test::TmpDir() + "/progress_tty.txt";
  const std::string cmd = "script -qfec \"" + std::string(CLOUDTUNE_BIN_DIR) + "/cloudtune fit " +
                          trace + " -o " + cli_test::TmpDir() + "/m.json\" /dev/null > " + out +
                          " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  EXPECT_NE(cli_test::Slurp(out).find("fit: fitting"), std::string::npos) << cli_test::Slurp(out);
  const auto piped = cli_test::RunCli("fit " + trace + " -o " + cli_test::TmpDir() + "/m2.json");
  ASSERT_EQ(piped.status, 0) << piped.err;
  EXPECT_EQ(piped.err.find("fit: fitting"), std::string::npos) << piped.err;
}

}  // namespace
}  // namespace cloudtune::cli

// What a replay's sandbox reports the job made, read from the overlay's upper directories
// (tools/common/Sandbox.h). The skeleton stands in for directories with mounts below (/tmp
// while another test has a tmpfs there): its set-up entries are never the job's, even when
// the machine's own entry is removed by another process while the job runs (seen in CI: a
// concurrent test's temporary directories listed as made by the replayed job).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <string>

#include "support/SampleTrace.h"
#include "tools/common/Sandbox.h"

namespace dlrr::tools {
namespace {

TEST(OverlayChanges, SkeletonPlaceholdersAreNotTheJobsEvenOnceGoneHere) {
  std::string root = testing::makeTempDir("overlay");
  std::string skeleton = root + "/skeleton";
  ::mkdir(skeleton.c_str(), 0755);
  // Neither exists on this machine: one stood for an entry at set-up (removed since), the other
  // the job made.
  const std::string gone = "/dlrr-test-removed-while-the-job-ran", made = "/dlrr-test-made-by-the-job";
  ::mkdir((skeleton + gone).c_str(), 0755);
  ::mkdir((skeleton + made).c_str(), 0755);
  ::mkdir((skeleton + "/tmp").c_str(), 0755);  // a placeholder whose entry is still here

  OverlayLayer layer{"/", skeleton, true, {gone, "/tmp"}};
  std::sort(layer.placeholders.begin(), layer.placeholders.end());
  OverlayChanges c = readOverlayChanges({layer});
  EXPECT_EQ(c.dirs, std::vector<std::string>{made});
  EXPECT_TRUE(c.written.empty());

  layer.placeholders.clear();  // without them, the removed entry is taken for the job's
  c = readOverlayChanges({layer});
  std::sort(c.dirs.begin(), c.dirs.end());
  EXPECT_EQ(c.dirs, (std::vector<std::string>{made, gone}));
  testing::removeTree(root);
}

}  // namespace
}  // namespace dlrr::tools

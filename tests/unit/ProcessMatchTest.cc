#include <gtest/gtest.h>

#include "replayer/ProcessMatch.h"

namespace dlrr {
namespace {

const char* kSpawn = "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=16, pipe_handle=18)";

TEST(ProcessMatch, SameProgramAndArgumentsWhateverThePathToTheInterpreter) {
  EXPECT_TRUE(sameCommand({"/usr/bin/python3", "train.py", "--lr", "1"}, {"python3", "train.py", "--lr", "1"}));
  EXPECT_FALSE(sameCommand({"python3", "train.py", "--lr", "1"}, {"python3", "train.py", "--lr", "2"}));
  EXPECT_FALSE(sameCommand({"python3", "train.py"}, {"python3", "train.py", "-v"}));
  EXPECT_FALSE(sameCommand({}, {}));
}

TEST(ProcessMatch, MultiprocessingChildDescriptorsAreNotIdentity) {
  std::vector<std::string> rec = {"/usr/bin/python3", "-B", "-c", kSpawn, "--multiprocessing-fork"};
  std::vector<std::string> rep = {
      "/usr/bin/python3", "-B", "-c",
      "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=14, pipe_handle=116)",
      "--multiprocessing-fork"};
  EXPECT_TRUE(sameCommand(rec, rep));
  EXPECT_TRUE(isMultiprocessingChild(rec));
  // Other code is still compared as written: numbers in a job's own -c or arguments matter.
  EXPECT_FALSE(sameCommand({"python3", "-c", "train(lr=1)"}, {"python3", "-c", "train(lr=2)"}));
  EXPECT_FALSE(sameCommand({"python3", "train.py", "--seed", "1"}, {"python3", "train.py", "--seed", "2"}));
  EXPECT_FALSE(
      sameCommand(rec, {"/usr/bin/python3", "-B", "-c", "from multiprocessing.resource_tracker import main;main(15)",
                        "--multiprocessing-fork"}));
  EXPECT_FALSE(isMultiprocessingChild({"python3", "train.py"}));
}

}  // namespace
}  // namespace dlrr

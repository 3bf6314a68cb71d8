// The replayed job's environment: recorded values, redacted ones from the replaying user,
// dlrr's library and hook first, the replay settings (issue 14: the command split).
#include <capnp/message.h>
#include <gtest/gtest.h>

#include <map>

#include "format/Redact.h"
#include "replayer/ReplaySession.h"
#include "tools/dlreplay/ReplayEnvironment.h"

namespace dlrr {
namespace {

struct Recorded {
  capnp::MallocMessageBuilder m;
  schema::TraceInfo::Builder ti = m.initRoot<schema::TraceInfo>();
  Recorded(const std::vector<std::pair<std::string, std::string>>& env, const std::vector<std::string>& redacted) {
    auto e = ti.initEnv(static_cast<unsigned>(env.size()));
    for (size_t i = 0; i < env.size(); ++i) {
      e[static_cast<unsigned>(i)].setKey(env[i].first);
      e[static_cast<unsigned>(i)].setValue(env[i].second);
    }
    auto r = ti.initRedactedNames(static_cast<unsigned>(redacted.size()));
    for (size_t i = 0; i < redacted.size(); ++i) r.set(static_cast<unsigned>(i), redacted[i]);
  }
};

EnvLookup lookupIn(const std::map<std::string, std::string>& ours) {
  return [&ours](const char* k) -> const char* {
    auto it = ours.find(k);
    return it == ours.end() ? nullptr : it->second.c_str();
  };
}

// A function's static: an exception while it is made fails the test, not the binary's start.
const InstallPaths& paths() {
  static const InstallPaths v{"/opt/dlrr/lib/dlrr/libdlrr.so", "/opt/dlrr/lib/dlrr/python"};
  return v;
}

TEST(ReplayEnvironment, RecordedValuesWithRedactedOnesFromOurs) {
  Recorded rec({{"HOME", "/home/rec"},
                {"API_TOKEN", kRedacted},
                {"DB_PASSWORD", kRedacted},
                {"TERM", "dumb"},
                {"LD_PRELOAD", "/usr/lib/libjemalloc.so"},
                {"PYTHONPATH", ""}},
               {"API_TOKEN", "DB_PASSWORD"});
  std::map<std::string, std::string> ours = {{"API_TOKEN", "mine"}, {"TERM", "xterm"}, {"HOME", "/home/me"}};
  std::string note;
  Environment env = recordedEnvironment(rec.ti.asReader(), paths(), lookupIn(ours), note);
  EXPECT_EQ(env["HOME"], "/home/rec");      // the recording's, not ours
  EXPECT_EQ(env["API_TOKEN"], "mine");      // redacted: ours
  EXPECT_EQ(env.count("DB_PASSWORD"), 0u);  // redacted and we have none: unset, never "<redacted>"
  EXPECT_EQ(env["TERM"], "xterm");          // the terminal is ours
  EXPECT_EQ(env["LD_PRELOAD"], paths().library + ":/usr/lib/libjemalloc.so");
  EXPECT_EQ(env["PYTHONPATH"], paths().pythonHook);  // an empty recorded value adds no ":"
  EXPECT_EQ(env["CUDA_INJECTION64_PATH"], paths().library);
  EXPECT_TRUE(note.empty());
}

TEST(ReplayEnvironment, AnotherCudaInjectionLibraryIsKeptAndSaid) {
  Recorded rec({{"CUDA_INJECTION64_PATH", "/opt/nsight/libinject.so"}}, {});
  std::map<std::string, std::string> ours;
  std::string note;
  Environment env = recordedEnvironment(rec.ti.asReader(), paths(), lookupIn(ours), note);
  EXPECT_EQ(env["CUDA_INJECTION64_PATH"], "/opt/nsight/libinject.so");
  EXPECT_NE(note.find("GPU capture off"), std::string::npos);
}

TEST(ReplayEnvironment, SettingsReplaceWhatTheRecordingHad) {
  Environment env = {{"DLRR_STATUS_FD", "5:123"},
                     {"DLRR_JUMP_STEP", "9"},
                     {"DLRR_DEBUG", "pdb"},
                     {"DLRR_DIST_REPLAY", "all"},
                     {"RANK", "0"}};
  ReplaySettings s;
  s.trace = "/t/run.dlrr";
  s.stream = "rank1";
  s.rankAlone = true;
  s.rankEnv = {{"RANK", "1"}, {"MASTER_ADDR", kRedacted}};
  s.until = "nan";
  s.reportPath = "/tmp/r";
  s.library = paths().library;
  applyReplaySettings(env, s);
  EXPECT_EQ(env["DLRR_MODE"], "replay");
  EXPECT_EQ(env["DLRR_TRACE"], "/t/run.dlrr");
  EXPECT_EQ(env["DLRR_REPLAY_STREAM"], "rank1");
  EXPECT_EQ(env["DLRR_DIST_REPLAY"], "alone");
  EXPECT_EQ(env["RANK"], "1");
  EXPECT_EQ(env.count("MASTER_ADDR"), 0u);  // a redacted launcher value is not passed on
  EXPECT_EQ(env["DLRR_UNTIL"], "nan");
  EXPECT_EQ(env["DLRR_REPORT"], "/tmp/r");
  EXPECT_EQ(env.count("DLRR_JUMP_STEP"), 0u);  // the recording's (or a stale) value never leaks in
  EXPECT_EQ(env.count("DLRR_DEBUG"), 0u);
  EXPECT_EQ(env.count("DLRR_STATUS_FD"), 0u);
  EXPECT_EQ(env.count("DLRR_PROGRESS"), 0u);

  ReplaySettings all;
  all.stream = kEachRank;
  all.allRanks = true;
  all.jumpStep = 12;
  all.debug = "gdb";
  all.progress = true;
  applyReplaySettings(env, all);
  EXPECT_EQ(env["DLRR_DIST_REPLAY"], "all");
  EXPECT_EQ(env["DLRR_JUMP_STEP"], "12");
  EXPECT_EQ(env["DLRR_DEBUG"], "gdb");
  EXPECT_EQ(env["DLRR_PROGRESS"], "1");
}

TEST(ReplayEnvironment, StringsAreOrderedByName) {
  Environment env = {{"B", "2"}, {"A", "1=x"}};
  EXPECT_EQ(environmentStrings(env), (std::vector<std::string>{"A=1=x", "B=2"}));
}

// Issue 27: a foreign trace's environment does not choose the code the replay loads.
TEST(ReplayEnvironment, AForeignTracesExecutionVariablesAreOurs) {
  Recorded r({{"PYTHONPATH", "/attacker/lib"},
              {"LD_LIBRARY_PATH", "/attacker/so"},
              {"PATH", "/attacker/bin"},
              {"OMP_NUM_THREADS", "4"}},
             {});
  std::map<std::string, std::string> ours = {{"PATH", "/usr/bin"}};
  std::string note;
  std::vector<std::string> withheld;
  Environment env = recordedEnvironment(r.ti.asReader(), paths(), lookupIn(ours), note, false, &withheld);
  EXPECT_EQ(env["PATH"], "/usr/bin");
  EXPECT_EQ(env["PYTHONPATH"], paths().pythonHook);  // the hook alone
  EXPECT_EQ(env.count("LD_LIBRARY_PATH"), 0u);
  EXPECT_EQ(env["OMP_NUM_THREADS"], "4");  // the rest is the recording's
  EXPECT_EQ(withheld.size(), 3u);
  // Trusted (the user's own trace, or --yes): the recording's.
  env = recordedEnvironment(r.ti.asReader(), paths(), lookupIn(ours), note);
  EXPECT_EQ(env["PYTHONPATH"], paths().pythonHook + ":/attacker/lib");
}

}  // namespace
}  // namespace dlrr

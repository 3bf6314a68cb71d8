// dlpreflight's pure parts: its option parser, the facts the hook writes as runtime items,
// the verdict and the report; and tools/common/ChildProcess with real children.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cerrno>
#include <string>
#include <vector>

#include "tools/common/ChildProcess.h"
#include "tools/common/ExitCodes.h"
#include "tools/dlpreflight/PreflightOptions.h"
#include "tools/dlpreflight/PreflightReport.h"

namespace dlrr {
namespace {

using Argv = std::vector<std::string>;

std::string usageMessage(const Argv& args) {
  try {
    parsePreflightOptions(args);
  } catch (const tools::UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(PreflightOptions, ParsesAndRejects) {
  auto o = parsePreflightOptions({"-k", "3", "--json", "-o", "pf.trace", "--", "python3", "train.py", "-k", "9"});
  EXPECT_EQ(o.batches, 3);
  EXPECT_TRUE(o.json);
  EXPECT_EQ(o.output, "pf.trace");
  EXPECT_EQ(o.command, (Argv{"python3", "train.py", "-k", "9"}));
  EXPECT_EQ(parsePreflightOptions({"--", "x"}).batches, 2);
  EXPECT_EQ(parsePreflightOptions({"--batches=7", "--", "x"}).batches, 7);
  EXPECT_EQ(usageMessage({"-k", "0", "--", "x"}), "--batches must be an integer from 1 to 1000000 (got '0')");
  EXPECT_EQ(usageMessage({"-k", "+2", "--", "x"}), "--batches must be an integer from 1 to 1000000 (got '+2')");
  EXPECT_EQ(usageMessage({"-k"}), "option -k needs a value");
  EXPECT_EQ(usageMessage({"--output=", "--", "x"}), "--output needs a path");
  EXPECT_EQ(usageMessage({"--frob", "--", "x"}), "unknown option '--frob'");
  EXPECT_EQ(usageMessage({"python3"}), "missing '--' before the command (write: dlpreflight [options] -- python3 ...)");
  EXPECT_EQ(usageMessage({"--"}), "no command after '--'");
  EXPECT_EQ(usageMessage({}), "missing '--' and the command to run");
  EXPECT_EQ(parsePreflightOptions({"--help", "--bogus"}).action, PreflightOptions::Action::Help);
}

std::map<std::string, std::string> sampleRuntime() {
  std::map<std::string, std::string> rt = {
      {"preflight.k", "2"},
      {"python.version", "3.11"},  // not ours: ignored
      {"preflight.loop.0", "cut: lm.py:69 after 2 updates"},
      {"preflight.save.0", "torch.save /out/ckpt/e0.pt ok (between passes)"},
      {"preflight.path.0", "write /out/ckpt/e0.pt"},
      {"preflight.path.1", "read /data/with space/x.json"},
      {"preflight.env.0", "DATA_DIR unset train.py:10"},
      {"preflight.peak_rss_kib", "2048"},
      {"preflight.pass.x", "garbage"},  // malformed: skipped
  };
  // 12 passes: 10 and 11 sort before 2 as text; they must come out in number order.
  for (int i = 0; i < 12; ++i)
    rt["preflight.pass." + std::to_string(i)] =
        "loader=" + std::to_string(i % 2) + " dataset=FakeData phase=" + (i % 2 ? "evaluation" : "training") +
        " batches=2 of=" + (i % 2 ? "63" : "500") + " cut=1 updates=" + (i % 2 ? "0" : "2") +
        " peak_rss_kib=" + std::to_string(1000 + i);
  return rt;
}

TEST(PreflightReport, ParsesTheHooksFactsInNumberOrder) {
  auto f = preflight::parseFacts(sampleRuntime());
  EXPECT_EQ(f.k, 2);
  ASSERT_EQ(f.passes.size(), 12u);
  for (size_t i = 0; i < f.passes.size(); ++i) EXPECT_EQ(f.passes[i].index, static_cast<int64_t>(i));
  EXPECT_EQ(f.passes[11].peakRssKib, 1011u);
  EXPECT_EQ(f.passes[1].phase, "evaluation");
  EXPECT_EQ(f.passes[0].of, 500);
  ASSERT_EQ(f.paths.size(), 2u);
  EXPECT_EQ(f.paths[1].how, "read");
  EXPECT_EQ(f.paths[1].path, "/data/with space/x.json");
  ASSERT_EQ(f.env.size(), 1u);
  EXPECT_FALSE(f.env[0].set);
  EXPECT_EQ(f.env[0].where, "train.py:10");
  EXPECT_EQ(f.peakRssKib, 2048u);
  auto lines = preflight::phaseLines(f);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].phase, "training");
  EXPECT_EQ(lines[0].passes, 6);
  EXPECT_EQ(lines[0].peakRssKib, 1010u);
  EXPECT_TRUE(lines[1].cut);
}

TEST(PreflightReport, GpuPeaksPerPhaseAreExactOnlyWhereANewPeakWasReached) {
  std::map<std::string, std::string> rt = {
      {"preflight.k", "2"},
      {"preflight.pass.0",
       "loader=0 dataset=D phase=training batches=2 of=9 cut=1 updates=2 peak_rss_kib=1 "
       "batch_size=8 gpu_peak=3000000000 gpu_new_peak=1"},
      {"preflight.pass.1",
       "loader=1 dataset=D phase=evaluation batches=2 of=9 cut=1 updates=0 peak_rss_kib=1 "
       "batch_size=8 gpu_peak=3000000000 gpu_new_peak=0"}};
  auto f = preflight::parseFacts(rt);
  auto lines = preflight::phaseLines(f);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].gpuPeak, 3000000000);
  EXPECT_EQ(lines[1].gpuPeak, -1);
  EXPECT_EQ(lines[1].gpuCeiling, 3000000000);
  triage::TriageInput in;
  triage::TriageResult t;
  std::string text = preflight::renderText(f, preflight::judge(f, in, t, 0), in, t, "tr", 1);
  EXPECT_NE(text.find(", GPU allocator peak 2.8 GiB"), std::string::npos) << text;
  EXPECT_NE(text.find(", GPU at most 2.8 GiB (no new allocator peak)"), std::string::npos) << text;
}

TEST(PreflightReport, AVerdictFollowsTheExitAndTheRecordedFailure) {
  auto f = preflight::parseFacts(sampleRuntime());
  triage::TriageInput in;
  triage::TriageResult t;
  auto ok = preflight::judge(f, in, t, 0);
  EXPECT_TRUE(ok.passed);
  EXPECT_EQ(ok.exitCode, 0);
  EXPECT_TRUE(ok.warnings.empty());

  auto exited = preflight::judge(f, in, t, 3);  // no failure recorded, yet not 0: a failure
  EXPECT_FALSE(exited.passed);
  EXPECT_EQ(exited.exitCode, 1);
  EXPECT_EQ(exited.verdict, "FAILED: the job exited with status 3");

  in.failure = triage::FailureRecord{};
  in.failure->kind = "exception";
  t.summary = "KeyError: 'top5'";
  t.where = "evaluation";
  auto failed = preflight::judge(f, in, t, 0);  // a recorded failure fails even at exit 0
  EXPECT_FALSE(failed.passed);
  EXPECT_EQ(failed.verdict, "FAILED: KeyError: 'top5' (evaluation)");

  preflight::Facts none;  // the hook never ran
  auto whole = preflight::judge(none, triage::TriageInput{}, t, 0);
  EXPECT_TRUE(whole.passed);
  ASSERT_EQ(whole.warnings.size(), 1u);
  EXPECT_NE(whole.warnings[0].find("not run in miniature"), std::string::npos);

  f.loops.push_back("not cut: train.py:12 (no line after the loop and no break to jump to); it ran to its end");
  EXPECT_EQ(preflight::judge(f, triage::TriageInput{}, t, 0).warnings.size(), 1u);
}

TEST(PreflightReport, ALoaderNeverIteratedIsNamedAndNotPassed) {
  auto rt = sampleRuntime();
  rt["preflight.unused.0"] = "dataset=ValSet where=train.py:52";
  auto f = preflight::parseFacts(rt);
  ASSERT_EQ(f.unused.size(), 1u);
  triage::TriageInput in;
  triage::TriageResult t;
  auto r = preflight::judge(f, in, t, 0);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.exitCode, kExitNotReached);
  EXPECT_EQ(r.verdict.rfind("INCOMPLETE: ", 0), 0u) << r.verdict;
  EXPECT_NE(r.verdict.find("a DataLoader of ValSet made at train.py:52 was never iterated"), std::string::npos);
  std::string text = preflight::renderText(f, r, in, t, "tr", 1);
  EXPECT_EQ(text.find("PASSED"), std::string::npos) << text;
  EXPECT_NE(preflight::renderJson(f, r, in, t, "tr", 1).find("\"unused_loaders\":[{\"dataset\":\"ValSet\""),
            std::string::npos);
}

TEST(PreflightReport, AFailureAfterACutEvaluationMayBeTheCuts) {
  auto f = preflight::parseFacts(sampleRuntime());  // the last pass began: evaluation, cut, 2 of 63
  triage::TriageInput in;
  in.failure = triage::FailureRecord{};
  triage::TriageResult t;
  t.summary = "ZeroDivisionError";
  EXPECT_EQ(preflight::judge(f, in, t, 0).cutCaveat,
            "may be caused by the cut: the evaluation saw 2 of 63 batches (loader 1, FakeData)");
  f.passes.pop_back();  // the last pass began is a training pass: no such note
  EXPECT_EQ(preflight::judge(f, in, t, 0).cutCaveat, "");
}

TEST(PreflightReport, LookupsInsideThePythonInstallationAreNotListedAsMissing) {
  auto f = preflight::parseFacts(sampleRuntime());
  triage::TriageInput in;
  for (const char* path : {"/usr/lib/python3/dist-packages/oauthlib-3.2.2.egg-info/METADATA", "/data/val/index.json"}) {
    triage::MissingPathRecord m;
    m.path = path;
    m.error = 2;  // ENOENT
    in.missingPaths.push_back(m);
  }
  triage::TriageResult t;
  auto r = preflight::judge(f, in, t, 0);
  std::string text = preflight::renderText(f, r, in, t, "tr", 1);
  EXPECT_NE(text.find("missing /data/val/index.json"), std::string::npos) << text;
  EXPECT_EQ(text.find("METADATA"), std::string::npos) << text;
  EXPECT_EQ(preflight::renderJson(f, r, in, t, "tr", 1).find("METADATA"), std::string::npos);
}

TEST(PreflightReport, TextAndJsonNameWhatRan) {
  auto f = preflight::parseFacts(sampleRuntime());
  triage::TriageInput in;
  triage::MissingPathRecord m;
  m.path = "/data/with space/x.json";
  in.missingPaths.push_back(m);
  triage::TriageResult t;
  auto r = preflight::judge(f, in, t, 0);
  std::string text = preflight::renderText(f, r, in, t, "/tmp/pf/trace", 1.25);
  EXPECT_NE(text.find("dlpreflight: PASSED"), std::string::npos);
  EXPECT_NE(text.find("training    loader 0 (FakeData): 6 passes, 2 of 500 batches (cut)"), std::string::npos) << text;
  EXPECT_NE(text.find("loop without a DataLoader: cut: lm.py:69 after 2 updates"), std::string::npos);
  EXPECT_NE(text.find("missing /data/with space/x.json"), std::string::npos);
  EXPECT_EQ(text.find("read    /data/with space/x.json"), std::string::npos);  // listed once, as missing
  EXPECT_NE(text.find("env     DATA_DIR (unset here; read at train.py:10)"), std::string::npos);
  std::string json = preflight::renderJson(f, r, in, t, "/tmp/pf/trace", 1.25);
  EXPECT_EQ(json.find('\n'), json.size() - 1);  // one line
  EXPECT_NE(json.find("\"passed\":true"), std::string::npos);
  EXPECT_NE(json.find("\"failure\":null"), std::string::npos);
}

preflight::Facts onePass(const char* phase, int64_t batchSize, uint64_t peakKib) {
  preflight::Facts f;
  f.k = 2;
  preflight::Pass p;
  p.phase = phase;
  p.batchSize = batchSize;
  p.peakRssKib = peakKib;
  f.passes.push_back(p);
  return f;
}

TEST(PreflightReport, MemoryAtAnotherBatchSizeIsOnTheLineThroughTwoRuns) {
  auto e = preflight::estimateMemory(onePass("training", 8, 1000), onePass("training", 16, 1400), 256);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].estimateKib, 1400u + 50u * 240u);  // 50 KiB per sample
  EXPECT_TRUE(e[0].note.empty());
  // The runs may come in either order.
  EXPECT_EQ(preflight::estimateMemory(onePass("training", 16, 1400), onePass("training", 8, 1000), 256)[0].estimateKib,
            13400u);
  auto same = preflight::estimateMemory(onePass("training", 8, 1000), onePass("training", 8, 1100), 256);
  EXPECT_EQ(same[0].estimateKib, 1100u);
  EXPECT_NE(same[0].note.find("no line through one point"), std::string::npos);
  auto shrinking = preflight::estimateMemory(onePass("training", 8, 1000), onePass("training", 16, 900), 256);
  EXPECT_EQ(shrinking[0].estimateKib, 1000u);
  EXPECT_FALSE(shrinking[0].note.empty());
  EXPECT_TRUE(preflight::estimateMemory(onePass("training", 8, 1), onePass("evaluation", 16, 2), 64).empty());
  auto o = parsePreflightOptions({"--compare", "a.trace", "--memory-at=256", "--", "x"});
  EXPECT_EQ(o.compare, "a.trace");
  EXPECT_EQ(o.targetBatch, 256);
  EXPECT_NE(usageMessage({"--memory-at", "256", "--", "x"}).find("go together"), std::string::npos);
  EXPECT_NE(usageMessage({"--memory-at", "0", "--compare", "a", "--", "x"}).find("positive batch size"),
            std::string::npos);
}

TEST(ChildProcess, RunsWaitsAndReportsExecFailures) {
  auto r = tools::runChild({"sh", "-c", "test \"$DLRR_TEST_X\" = yes && exit 7"}, {{"DLRR_TEST_X", "yes"}});
  EXPECT_EQ(r.execError, 0);
  EXPECT_EQ(tools::shellExitCode(r.waitStatus), 7);
  auto killed = tools::runChild({"sh", "-c", "kill -TERM $$"}, {});
  EXPECT_EQ(tools::shellExitCode(killed.waitStatus), 128 + SIGTERM);
  auto missing = tools::runChild({"/nonexistent/dlrr-test-program"}, {});
  EXPECT_EQ(missing.execError, ENOENT);
}

}  // namespace
}  // namespace dlrr

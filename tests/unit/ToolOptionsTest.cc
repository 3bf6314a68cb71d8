// The tools' option parsers, apart from the tools (tests/fuzz/fuzz_cli.cc fuzzes the same
// functions; tests/integration checks what the tools print for them).
#include <capnp/message.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tools/dlrecord/RecordOptions.h"
#include "tools/dlreplay/ReplayOptions.h"
#include "tools/dltrace/OptionValues.h"

namespace dlrr {
namespace {

using tools::UsageError;
using Argv = std::vector<std::string>;

std::string usageMessage(auto&& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(RecordOptions, HangAfterIsSecondsOrOff) {
  EXPECT_EQ(parseRecordOptions({"--", "x"}).hangAfter, "60");
  EXPECT_EQ(parseRecordOptions({"--hang-after", "2.5", "--", "x"}).hangAfter, "2.5");
  EXPECT_EQ(parseRecordOptions({"--hang-after=0", "--", "x"}).hangAfter, "0");
  for (const char* bad : {"soon", "-1", "", "1e9", "nan", "5s"})
    EXPECT_THROW(parseRecordOptions({"--hang-after", bad, "--", "x"}), tools::UsageError) << bad;
}

TEST(RecordOptions, BudgetIsASize) {
  EXPECT_EQ(parseRecordOptions({"--", "x"}).budget, 0u);  // dlrecord then takes defaultBudget()
  EXPECT_EQ(parseRecordOptions({"--budget", "500M", "--", "x"}).budget, 500ull << 20);
  EXPECT_EQ(parseRecordOptions({"--budget=20G", "--", "x"}).budget, 20ull << 30);
  EXPECT_EQ(*parseSize("64KiB"), 64ull << 10);
  EXPECT_EQ(*parseSize("3t"), 3ull << 40);
  EXPECT_EQ(*parseSize("4096"), 4096u);
  EXPECT_EQ(*parseSize("4096B"), 4096u);
  for (const char* bad : {"0", "", "M", "-5M", "1.5G", "12Q", "5MX", "10 M", "99999999999999999999", "20000000T"}) {
    EXPECT_FALSE(parseSize(bad)) << bad;
    EXPECT_THROW(parseRecordOptions({"--budget", bad, "--", "x"}), tools::UsageError) << bad;
  }
}

TEST(RecordOptions, DefaultBudgetIsHalfTheFreeSpace) {
  uint64_t b = defaultBudget("/tmp/some.trace");
  EXPECT_GE(b, 64ull << 20);
  EXPECT_EQ(defaultBudget("/nonexistent-dir-dlrr/x.trace"), 64ull << 20);  // unknown: the floor
}

TEST(RecordOptions, ParsesAFullLine) {
  auto o = parseRecordOptions({"-o", "run.trace", "--capture=full", "--collectives", "full", "--ring-steps", "4",
                               "--redact", "+WANDB", "-q", "--", "python3", "train.py", "--", "-q"});
  EXPECT_EQ(o.action, RecordOptions::Action::Record);
  EXPECT_EQ(o.output, "run.trace");
  EXPECT_EQ(o.capture, "full");
  EXPECT_EQ(o.collectives, "full");
  EXPECT_EQ(o.ringSteps, 4);
  EXPECT_TRUE(o.quiet);
  EXPECT_EQ(o.redact.back(), "WANDB");
  EXPECT_GT(o.redact.size(), 1u);  // '+' keeps the defaults
  EXPECT_EQ(o.command, (Argv{"python3", "train.py", "--", "-q"}));
}

TEST(RecordOptions, HelpEndsTheParseWhereItStands) {
  EXPECT_EQ(parseRecordOptions({"--help", "--capture", "huge"}).action, RecordOptions::Action::Help);
  EXPECT_EQ(parseRecordOptions({"-q", "--version"}).action, RecordOptions::Action::Version);
  EXPECT_NE(usageMessage([] {
              parseRecordOptions({"--capture", "huge", "--help"});
            }).find("--capture must be"),
            std::string::npos);
}

TEST(RecordOptions, UsageErrors) {
  auto msg = [](const Argv& a) { return usageMessage([&] { parseRecordOptions(a); }); };
  EXPECT_EQ(msg({}), "missing '--' and the command to record");
  EXPECT_EQ(msg({"python3"}), "missing '--' before the command (write: dlrecord [options] -- python3 ...)");
  EXPECT_EQ(msg({"--"}), "no command after '--'");
  EXPECT_EQ(msg({"-o"}), "option -o needs a value");
  EXPECT_EQ(msg({"--bogus", "--", "true"}), "unknown option '--bogus'");
  EXPECT_EQ(msg({"--ring-steps", "65", "--", "true"}), "--ring-steps must be an integer from 0 to 64 (got '65')");
  EXPECT_EQ(msg({"--ring-steps=", "--", "true"}), "--ring-steps must be an integer from 0 to 64 (got '')");
  EXPECT_EQ(msg({"--ring-steps", " 5", "--", "true"}), "--ring-steps must be an integer from 0 to 64 (got ' 5')");
  EXPECT_EQ(msg({"--ring-steps", "+5", "--", "true"}), "--ring-steps must be an integer from 0 to 64 (got '+5')");
  EXPECT_EQ(msg({"--collectives=some", "--", "true"}), "--collectives must be digest or full (got 'some')");
}

TEST(ReplayOptions, ParsesAndChecksTheTarget) {
  auto o = parseReplayOptions({"run.trace", "--until=step=3", "--debug", "pdb", "--rank", "2", "--json", "--", "x"});
  EXPECT_EQ(o.action, ReplayOptions::Action::Replay);
  EXPECT_EQ(o.trace, "run.trace");
  EXPECT_EQ(o.until, "step=3");
  EXPECT_EQ(o.debug, "pdb");
  EXPECT_EQ(o.rank, 2);
  EXPECT_TRUE(o.json);
  EXPECT_EQ(o.command, Argv{"x"});
  auto msg = [](const Argv& a) { return usageMessage([&] { parseReplayOptions(a); }); };
  EXPECT_EQ(msg({}), "missing TRACE");
  EXPECT_EQ(msg({"t", "--until", "step=-3"}), "--until step=N needs N >= 0 (got -3); steps are numbered from 0");
  EXPECT_EQ(msg({"t", "--rank", "16777217"}), "--rank must be a rank number (got '16777217')");
  EXPECT_EQ(msg({"t", "--rank", " 3"}), "--rank must be a rank number (got ' 3')");
  EXPECT_EQ(msg({"t", "--until", "step=+7"}), "--until step=N needs a whole number (got '+7')");
  EXPECT_EQ(msg({"t", "--rank", "1", "--all-ranks"}), "--rank and --all-ranks exclude each other");
  EXPECT_EQ(msg({"t", "--check", "--until", "end"}), "--check replays to the recorded failure; it takes no --until");
  EXPECT_EQ(msg({"t", "u"}), "unexpected argument 'u' (a command to run goes after '--')");
  EXPECT_EQ(msg({"t", "--"}), "no command after '--'");
  EXPECT_EQ(parseReplayOptions({"--help", "--bogus"}).action, ReplayOptions::Action::Help);
  EXPECT_EQ(msg({"--bogus", "--help"}), "unknown option '--bogus'");
}

TEST(ReplayOptions, ServedFilesAndScratch) {
  auto o = parseReplayOptions({"t"});
  EXPECT_EQ(o.serveFiles, "missing");
  EXPECT_EQ(o.scratch, "");
  o = parseReplayOptions({"t", "--serve-files=always", "--scratch", "/tmp/s"});
  EXPECT_EQ(o.serveFiles, "always");
  EXPECT_EQ(o.scratch, "/tmp/s");
  auto msg = [](const Argv& a) { return usageMessage([&] { parseReplayOptions(a); }); };
  EXPECT_EQ(msg({"t", "--serve-files", "sometimes"}),
            "--serve-files must be missing, always or never (got 'sometimes')");
  EXPECT_EQ(msg({"t", "--scratch="}), "--scratch needs a directory");
  EXPECT_EQ(msg({"t", "--scratch"}), "option --scratch needs a value");
  EXPECT_EQ(parseReplayOptions({"--clean-scratch"}).action, ReplayOptions::Action::CleanScratch);
  EXPECT_EQ(msg({"--clean-scratch", "t"}), "--clean-scratch replays nothing: it takes no trace or command");
  EXPECT_EQ(msg({"--clean-scratch", "--", "x"}), "--clean-scratch replays nothing: it takes no trace or command");
  EXPECT_EQ(parseReplayOptions({"--clean-scratch", "--help"}).action, ReplayOptions::Action::Help);
}

TEST(DltraceOptionValues, ParseKindsAndSpecs) {
  EXPECT_EQ(tools::parseEventKinds("batch,step_end,BATCH").size(), 2u);
  EXPECT_NE(usageMessage([] { tools::parseEventKinds("batch,"); }).find("unknown event kind ''"), std::string::npos);
  auto r = tools::parseRngSpec("torch-cuda:1");
  EXPECT_EQ(r.kind, schema::RngState::Kind::TORCH_CUDA);
  EXPECT_EQ(r.kindText, "torch-cuda");
  EXPECT_EQ(r.device, 1);
  EXPECT_FALSE(tools::parseRngSpec("numpy").device);
  EXPECT_EQ(usageMessage([] { tools::parseRngSpec("numpy:x"); }),
            "bad device in --rng numpy:x (expected KIND[:DEVICE])");
  for (const char* bad : {"numpy:1x", "numpy: 1", "numpy:+1", "numpy:-1", "numpy:"})
    EXPECT_EQ(usageMessage([&] { tools::parseRngSpec(bad); }),
              std::string("bad device in --rng ") + bad + " (expected KIND[:DEVICE])");
  EXPECT_EQ(usageMessage([] { tools::parseRngSpec("numpy:99999999999"); }),
            "bad device in --rng numpy:99999999999 (expected KIND[:DEVICE])");
  EXPECT_EQ(tools::parseTensorKind("module_output"), schema::TensorDigest::Kind::MODULE_OUTPUT);
  EXPECT_EQ(usageMessage([] { tools::parseTensorKind("nope"); }), "unknown tensor kind 'nope'");
}

TEST(DltraceOptionValues, BatchPaths) {
  capnp::MallocMessageBuilder m;
  auto dict = m.initRoot<schema::Value>().initDict(3);
  dict[0].setKey("inputs");
  auto list = dict[0].initValue().initList(2);
  list[0].setInt(10);
  list[1].setInt(11);
  dict[1].setKey("x");
  dict[1].initValue().initDict(1)[0].setKey("y");
  dict[2].setKey("x.y");
  dict[2].initValue().setInt(5);
  auto root = m.getRoot<schema::Value>().asReader();
  EXPECT_EQ(tools::resolveBatchPath(root, "inputs.1")->getInt(), 11);
  EXPECT_EQ(tools::resolveBatchPath(root, "x.y")->getInt(), 5);  // the longest key wins
  EXPECT_FALSE(tools::resolveBatchPath(root, "inputs.2"));
  EXPECT_FALSE(tools::resolveBatchPath(root, "inputs.9999999999"));
  EXPECT_TRUE(tools::resolveBatchPath(root, "")->isDict());
}

}  // namespace
}  // namespace dlrr

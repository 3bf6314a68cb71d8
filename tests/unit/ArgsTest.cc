// tools/common/Args: the one parser under dltrace's subcommands, dlrecord, dlreplay and
// dlpreflight.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tools/common/Args.h"

namespace dlrr::tools {
namespace {

using T = OptSpec::Type;
using Argv = std::vector<std::string>;
// A function's static: an exception while it is made fails the test, not the binary's start.
const std::vector<OptSpec>& specs() {
  static const std::vector<OptSpec> v{{"--help", T::Final, "-h"},
                                      {"--output", T::Value, "-o"},
                                      {"--json", T::Flag},
                                      {"--batch", T::OptionalValue},
                                      {"--steps", T::Value}};
  return v;
}

std::string usageMessage(const Argv& argv, Args::Layout layout = Args::Layout::Free) {
  try {
    Args a(argv, specs(), layout);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(Args, AliasesValuesAndPositionalArguments) {
  Args a({"t", "-o", "x.npy", "--json", "--batch", "--steps=7"}, specs());
  EXPECT_EQ(a.value("--output"), "x.npy");  // the alias names the option
  EXPECT_TRUE(a.has("--json"));
  EXPECT_TRUE(a.has("--batch"));
  EXPECT_EQ(a.value("--batch"), std::nullopt);  // "--steps=7" starts with '-': not its value
  EXPECT_EQ(a.intValue("--steps"), 7);
  EXPECT_EQ(a.trace(), "t");
  Args dashes({"--", "-o"}, specs());
  EXPECT_EQ(dashes.positional(), Argv{"-o"});
}

TEST(Args, UsageErrorsNameTheOption) {
  EXPECT_EQ(usageMessage({"--bogus"}), "unknown option '--bogus'");
  EXPECT_EQ(usageMessage({"-o"}), "option -o needs a value");
  EXPECT_EQ(usageMessage({"--json=1"}), "option --json takes no value");
  EXPECT_EQ(usageMessage({"-o", "a", "--output", "b"}), "option --output given twice");
  EXPECT_EQ(usageMessage({"--steps", "x"}), "(accepted)");  // meaning is the caller's to check
  Args a({"--steps", "+3"}, specs());
  EXPECT_THROW(a.intValue("--steps"), UsageError);
  Args r({"--steps", "65"}, specs());
  try {
    r.intValue("--steps", 0, 64);
    FAIL() << "65 accepted for 0..64";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "--steps must be an integer from 0 to 64 (got '65')");
  }
}

TEST(Args, AFinalOptionEndsTheParseWhereItStands) {
  Args a({"--json", "-h", "--bogus"}, specs());
  EXPECT_EQ(a.final(), "--help");
  EXPECT_TRUE(a.has("--json"));
  EXPECT_EQ(usageMessage({"--bogus", "-h"}), "unknown option '--bogus'");  // an earlier mistake wins
}

TEST(Args, TheCommandLayoutKeepsTheCommandVerbatim) {
  Args a({"-o", "t", "--", "python3", "--json", "--", "-o"}, specs(), Args::Layout::Command);
  EXPECT_TRUE(a.sawDashDash());
  EXPECT_EQ(a.command(), (Argv{"python3", "--json", "--", "-o"}));
  EXPECT_EQ(a.value("--output"), "t");
  EXPECT_FALSE(a.has("--json"));
  Args none({"t"}, specs(), Args::Layout::Command);
  EXPECT_FALSE(none.sawDashDash());
  EXPECT_EQ(none.positional(), Argv{"t"});
}

}  // namespace
}  // namespace dlrr::tools

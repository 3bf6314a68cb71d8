// The one exit-code table (tools/common/ExitCodes.h) against docs/cli.md, and the one mapping
// from TraceError kinds.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "tools/common/ExitCodes.h"

namespace dlrr {
namespace {

// The codes of each tool's "### Exit codes" table in docs/cli.md ("## dlreplay" ... "| 9 | ...").
// A first cell that is not numbers ("CMD's") is skipped; "126, 127" is two codes.
std::map<std::string, std::set<int>> documentedCodes() {
  std::ifstream in(std::string(DLRR_SOURCE_DIR) + "/docs/cli.md");
  EXPECT_TRUE(in) << "docs/cli.md";
  std::map<std::string, std::set<int>> codes;
  std::string line, tool;
  bool inTable = false;
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) {
      std::istringstream words(line.substr(3));
      words >> tool;
      inTable = false;
    } else if (line.rfind("### ", 0) == 0) {
      inTable = line == "### Exit codes";
    } else if (inTable && line.rfind("| ", 0) == 0) {
      std::string first = line.substr(2, line.find('|', 2) - 2);
      std::istringstream cell(first);
      std::string number;
      while (std::getline(cell, number, ',')) {
        size_t at = number.find_first_not_of(' ');
        if (at == std::string::npos || number[at] < '0' || number[at] > '9') continue;
        codes[tool].insert(std::stoi(number.substr(at)));
      }
    }
  }
  return codes;
}

std::set<int> tableCodes(unsigned tool) {
  std::set<int> out;
  for (const ExitCodeRow& row : kExitCodes)
    if (row.tools & tool) out.insert(row.code);
  return out;
}

TEST(ExitCodesTest, DocsListEveryToolsCodesAndNoOthers) {
  auto docs = documentedCodes();
  EXPECT_EQ(docs["dltrace"], tableCodes(kToolDltrace));
  EXPECT_EQ(docs["dlrecord"], tableCodes(kToolDlrecord));
  EXPECT_EQ(docs["dlreplay"], tableCodes(kToolDlreplay));
  EXPECT_EQ(docs["dlpreflight"], tableCodes(kToolDlpreflight));
}

TEST(ExitCodesTest, TableHasEachCodeOnce) {
  std::set<int> seen;
  for (const ExitCodeRow& row : kExitCodes) {
    EXPECT_TRUE(seen.insert(row.code).second) << row.code;
    EXPECT_NE(row.tools, 0u) << row.code;
  }
}

TEST(ExitCodesTest, TraceErrorKindsMapAsDocumented) {
  EXPECT_EQ(exitCodeFor(ErrorKind::Usage), 2);
  EXPECT_EQ(exitCodeFor(ErrorKind::Io), 3);
  EXPECT_EQ(exitCodeFor(ErrorKind::NotATrace), 4);
  EXPECT_EQ(exitCodeFor(ErrorKind::FutureVersion), 5);
  EXPECT_EQ(exitCodeFor(ErrorKind::Corrupt), 6);
  EXPECT_EQ(exitCodeFor(ErrorKind::NotFound), 7);
}

// dlreplay's own copy of this mapping once called a kind it did not know "corrupt" (6), where
// dltrace said "internal error" (8): an unknown kind is a bug in the tool, not a claim about the
// trace, and both tools now share this one function.
TEST(ExitCodesTest, UnknownKindIsInternalNotCorrupt) {
  EXPECT_EQ(exitCodeFor(static_cast<ErrorKind>(99)), kExitInternal);
}

}  // namespace
}  // namespace dlrr

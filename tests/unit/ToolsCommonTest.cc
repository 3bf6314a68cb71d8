// The tools' JSON and .npy writers: output that other programs parse must be exactly right.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "tools/common/Json.h"
#include "tools/common/Npy.h"
#include "tools/common/Text.h"

namespace dlrr::tools {
namespace {

TEST(Json, NestedValuesAndEscaping) {
  std::string out;
  JsonWriter j(out);
  j.beginObject();
  j.field("s", std::string("a\"b\\c\n\x01\x7f"));
  j.field("bad", std::string("ok\xff\xc3(", 5));  // invalid UTF-8 becomes U+FFFD
  j.field("utf8", std::string("\xc3\xa9"));
  j.field("n", -5);
  j.field("u", uint64_t{18446744073709551615ull});
  j.field("d", 0.1);
  j.field("nan", std::nan(""));
  j.field("inf", -INFINITY);
  j.field("t", true);
  j.key("none").null();
  j.key("list").beginArray().value(1).value("x").beginArray().endArray().beginObject().endObject().endArray();
  j.endObject();
  EXPECT_EQ(out,
            "{\"s\":\"a\\\"b\\\\c\\n\\u0001\\u007f\",\"bad\":\"ok\\ufffd\\ufffd(\",\"utf8\":\"\xc3\xa9\",\"n\":-5,"
            "\"u\":18446744073709551615,\"d\":0.1,\"nan\":\"nan\",\"inf\":\"-inf\",\"t\":true,\"none\":null,"
            "\"list\":[1,\"x\",[],{}]}");
}

TEST(Json, PrettyPrinting) {
  std::string out;
  JsonWriter j(out, 2);
  j.beginObject().field("a", 1).key("b").beginArray().value(2).endArray().endObject();
  EXPECT_EQ(out, "{\n  \"a\": 1,\n  \"b\": [\n    2\n  ]\n}");
}

TEST(Text, PrintableEscapesControlsAndKeepsUtf8) {
  EXPECT_EQ(printable("a\nb\x1b[31m\xc3\xa9\xed\xa0\x80"), "a\\nb\\x1b[31m\xc3\xa9\\xed\\xa0\\x80");
  EXPECT_EQ(hex64(0xabc), "0x0000000000000abc");
  const uint8_t b[3] = {0x00, 0xff, 0x10};
  EXPECT_EQ(hexPrefix(b, 3, 2), "00ff...");
  EXPECT_EQ(humanBytes(1536), "1.5 KiB");
}

TEST(Text, PrintableSummaryIsOneLineWithTheFirstAndLastLine) {
  EXPECT_EQ(printableSummary("short \x1b[31m", 100), "short \\x1b[31m");
  EXPECT_EQ(printableSummary("a\nb\n", 100), "a\\nb");  // nothing left out
  std::string tb =
      "RuntimeError: Caught RuntimeError in DataLoader worker process 1.\n"
      "Original Traceback (most recent call last):\n  File \"w.py\", line 3, in f\n"
      "    x()\nRuntimeError: bad sample\n";
  EXPECT_EQ(printableSummary(tb, 200),
            "RuntimeError: Caught RuntimeError in DataLoader worker process 1. ... RuntimeError: bad sample");
  // Cuts fall between characters and escapes, never inside one.
  EXPECT_EQ(printableSummary("abcdef\x01gh", 10), "abcdef...");
  EXPECT_EQ(printableSummary("ab\xc3\xa9\xc3\xa9xyz", 8), "ab\xc3\xa9...");
  std::string cut = printableSummary(std::string(500, 'x') + "\n\n" + std::string(500, 'y'), 100);
  EXPECT_LE(cut.size(), 100u);
  EXPECT_EQ(cut.find('\n'), std::string::npos);
  EXPECT_NE(cut.find(" ... yyy"), std::string::npos);
}

TEST(Npy, HeaderIsAlignedAndDescribesTheArray) {
  for (const auto& shape : std::vector<std::vector<int64_t>>{{}, {3}, {2, 128}, {1, 2, 3, 4}}) {
    std::string h = npyHeader("<f4", shape);
    ASSERT_EQ(h.size() % 64, 0u);
    EXPECT_EQ(h.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
    size_t len = static_cast<uint8_t>(h[8]) | (static_cast<uint8_t>(h[9]) << 8);
    EXPECT_EQ(len + 10, h.size());
    EXPECT_EQ(h.back(), '\n');
  }
  EXPECT_NE(npyHeader("<f4", {}).find("'shape': ()"), std::string::npos);
  EXPECT_NE(npyHeader("<f4", {3}).find("'shape': (3,)"), std::string::npos);
  EXPECT_NE(npyHeader("<i8", {2, 128}).find("{'descr': '<i8', 'fortran_order': False, 'shape': (2, 128), }"),
            std::string::npos);
}

TEST(Npy, TorchDtypes) {
  EXPECT_EQ(npyDtypeForTorch("float32")->descr, "<f4");
  EXPECT_EQ(npyDtypeForTorch("int64")->descr, "<i8");
  EXPECT_EQ(npyDtypeForTorch("bool")->descr, "|b1");
  EXPECT_EQ(npyDtypeForTorch("float16")->descr, "<f2");
  auto bf = npyDtypeForTorch("bfloat16");
  ASSERT_TRUE(bf);
  EXPECT_EQ(bf->descr, "<u2");
  EXPECT_FALSE(bf->note.empty());
  EXPECT_FALSE(npyDtypeForTorch("quint4x2"));
}

}  // namespace
}  // namespace dlrr::tools

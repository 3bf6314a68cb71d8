#pragma once
// Text helpers shared by the command-line tools. Everything printed from a trace is untrusted:
// it goes through printable() so that one event stays one line and no terminal escape
// sequence from a recorded string reaches the user's terminal.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dlrr::tools {

// Length of the well-formed UTF-8 sequence starting at s[i] (1 for ASCII), 0 when malformed.
size_t utf8SequenceLength(std::string_view s, size_t i);
// Valid UTF-8 kept, control characters and malformed bytes escaped (\n, \t, \xNN).
std::string printable(std::string_view s);
// printable() for a one-line summary of a possibly long, multi-line message (an exception
// carrying a traceback): its first line and, when there are more, " ... " and its last
// non-empty line (a traceback's last line names the error), each cut to fit `max` bytes.
std::string printableSummary(std::string_view s, size_t max);
// "0x" + 16 hex digits.
std::string hex64(uint64_t v);
// Lower-case hex of up to `max` bytes, with "..." when there are more.
std::string hexPrefix(const uint8_t* p, size_t n, size_t max);
// 1536 -> "1.5 KiB".
std::string humanBytes(uint64_t n);
// Shortest round-trip form of a double ("nan", "inf" for non-finite values).
std::string formatDouble(double d);
// CLOCK_REALTIME ns -> "2024-11-21 12:00:00 UTC" ("unknown" for 0).
std::string formatTime(int64_t ns);
// A word as a POSIX shell reads it back: unchanged when plain, else single-quoted.
std::string shellQuote(const std::string& s);
// argv as one shell command line (what dlreplay shows before running a command).
std::string joinCommand(const std::vector<std::string>& argv);

}  // namespace dlrr::tools

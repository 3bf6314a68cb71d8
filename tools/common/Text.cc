#include "tools/common/Text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <ctime>

namespace dlrr::tools {

size_t utf8SequenceLength(std::string_view s, size_t i) {
  auto at = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = at(i);
  if (c < 0x80) return 1;
  size_t len;
  uint32_t cp;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    unsigned char cc = at(i + k);
    if ((cc & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (cc & 0x3F);
  }
  if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF))) return 0;  // overlong / too big
  if (cp >= 0xD800 && cp <= 0xDFFF) return 0;                                               // surrogates
  return len;
}

std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t len = c >= 0x80 ? utf8SequenceLength(s, i) : 1;
    if (c >= 0x80 && len > 0) {
      out.append(s.substr(i, len));
      i += len;
      continue;
    }
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c < 0x20 || c >= 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  return out;
}

namespace {

// printable(s) cut to at most `max` bytes at a character or escape boundary, "..." marking a cut.
std::string printableCut(std::string_view s, size_t max) {
  std::string p = printable(s);
  if (p.size() <= max) return p;
  size_t keep = max > 3 ? max - 3 : 0, end = 0;
  while (end < p.size()) {
    // In printable() output a backslash always starts an escape (\\, \n, \xNN); bytes >= 0x80
    // are whole UTF-8 sequences.
    size_t len = 1;
    if (p[end] == '\\')
      len = p[end + 1] == 'x' ? 4 : 2;
    else if (static_cast<unsigned char>(p[end]) >= 0x80)
      len = utf8SequenceLength(p, end);
    if (end + len > keep) break;
    end += len;
  }
  return p.substr(0, end) + "...";
}

}  // namespace

std::string printableSummary(std::string_view s, size_t max) {
  auto isSpace = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && isSpace(s.back())) s.remove_suffix(1);
  size_t nl = s.find('\n'), lastNl = s.rfind('\n');
  if (nl == lastNl) return printableCut(s, max);  // one or two lines: nothing to leave out
  std::string_view first = s.substr(0, nl), last = s.substr(lastNl + 1);
  while (!last.empty() && isSpace(last.front())) last.remove_prefix(1);
  static constexpr std::string_view kSep = " ... ";
  size_t lastRoom = std::min(printable(last).size(), max / 2);
  std::string head = printableCut(first, max > lastRoom + kSep.size() ? max - lastRoom - kSep.size() : 0);
  return head + std::string(kSep) +
         printableCut(last, max > head.size() + kSep.size() ? max - head.size() - kSep.size() : 0);
}

std::string hex64(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%016llx", static_cast<unsigned long long>(v));
  return b;
}

std::string hexPrefix(const uint8_t* p, size_t n, size_t max) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  size_t shown = n < max ? n : max;
  out.reserve(shown * 2 + 3);
  for (size_t i = 0; i < shown; ++i) {
    out += kDigits[p[i] >> 4];
    out += kDigits[p[i] & 15];
  }
  if (n > shown) out += "...";
  return out;
}

std::string humanBytes(uint64_t n) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  if (n < 1024) return std::to_string(n) + " B";
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char b[32];
  std::snprintf(b, sizeof b, "%.1f %s", v, kUnits[u]);
  return b;
}

std::string formatDouble(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char b[64];
  auto r = std::to_chars(b, b + sizeof b, d);
  return std::string(b, r.ptr);
}

std::string formatTime(int64_t ns) {
  if (ns <= 0) return "unknown";
  time_t secs = static_cast<time_t>(ns / 1000000000);
  struct tm tm {};
  if (!gmtime_r(&secs, &tm)) return "unknown";
  char b[64];
  std::strftime(b, sizeof b, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return b;
}

std::string shellQuote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%") ==
                        std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string joinCommand(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) out += (out.empty() ? "" : " ") + shellQuote(a);
  return out;
}

}  // namespace dlrr::tools

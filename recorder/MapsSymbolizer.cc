#include "recorder/MapsSymbolizer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace dlrr {
namespace {

size_t formatHex(uint64_t v, char* out) noexcept {
  char tmp[17];
  size_t n = 0;
  do {
    tmp[n++] = "0123456789abcdef"[v & 0xF];
    v >>= 4;
  } while (v && n < 16);
  out[0] = '0';
  out[1] = 'x';
  for (size_t i = 0; i < n; ++i) out[2 + i] = tmp[n - 1 - i];
  return n + 2;
}

uint64_t parseHex(const char*& p, const char* end) noexcept {
  uint64_t v = 0;
  while (p < end) {
    char c = *p;
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) break;
    v = v * 16 + static_cast<uint64_t>(d);
    ++p;
  }
  return v;
}

}  // namespace

// "libfoo.so+0x1234" for an instruction pointer, from the text of /proc/self/maps; NUL-terminated
// (capnp::Text::Reader(p, n) requires p[n] == '\0': a build with KJ_DEBUG throws otherwise). cap >= 21.
size_t describeIp(uint64_t ip, const char* maps, size_t mapsLen, char* out, size_t cap) noexcept {
  const char* p = maps;
  const char* end = maps + mapsLen;
  while (p < end) {
    const char* line = p;
    const char* eol = p;
    while (eol < end && *eol != '\n') ++eol;
    const char* q = line;
    uint64_t lo = parseHex(q, eol);
    if (q < eol && *q == '-') ++q;
    uint64_t hi = parseHex(q, eol);
    if (ip >= lo && ip < hi) {
      // fields after the range: perms offset dev inode, then the path
      int field = 0;
      uint64_t fileOff = 0;
      while (q < eol && field < 4) {
        while (q < eol && *q == ' ') ++q;
        if (field == 1) fileOff = parseHex(q, eol);
        while (q < eol && *q != ' ') ++q;
        ++field;
      }
      while (q < eol && *q == ' ') ++q;
      const char* name = q;
      for (const char* s = q; s < eol; ++s)
        if (*s == '/') name = s + 1;
      size_t n = 0;
      for (const char* s = name; s < eol && n + 20 < cap; ++s) out[n++] = *s;
      if (n == 0 && n + 20 < cap) {
        const char anon[] = "[anon]";
        for (char c : anon)
          if (c) out[n++] = c;
      }
      out[n++] = '+';
      n += formatHex(ip - lo + fileOff, out + n);
      out[n] = '\0';
      return n;
    }
    p = eol + 1;
  }
  size_t n = formatHex(ip, out);
  out[n] = '\0';
  return n;
}

size_t readFdInto(int fd, char* buf, size_t cap) noexcept {
  if (fd < 0) return 0;
  size_t n = 0;
  while (n < cap) {
    ssize_t r = ::pread(fd, buf + n, cap - n, static_cast<off_t>(n));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += static_cast<size_t>(r);
  }
  return n;
}

size_t readFileInto(const char* path, char* buf, size_t cap) noexcept {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  size_t n = 0;
  while (n < cap) {
    ssize_t r = ::read(fd, buf + n, cap - n);
    if (r <= 0) break;
    n += static_cast<size_t>(r);
  }
  ::close(fd);
  return n;
}

}  // namespace dlrr

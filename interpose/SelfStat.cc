#include "interpose/SelfStat.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "format/OwnThreads.h"

namespace dlrr {

FILE* selfStatAsWithoutDlrr(const char* path, const char* mode, FILE* f) noexcept {
  int own = ownThreads().load();
  if (f == nullptr || own <= 0 || path == nullptr || mode == nullptr || mode[0] != 'r' || strchr(mode, '+') ||
      strcmp(path, "/proc/self/stat") != 0)
    return f;
  int savedErrno = errno;
  char in[4096];
  size_t n = fread(in, 1, sizeof in - 1, f);
  in[n] = '\0';
  // Fields after the command name's closing parenthesis (the name may hold spaces or ')'):
  // state is field 3, num_threads field 20, so the 18th token after it.
  const char* p = strrchr(in, ')');
  const char* field = nullptr;
  for (int i = 0; p && i < 18; ++i) {
    p += strspn(p + 1, " ") + 1;
    field = p;
    p = strchr(p, ' ');
  }
  if (field == nullptr || p == nullptr || !feof(f)) {  // not the layout we know: leave the file as it is
    fseek(f, 0, SEEK_SET);
    errno = savedErrno;
    return f;
  }
  long threads = strtol(field, nullptr, 10) - own;
  char out[sizeof in + 32];
  int len = snprintf(out, sizeof out, "%.*s%ld%s", static_cast<int>(field - in), in, threads < 1 ? 1L : threads, p);
  FILE* m = len > 0 ? fmemopen(nullptr, static_cast<size_t>(len) + 1, "w+") : nullptr;
  if (m == nullptr || fwrite(out, 1, static_cast<size_t>(len), m) != static_cast<size_t>(len)) {
    if (m) fclose(m);
    fseek(f, 0, SEEK_SET);
    errno = savedErrno;
    return f;
  }
  fseek(m, 0, SEEK_SET);
  fclose(f);
  errno = savedErrno;
  return m;
}

}  // namespace dlrr

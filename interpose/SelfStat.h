#pragma once
// The job's view of /proc/self/stat without dlrr's own threads (format/OwnThreads.h).
#include <stdio.h>

namespace dlrr {

// For fopen(path, mode) that returned `f`: when path is /proc/self/stat opened for reading and
// dlrr runs threads of its own, returns an in-memory copy whose num_threads field leaves them
// out (never below 1) and closes `f`; otherwise returns `f` untouched. The copy is an fmemopen
// stream (fileno() is -1): CPython and C readers use fread/fgets on it.
FILE* selfStatAsWithoutDlrr(const char* path, const char* mode, FILE* f) noexcept;

}  // namespace dlrr

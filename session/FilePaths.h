#pragma once
// Paths as the file layer of data-less replay sees them (docs/replay.md): absolute and
// lexically normalised (".", ".." and repeated slashes folded, symlinks left alone), so that
// the path a job names at record time is the one replay looks up.
#include <string>
#include <string_view>

namespace dlrr {

// `path` made absolute against the cwd (dirfd AT_FDCWD) or the directory open on `dirfd`
// (through /proc/self/fd), then normalised. "" when it cannot be resolved.
std::string absolutePath(int dirfd, const char* path);

// Folds ".", ".." and "//" of an absolute path ("/.." stays "/"). No file-system access.
std::string lexicallyNormal(std::string_view abs);

// `path` is `dir` or lies below it.
bool pathUnder(std::string_view path, std::string_view dir) noexcept;

// The system's own files, never data of a job: /proc, /sys, /dev, /run, /etc, the
// libraries and binaries under /usr, /lib*, /bin, /sbin, and anything in a Python
// installation (site-packages, dist-packages, lib/python3.x, __pycache__).
bool isSystemPath(std::string_view abs) noexcept;

}  // namespace dlrr

#pragma once
// A trace is a directory (mode 0700) holding one stream file (*.dls, mode 0600) per writer:
// the launcher, and each recorded process. Separate files mean processes never share a file
// offset or a lock. All opens go through a directory fd with O_NOFOLLOW, so a symlink planted
// in the trace directory is never followed.
#include <cstdint>
#include <string>
#include <vector>

#include "format/UniqueFd.h"

namespace dlrr {

inline constexpr const char* kStreamExt = ".dls";
inline constexpr const char* kLauncherStream = "launcher";
// Bulk files of a budgeted trace (docs/format.md, "Bulk files"): `<stream>.bulk<N>.dlb`, a
// stream file of BLOB frames that its stream's events refer to, which the recorder may unlink
// whole to stay within `dlrecord --budget`. Not streams: listStreams() does not list them.
inline constexpr const char* kBulkExt = ".dlb";

// Creates `path` (and no parents) private to the user, or opens it if it already exists as a
// trace directory we own. Throws TraceError(Io/Usage) with a message naming the path.
UniqueFd createTraceDir(const std::string& path);
// Opens an existing trace directory for reading. Throws TraceError(Io/NotATrace).
UniqueFd openTraceDir(const std::string& path);

// Creates a new stream file in `dirFd` with O_EXCL and mode 0600 whatever the umask. When
// `base` exists already, tries base.1, base.2, ... ; `nameOut` receives the name used.
UniqueFd createStreamFile(int dirFd, const std::string& base, std::string& nameOut);

// Stream names (without extension) in the directory, sorted; the launcher first.
std::vector<std::string> listStreams(int dirFd);

// Creates `<stream>.bulk<N>.dlb` (O_EXCL, 0600) with the first free N >= `first`; `nameOut`
// receives the file's name (with extension).
UniqueFd createBulkFile(int dirFd, const std::string& stream, uint64_t first, std::string& nameOut);
// Sets the format major in the file header of `file` (a stream or bulk file of the directory):
// a stream says kFormatMajor once it uses bulk files, before any event refers to one, so that
// readers from before bulk files refuse it rather than misread it (format/Frame.h). Throws
// TraceError(Io).
void setStreamFormatMajor(int dirFd, const std::string& file, uint16_t major);
// The bulk files of `stream` in the directory (file names), in the order of their N.
std::vector<std::string> listBulkFiles(int dirFd, const std::string& stream);
// Bytes of the regular files in the directory (the whole trace, every process's files).
uint64_t traceBytes(int dirFd);

}  // namespace dlrr

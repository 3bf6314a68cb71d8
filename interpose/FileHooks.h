#pragma once
// Failed file-system lookups, for triage (see FileHooks.cc). The open hooks of
// EntropyHooks.cc report their failures through this.

namespace dlrr {

// Records a failed open/openat (`dirfd` AT_FDCWD for open) with the errno it failed with.
// Preserves errno. Cheap when not recording.
void noteFailedOpen(int dirfd, const char* path, int flags, int error) noexcept;

}  // namespace dlrr

#pragma once
// The process's sessions: its one record session and its one replay session, and which of them
// is active (the one the C API, the libc hooks and the signal handlers forward to: they have no
// other way to reach it). Created by the library constructor, never destroyed: threads of the
// job may still call hooked libc functions while the process exits.
#include "recorder/RecordSession.h"
#include "replayer/ReplaySession.h"

namespace dlrr {

// nullptr when not recording (mode off, or recording could not start).
RecordSession* processRecorder() noexcept;
// Only the library constructor calls this.
void startProcessRecorder(const Config& cfg);

// The session the C API forwards to: the replay session when this process is the one being
// replayed, else the recorder (which may have turned itself off: check active()), else nullptr.
ProcessSession* processSession() noexcept;

// Replay mode: nullptr unless this process is the one being replayed.
ReplaySession* processReplayer() noexcept;
// The replay session whether or not this process is the replayed one (fork handling).
ReplaySession* processReplayerAny() noexcept;
// Throws TraceError when the trace cannot be loaded.
void startProcessReplayer(const Config& cfg, const std::string& until);

}  // namespace dlrr

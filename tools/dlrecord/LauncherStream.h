#pragma once
// dlrecord's launcher stream (docs/format.md): the trace's first stream, written by dlrecord
// itself around the job: the command, the redacted environment, the machine and the options
// (TraceInfo in its header); then what the job's library reported through the status pipe, the
// job's exit and its resources (peak memory, OOM kills, CPU time).
#include <sys/resource.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "format/StreamWriter.h"
#include "tools/dlrecord/RecordOptions.h"

namespace dlrr {

// Creates the trace directory and the launcher stream. Throws TraceError; Usage when `-o` names
// a path that cannot hold a trace (known before the job starts, so the job is not run).
// `leftOut` gets one line per kind of secret kept out of it (for dlrecord's summary).
std::unique_ptr<StreamWriter> openLauncherStream(const RecordOptions& o, const std::string& trace,
                                                 std::vector<std::string>* leftOut = nullptr);

// A RecorderStatus event: something was not recorded, and why (`dltrace info` shows it).
void appendRecorderProblem(StreamWriter& w, const std::string& message);

// The job's end as the launcher saw it (wait status, the shell's exit code).
void appendProcessExit(StreamWriter& w, int pid, int waitStatus, int exitCode, int64_t tNs);

// For triage: the job's peak memory (the largest of its processes, from wait4) and the OOM
// kills its memory cgroup counted while it ran; written even when the job was SIGKILLed.
void appendJobResources(StreamWriter& w, const rusage& ru, int64_t oomKillsBefore, int64_t tNs);

// CLOCK_REALTIME in ns.
int64_t realNs();

}  // namespace dlrr

#pragma once
// Every exit code of dltrace, dlrecord, dlreplay and dlpreflight, in one table. docs/cli.md's
// "Exit codes" tables are checked against kExitCodes by tests/unit/ExitCodesTest.cc: a code added
// here and not documented there (or the reverse) fails the build's tests.
//
// 0-8 mean the same in every tool that reads a trace; 9-15 are dlreplay's outcomes; 126 and 127
// are the shell's for a command that cannot be run. dlrecord otherwise exits with the job's status.
#include "format/TraceError.h"

namespace dlrr {

enum ExitCode : int {
  kExitOk = 0,
  kExitNegative = 1,         // a negative answer: verify found damage, env-diff differs, preflight failed,
                             // dlrecord could not start the job
  kExitUsage = 2,            // bad flags, missing arguments, unknown command
  kExitIo = 3,               // missing path, permission denied, cannot write output
  kExitNotATrace = 4,        // the path is not a dlrr trace
  kExitFutureVersion = 5,    // written by a newer dlrr (trace format major version)
  kExitCorrupt = 6,          // damaged beyond what recovery can read
  kExitNotFound = 7,         // no such step, stream, tensor, field
  kExitInternal = 8,         // a bug in the tool: please report it
  kExitConsent = 9,          // the trace is from another host/user: --yes or an explicit command needed
  kExitNotReached = 10,      // the job ended (or failed otherwise) before the target (dlpreflight: a phase)
  kExitDivergence = 11,      // the replay did what the recording did not (a step, an exit, an exception, a signal)
  kExitNoReplay = 12,        // the replayed process never attached to the trace (e.g. not the same program)
  kExitNotReproduced = 13,   // --check: the recorded failure did not happen again
  kExitTraceCut = 14,        // the replay reached the end of a trace cut short (job killed, recording stopped)
  kExitWhatIfRecurred = 15,  // --what-if: the failure recurred with the change
  kExitNotExecutable = 126,  // the command exists but cannot be executed
  kExitCannotRun = 127,      // the command cannot be found
};

// Which tools can exit with a code (a bit each).
enum ExitTool : unsigned {
  kToolDltrace = 1u << 0,
  kToolDlrecord = 1u << 1,
  kToolDlreplay = 1u << 2,
  kToolDlpreflight = 1u << 3,
};

struct ExitCodeRow {
  ExitCode code;
  unsigned tools;  // ExitTool bits
};

inline constexpr unsigned kTraceReaders = kToolDltrace | kToolDlreplay;
inline constexpr unsigned kLaunchers = kToolDlrecord | kToolDlreplay | kToolDlpreflight;

inline constexpr ExitCodeRow kExitCodes[] = {
    {kExitOk, kToolDltrace | kToolDlreplay | kToolDlpreflight},  // dlrecord: the job's own status
    {kExitNegative, kToolDltrace | kToolDlrecord | kToolDlpreflight},
    {kExitUsage, kTraceReaders | kLaunchers},
    {kExitIo, kTraceReaders},
    {kExitNotATrace, kTraceReaders},
    {kExitFutureVersion, kTraceReaders},
    {kExitCorrupt, kTraceReaders},
    {kExitNotFound, kTraceReaders},
    {kExitInternal, kTraceReaders},
    {kExitConsent, kToolDlreplay},
    {kExitNotReached, kToolDlreplay | kToolDlpreflight},  // dlpreflight: a phase never ran
    {kExitDivergence, kToolDlreplay},
    {kExitNoReplay, kToolDlreplay},
    {kExitNotReproduced, kToolDlreplay},
    {kExitTraceCut, kToolDlreplay},
    {kExitWhatIfRecurred, kToolDlreplay},
    {kExitNotExecutable, kLaunchers},
    {kExitCannotRun, kLaunchers},
};

// The one place TraceError kinds become exit codes (dltrace and dlreplay); a kind it does not
// know is a bug (kExitInternal), never a claim about the trace.
int exitCodeFor(ErrorKind kind) noexcept;

}  // namespace dlrr

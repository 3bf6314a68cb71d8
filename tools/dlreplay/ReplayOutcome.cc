#include "tools/dlreplay/ReplayOutcome.h"

#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "tools/common/Text.h"

namespace dlrr {
namespace {

constexpr size_t kTextMax = 300;

// Verified steps are consecutive from the jump step (0 without a jump).
std::string lastVerified(uint64_t verified, int64_t jumpStep) {
  const int64_t first = jumpStep < 0 ? 0 : jumpStep;
  return verified == 0 ? "no step verified"
                       : "last verified step " + std::to_string(first + static_cast<int64_t>(verified) - 1);
}

std::string signalText(int sig) {
  const char* d = strsignal(sig);
  return std::string(d ? d : "signal") + " (signal " + std::to_string(sig) + ")";
}

}  // namespace

ReplayOutcome decideReplayOutcome(const ReplayFacts& f) {
  ReplayOutcome r;
  const ReplayReport& rep = f.report;
  r.verified = static_cast<uint64_t>(std::max<int64_t>(rep.verifiedSteps, 0));
  const ReplayReport::Stop stop = rep.stop;
  const bool died = WIFSIGNALED(f.waitStatus);
  const int sig = died ? WTERMSIG(f.waitStatus) : 0;
  const int status = WIFEXITED(f.waitStatus) ? WEXITSTATUS(f.waitStatus) : died ? 128 + sig : -1;
  const bool raised = rep.exception.has_value();
  const bool recordedRaised = f.recordedFailureKind == "exception";
  // The same failure is an exception of the recorded type (the report holds "Type: message").
  const bool sameException =
      raised && recordedRaised &&
      (f.recordedExceptionType.empty() || rep.exception->rfind(f.recordedExceptionType + ":", 0) == 0);
  const bool recordedDied = f.recordedFailureKind == "signal";
  // What the replayed process did at its end, named: the signal, the exception and where, the status.
  std::string ended;
  if (died) {
    ended = "was killed by " + signalText(sig);
  } else if (raised) {
    ended = "raised " + tools::printableSummary(*rep.exception, kTextMax);
    if (rep.exceptionWhere && !rep.exceptionWhere->empty())
      ended += " at " + tools::printableSummary(*rep.exceptionWhere, kTextMax);
  } else {
    ended = "exited with status " + std::to_string(status);
  }

  if (!rep.attached) {
    r.exitCode = kExitNoReplay;
    r.message = "the replayed process never attached to the trace (is it the recorded program? did it import torch?)";
  } else if (raised && !sameException && !f.plainBatches.empty()) {
    // The job was served a batch in another type than it had (a tuple for its namedtuple):
    // an exception it raises then may be that difference, not the computation's.
    r.exitCode = kExitNotReached;
    r.message = "cannot replay this job from the trace: the replayed job " + ended +
                " where the recording did not, after being served batches whose container type dlrr did not "
                "record (" +
                tools::printableSummary(f.plainBatches, kTextMax) + "); " + lastVerified(r.verified, f.jumpStep);
  } else if (rep.divergence && !f.recomputation.differsAt.empty()) {
    // Two computations from the same restored state differ: neither the snapshot nor the
    // recording's machine is to blame for what the step computes differently.
    r.exitCode = kExitDivergence;
    r.message = "diverged at step " + std::to_string(rep.divergence->step) + ": " +
                tools::printableSummary(rep.divergence->detail, kTextMax) +
                "; the computation is non-deterministic: computed twice from the same restored state (the snapshot "
                "of step " +
                std::to_string(f.jumpStep) + "), it differs at " +
                tools::printableSummary(f.recomputation.differsAt, kTextMax);
  } else if (rep.divergence && f.jumpStep >= 0 &&
             (rep.divergence->step == f.jumpStep || (rep.divergence->step > f.jumpStep && !(raised && !sameException) &&
                                                     !(died && !(recordedDied && sig == f.recordedSignal))))) {
    // State the snapshot could not restore shows at the first step after the jump, or later
    // where it first decides something (a hand-written LR rule acting at an epoch's end). When
    // the snapshot itself was not loaded whole, that is the cause to name, not Python-side state.
    r.exitCode = kExitDivergence;
    auto unrestored = std::find_if(rep.warnings.begin(), rep.warnings.end(),
                                   [](const std::string& w) { return w.rfind("jump: not restored", 0) == 0; });
    const bool first = rep.divergence->step == f.jumpStep;
    r.message =
        (first ? "jump replay diverged after the jump at step " + std::to_string(f.jumpStep)
               : "jump replay diverged at step " + std::to_string(rep.divergence->step) + ", after the jump to step " +
                     std::to_string(f.jumpStep) + " (" + lastVerified(r.verified, f.jumpStep) + ")") +
        ": " + tools::printableSummary(rep.divergence->detail, kTextMax) +
        (unrestored != rep.warnings.end()
             ? "; the snapshot was not loaded whole (" + tools::printableSummary(*unrestored, kTextMax) + ")"
             : "; state outside modules/optimizers/schedulers (Python-side values, code that depends on the "
               "fast-forwarded steps' results) was not restored" +
                   std::string(first ? "" : " and may have changed it") +
                   std::string(f.recomputation.agreed ? " (a second computation from the snapshot computed the "
                                                        "same: the step is deterministic)"
                                                      : "")) +
        "; run with --from start for a full replay";
  } else if (rep.divergence) {
    r.exitCode = kExitDivergence;
    // An exception or a signal the recording did not have is the cause of what the step then
    // lacked (its loss, its outputs): name it first.
    if ((raised && !sameException) || (died && !(recordedDied && sig == f.recordedSignal)))
      r.message = "diverged at step " + std::to_string(rep.divergence->step) + ": the replayed job " + ended +
                  " where the recording did not; " + lastVerified(r.verified, f.jumpStep);
    else
      r.message = "diverged at step " + std::to_string(rep.divergence->step) + ": " +
                  tools::printableSummary(rep.divergence->detail, kTextMax);
  } else if (stop == ReplayReport::Stop::Unservable) {
    // The trace cannot give the job what it had (a batch dlrr did not record, one outside the
    // window without the dataset): the replay could not be carried out, which is no divergence.
    r.exitCode = kExitNotReached;
    r.message = "cannot replay past here: " +
                (rep.stopWhere ? tools::printableSummary(*rep.stopWhere, kTextMax) : std::string("a batch")) + "; " +
                lastVerified(r.verified, f.jumpStep);
  } else if (stop == ReplayReport::Stop::Target) {
    r.exitCode = kExitOk;
    r.message = "reached " + f.targetText;
  } else if (stop == ReplayReport::Stop::EndOfRecording && !f.traceCut.empty()) {
    // Nothing past a cut trace can be checked: its own exit code, never success, never "diverged".
    r.exitCode = kExitTraceCut;
    r.message =
        (f.target == ReplayTarget::Kind::End ? std::string("the trace was cut short (")
                                             : "the trace ends before " + f.targetText + ": it was cut short (") +
        tools::printableSummary(f.traceCut, kTextMax) + ")" +
        (rep.stopWhere ? "; " + tools::printableSummary(*rep.stopWhere, kTextMax) : "") + "; " +
        lastVerified(r.verified, f.jumpStep);
  } else if (stop == ReplayReport::Stop::EndOfRecording) {
    r.message = "ran past the end of the recording before reaching " + f.targetText;
  } else if (f.target == ReplayTarget::Kind::Crash &&
             ((recordedDied && died && sig == f.recordedSignal) || sameException)) {
    r.exitCode = kExitOk;
    r.message = died ? "reproduced the crash: " + std::string(strsignal(sig))
                     : "reproduced the exception: " + tools::printableSummary(rep.exception.value_or(""), kTextMax);
  } else {
    // The process ended without a stop at the target. Where the recording ended the same way
    // (same exception kind, signal or status) this is the end; anything else is a divergence.
    const bool sameEnd = died     ? recordedDied && sig == f.recordedSignal
                         : raised ? sameException
                                  : !f.recordedExit || status == *f.recordedExit;
    const bool atEnd = f.target == ReplayTarget::Kind::End && stop == ReplayReport::Stop::Exit;
    if (!sameEnd) {
      r.exitCode = kExitDivergence;
      std::string recorded = recordedDied ? "was killed by " + signalText(f.recordedSignal)
                             : recordedRaised
                                 ? "raised " + (f.recordedExceptionType.empty()
                                                    ? std::string("an exception")
                                                    : tools::printableSummary(f.recordedExceptionType, kTextMax))
                             : f.recordedExit ? "exited with status " + std::to_string(*f.recordedExit)
                                              : "did not";
      r.message = "diverged: the replayed job " + ended + "; the recording " + recorded + "; " +
                  lastVerified(r.verified, f.jumpStep);
    } else if (atEnd && r.verified + static_cast<uint64_t>(std::max<int64_t>(f.jumpStep, 0)) < f.recordedSteps) {
      r.exitCode = kExitDivergence;
      r.message = "diverged: the replayed job ended after " + std::to_string(r.verified) + " of " +
                  std::to_string(f.recordedSteps) + " recorded steps; " + lastVerified(r.verified, f.jumpStep);
    } else if (atEnd) {
      r.exitCode = kExitOk;
      r.message = "replayed to the end";
    } else {
      r.message = "ended before reaching " + f.targetText + ": the replayed job " + ended + "; " +
                  lastVerified(r.verified, f.jumpStep);
    }
  }
  return r;
}

}  // namespace dlrr

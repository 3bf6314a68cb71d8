#pragma once
// The session of one process, as the interposer's C API sees it: what recording and replay
// both do at the hook's calls (rr's Session, with RecordSession and ReplaySession below it).
// Record writes what happens; replay checks it against the trace. The calls only one side
// has stay on that side: batch values, RNG states and triage facts are recorded
// (RecordSession), batches and recorded values are served (ReplaySession, dlrr_replay_*).
// What escapes an implementation is caught by the C API: a failing session never harms the job.
#include <cstdint>

#include "session/Config.h"
#include "session/TensorDigest.h"

namespace dlrr {

// What began a step (and will end it): dlrr_step_begin's by_optimizer.
enum class StepRule : int { Batch = 0, Optimizer = 1, Backward = 2, GradientCall = 3 };

class ProcessSession {
 public:
  virtual ~ProcessSession() = default;

  virtual Mode mode() const noexcept = 0;
  // Recording: not turned off. Replay: this process is the one the stream recorded.
  virtual bool active() const noexcept = 0;
  // The capture level of the recording: what digests there are.
  virtual int captureLevel() const noexcept = 0;
  virtual int64_t currentStep() const noexcept = 0;

  virtual void stepBegin(int64_t step, uint32_t loader, uint64_t batchIndex, int64_t epoch, StepRule rule) = 0;
  virtual void stepEnd(int64_t step, double loss) = 0;

  // Digests a tensor of the current step into `out`. Record: recorded (kept for the failure
  // ring when `keep`), returns 0 or -1. Replay: checked against the recording, returns 0
  // match, 1 differs, 2 not in the recording.
  virtual int digest(int kind, const char* path, uint32_t callIndex, uint32_t output, const char* dtype, int ndim,
                     const int64_t* shape, const void* data, uint64_t nbytes, bool keep, DigestResult& out) = 0;
  // digest() of a host tensor kept for the failure ring without a copy (record, default
  // capture): the caller keeps `data` alive and unchanged-or-detected (FailureRing::keepBorrowed)
  // while its step is >= *floor. *borrowedStep: the step it was borrowed under, -1 when it was
  // not borrowed (copied, written, or not kept: nothing to hold). The default copies.
  virtual int digestBorrowed(int kind, const char* path, uint32_t callIndex, uint32_t output, const char* dtype,
                             int ndim, const int64_t* shape, const void* data, uint64_t nbytes, DigestResult& out,
                             int64_t& borrowedStep, int64_t& floor) {
    borrowedStep = -1;
    floor = INT64_MAX;
    return digest(kind, path, callIndex, output, dtype, ndim, shape, data, nbytes, true, out);
  }
  // A digest computed elsewhere (on the device: `algorithm` 1 = TensorDigest.Algorithm.deviceSum).
  // Record: recorded like digest()'s, 0 or -1. Replay: checked at the current step against a
  // recorded digest of the same algorithm, answered like digest().
  virtual int digestValues(int kind, const char* path, uint32_t callIndex, uint32_t output, const char* dtype, int ndim,
                           const int64_t* shape, int algorithm, const DigestResult& d) = 0;
  // The job's exception (the hook's excepthook). Record: the Failure event; replay: the report.
  virtual void failureException(const char* type, const char* message, const char* where, int n,
                                const char* const* files, const int32_t* lines, const char* const* functions,
                                const char* const* code) = 0;

  // torch.distributed: a collective this rank issued, numbered in issue order (the same on
  // both sides), and one of its tensors. collectiveTensor returns 0 (recorded, or matches),
  // 1 differs, 2 not in the recording, -1 on error.
  virtual uint64_t collectiveBegin(const char* op, const char* group, const char* reduceOp, int peer, int bucket,
                                   bool asyncOp) = 0;
  virtual int collectiveTensor(uint64_t seq, bool result, const char* dtype, int ndim, const int64_t* shape,
                               const void* data, uint64_t nbytes) = 0;
};

}  // namespace dlrr

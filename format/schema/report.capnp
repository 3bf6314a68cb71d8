# The replay report: what the replayed job's library (ReplaySession) tells dlreplay, in the file
# named by DLRR_REPORT (DLRR_REPORT.rank<R> under --all-ranks). One standard (unpacked) Cap'n
# Proto message with a ReplayReport root, the whole file, rewritten at every verified step and
# at the stop through a temporary file and a rename: a reader sees the previous report or the
# new one, never a torn one. Not part of a trace: the writer and the reader are one install's.
# Evolution rule as dlrr.capnp's: only add fields with new ordinals; never renumber or change a
# field's type. The C++ side is replayer/ReplayReport.h; docs/format.md "The replay report".
@0xe2f2f5e804728519;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("dlrr::schema");

struct ReplayReport {
  stop @0 :Stop;                 # why this report was written (running: at a verified step)
  target @1 :Text;               # ReplayTarget::describe()
  targetStep @2 :Int64;
  targetWhere @3 :Text;
  verifiedSteps @4 :Int64;       # consecutive from the jump step (0 without a jump)
  recordedSteps @5 :Int64;
  lastStep @6 :Int64;            # the last step that ended (-1: none)
  jumpStep @7 :Int64 = -1;       # jump replay: the snapshot's step; -1: replayed from the start
  divergence @8 :Divergence;     # unset: none
  gpu @9 :Gpu;                   # unset: nothing to say about the GPU
  dist @10 :Dist;                # unset: no collectives recorded or issued
  hook @11 :HookFacts;           # what the Python hook added (dlrr_replay_fact)
  warnings @12 :List(Text);

  enum Stop {
    running @0;                  # written at a verified step; the job goes on
    exit @1;                     # the process exited (no stop before)
    target @2;                   # the target was reached
    endOfRecording @3;           # the job went past what the recording holds
    divergence @4;               # the replay did what the recording did not
    unservable @5;               # a collective the trace cannot serve
    stop @6;                     # a stop without a reason
  }

  # The first divergence of the recorded digests.
  struct Divergence {
    step @0 :Int64;
    kind @1 :Text;               # "module output", "gradient", ... (TensorDigest.Kind, named)
    path @2 :Text;
    detail @3 :Text;
  }

  struct Gpu {
    capture @0 :Text;            # unset: not known; "on", "off: why", "not started (...)"
    recorded @1 :Text;           # unset: the recording captured launches; else why not
    launches @2 :Launches;       # unset: no step's launch sequence compared
    launchDivergence @3 :LaunchDivergence;  # unset: none
    launchAtStop @4 :Text;       # unset: nothing; the launch the stop happened at
    incomparableDigests @5 :UInt64;  # digests computed on another device than recorded
  }

  struct Launches {
    stepsChecked @0 :Int64;
    stepsMatched @1 :Int64;
  }

  struct LaunchDivergence {
    step @0 :Int64;
    position @1 :UInt64;
    detail @2 :Text;
  }

  struct Dist {
    rank @0 :Int32;              # the recorded rank
    issued @1 :UInt64;           # collectives issued by the replay
    recorded @2 :UInt64;         # collectives in the recording
    tensorsVerified @3 :UInt64;
    resultsServed @4 :UInt64;
  }

  # Facts the Python hook adds. A Text unset: not said; lists keep their order.
  struct HookFacts {
    stopStep @0 :Text;           # the step open at the stop, "-" between steps
    stopWhere @1 :Text;          # where the replay stopped, in words
    batchSamples @2 :List(Text); # the batch's suspicious samples (nan target)
    backwardFunction @3 :Text;   # the autograd function that returned nan
    backwardForwardLine @4 :Text;  # the job's forward line it came from
    envThreads @5 :Text;         # thread counts restored to the recorded ones
    gpuCaptureStatus @6 :Text;
    jumpRestored @7 :Text;       # what the jump's snapshot restored
    unverified @8 :List(Text);   # what could not be verified (torch.compile'd code, ...)
    exception @9 :Text;          # "Type: message" of an exception the job raised
    exceptionWhere @10 :Text;
    distGroup @11 :Text;         # how the process group replays (a rank alone: served)
    distCommHook @12 :Text;      # the job's DDP comm hook, not run when served
    # The failure explained (nan target, pyhook/python/dlrr_hook/explain.py): the first op
    # whose output was non-finite, where the job called it, its inputs, the cause, the build-up.
    explainOp @13 :Text;         # "aten::mul in forward (module fc1)"
    explainLine @14 :Text;       # the job's own source line that called it
    explainInputs @15 :Text;     # one input a line: finite?, max |x|, dtype max
    explainCause @16 :Text;      # the kind of fault, in words with the numbers
    explainHistory @17 :Text;    # the recorded steps before it: loss curve, gradients, LR
    # dlreplay --what-if (pyhook/python/dlrr_hook/whatif.py, tools/dlreplay/WhatIf.h).
    whatIfChange @18 :Text;      # the change and the step it started at
    whatIfVerdict @19 :Text;     # "recurred at step N: ..." or "did not recur: ..."
    whatIfLosses @20 :Text;      # one step a line: the recorded loss beside the replayed one
  }
}

# dlrr trace schema. Evolution rule: only add fields/union members with new ordinals; never
# renumber or change a field's type. Format-breaking changes bump the frame-level major
# version in format/Frame.h instead (see docs/format.md).
@0xc3a1d6f2b8e47a15;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("dlrr::schema");

# ---------------------------------------------------------------- stream header
# First frame (kind HEADER) of every stream file.
struct StreamHeader {
  streamName @0 :Text;       # file name without extension, unique within the trace
  role @1 :Role;
  pid @2 :Int32;
  ppid @3 :Int32;
  parentStream @4 :Text;     # stream of the process that forked/exec'd us, if known
  startNs @5 :Int64;         # CLOCK_REALTIME at stream creation
  argv @6 :List(Text);
  cwd @7 :Text;
  exe @8 :Text;
  trace @9 :TraceInfo;       # set in the launcher stream only
  dlrrVersion @10 :Text;
  formatMinor @11 :UInt16;
  # torch.distributed (docs/distributed.md): what the launcher (torchrun) told this process
  # through its environment. rank -1: not a rank of a distributed job (as far as we know).
  rank @12 :Int32 = -1;
  localRank @13 :Int32 = -1;
  worldSize @14 :Int32 = 0;
  restartCount @15 :Int32 = 0;   # TORCHELASTIC_RESTART_COUNT: restarts of the job so far
  runId @16 :Text;               # TORCHELASTIC_RUN_ID
  host @17 :Text;                # hostname of this process (ranks may run on many hosts)
  distEnv @18 :List(KeyValue);   # the launcher-set variables a rank needs to run alone
                                 # (RANK, WORLD_SIZE, MASTER_*, TORCHELASTIC_*, OMP_NUM_THREADS, ...)
  # A multiprocessing.Process of the job (Hogwild trainers, fork or spawn): its identity,
  # the order its parent created it in ("1", "2", nested "1:2"), from DLRR_PROCESS_ID that the
  # Python hook sets around Process.start(). Replay matches a process to its stream by it.
  processIdentity @19 :Text;

  enum Role {
    launcher @0;             # dlrecord itself: command, environment, exit status
    process @1;              # a recorded process of the job
  }
}

struct KeyValue {
  key @0 :Text;
  value @1 :Text;
}

# Trace-wide facts, written once by the launcher.
struct TraceInfo {
  createdNs @0 :Int64;
  host @1 :Text;
  user @2 :Text;
  uid @3 :UInt32;
  command @4 :List(Text);    # argv of the recorded job
  cwd @5 :Text;
  env @6 :List(KeyValue);    # redacted values are replaced by "<redacted>"
  redactedNames @7 :List(Text);
  redactPatterns @8 :List(Text);
  cpuModel @9 :Text;
  cpuCount @10 :UInt32;
  kernel @11 :Text;
  captureMode @12 :Text;     # minimal | default | full
  options @13 :List(KeyValue);
}

# ---------------------------------------------------------------- events
# An EVENTS frame payload is a sequence of standard (unpacked) Cap'n Proto messages, each
# with an Event root, back to back.
struct Event {
  tNs @0 :Int64;             # CLOCK_MONOTONIC ns since the stream's start
  step @1 :Int64;            # training step in progress, -1 before the first
  thread @2 :UInt32;         # small per-process thread number (0 = first seen)
  union {
    note @3 :Text;
    processStart @4 :ProcessStart;
    fork @5 :Fork;
    processExit @6 :ProcessExit;
    entropy @7 :Entropy;
    rngState @8 :RngState;
    batch @9 :Batch;
    stepBegin @10 :StepBegin;
    stepEnd @11 :StepEnd;
    loss @12 :Loss;
    digest @13 :TensorDigest;
    tensor @14 :FullTensor;
    cudaLaunch @15 :CudaLaunch;
    cudaMemcpy @16 :CudaMemcpy;
    failure @17 :Failure;
    runtimeInfo @18 :RuntimeInfo;
    internedString @19 :InternedString;
    loaderEnd @20 :LoaderEnd;
    recorderStatus @21 :RecorderStatus;
    # Triage facts (docs/triage.md): aggregated, written at step commits, failures and exit.
    missingPaths @22 :MissingPaths;
    libraryLoadError @23 :LibraryLoadError;
    resourcePeak @24 :ResourcePeak;
    packages @25 :Packages;
    # torch.distributed (docs/distributed.md)
    collective @26 :Collective;
    # Data-less replay (docs/replay.md): what the job's main process read from its files.
    file @27 :FileFact;
    # Jump replay (docs/replay.md): training state at the start of a step.
    snapshot @28 :Snapshot;
    # Hangs (docs/distributed.md): where a rank waited, taken by the hook's watchdog.
    collectiveWait @29 :CollectiveWait;
  }
}

# The training state at the start of step `step` (modules, gradients, optimizers, LR
# schedulers, grad scalers) as a structured value: tensors are blobs (content-addressed, so an
# unchanged tensor costs its bytes once), no pickle. Layout in docs/format.md.
struct Snapshot {
  step @0 :Int64;
  reason @1 :Reason;
  value @2 :Value;
  tensorBytes @3 :UInt64;    # raw bytes of its tensors
  newBytes @4 :UInt64;       # of which not already in the stream (after dedup)
  window @5 :Bool;           # held in memory with the batch window and written with it (at
                             # failure or exit), where the window's data-less replay starts
  enum Reason {
    periodic @0;             # dlrecord --snapshot-every
    failure @1;              # first non-finite value of the recording, taken in that step
  }
}

struct ProcessStart {
  pid @0 :Int32;
  ppid @1 :Int32;
  argv @2 :List(Text);
}

struct Fork {
  childPid @0 :Int32;
  childStream @1 :Text;      # the stream the child records itself ("p<pid>", created on its
                             # first event); empty when it records nothing until it execs
  childIdentity @2 :Text;    # its DLRR_PROCESS_ID (StreamHeader.processIdentity) when it has one
  kind @3 :Kind;

  enum Kind {
    unknown @0;              # traces before kinds; a fork in a process without the Python hook
                             # (a shell): its commands exec and record themselves
    recorded @1;             # a Python-level fork (os.fork, a multiprocessing Process): the
                             # child records its own stream, childStream
    loaderWorker @2;         # a DataLoader worker: not recorded (its batches are, in the parent)
    native @3;               # forked by native code in a process with the Python hook (not
                             # through os.fork): not recorded unless it execs
  }
}

struct ProcessExit {
  pid @0 :Int32;
  exited @1 :Bool;           # true: exit code; false: killed by signal
  code @2 :Int32;            # exit code, or signal number
  exitCode @3 :Int32;        # shell convention: code, or 128+signal
}

struct Entropy {
  source @0 :Source;
  flags @1 :UInt32;          # getrandom flags
  data @2 :Data;             # the bytes handed to the program
  requested @3 :UInt64;      # bytes asked for (data may be shorter on a short read)
  enum Source {
    getrandom @0;
    getentropy @1;
    devUrandom @2;
    devRandom @3;
  }
}

struct BlobRef {
  hashLo @0 :UInt64;         # XXH3-128 of the raw (uncompressed, unshuffled) bytes
  hashHi @1 :UInt64;
  size @2 :UInt64;           # raw byte length
}

struct RngState {
  kind @0 :Kind;
  device @1 :Int32;
  state @2 :BlobRef;
  # Taken as a forked process (a Hogwild trainer) began its own stream: the states it inherited
  # from its parent, which replay does not replay; restored when the fork attaches in replay.
  atFork @3 :Bool;
  enum Kind {
    torchCpu @0;
    torchCuda @1;
    numpy @2;
    python @3;
  }
}

struct TensorRef {
  dtype @0 :Text;            # torch dtype name without prefix: float32, int64, bfloat16, ...
  shape @1 :List(Int64);
  data @2 :BlobRef;          # contiguous, row-major bytes
  device @3 :Text;
  requiresGrad @4 :Bool;
}

# A structured value (batches): no pickle, only these shapes.
struct Value {
  union {
    none @0 :Void;
    bool @1 :Bool;
    int @2 :Int64;
    float @3 :Float64;
    text @4 :Text;
    bytes @5 :Data;
    tensor @6 :TensorRef;
    list @7 :List(Value);
    tuple @8 :List(Value);
    dict @9 :List(DictEntry);
    opaque @10 :Text;        # unsupported object: its type name (replay cannot serve it)
  }
}

struct DictEntry {
  key @0 :Text;
  value @1 :Value;
}

struct Batch {
  loader @0 :UInt32;         # DataLoader number, in creation order
  iteration @1 :UInt32;      # how many iterators this loader made before this one
  index @2 :UInt64;          # batch number within this loader, across iterations
  sampleIndices @3 :List(Int64);
  value @4 :Value;
  isTraining @5 :Bool;       # this batch began a training step
  # Bounded traces (docs/recording.md, "Batches by reference"): a batch of a map-style dataset
  # recorded by reference keeps its value tree (dtypes, shapes, blob hashes) but its tensor
  # blobs are in the stream only when the batch was in the window when it was written (at the
  # job's failure or exit), possibly after later events, or never. Replay with the dataset
  # re-makes it through the job's pipeline and checks it against `digest`.
  byReference @6 :Bool;
  digest @7 :UInt64;         # session/BatchDigest of the value (0: none computed)
  sampleDigests @8 :List(UInt64);  # per sample position (rows of tensors led by the sample count)
}

struct LoaderEnd {
  loader @0 :UInt32;
  iteration @1 :UInt32;
  batches @2 :UInt64;        # batches this iterator yielded
}

struct StepBegin {
  step @0 :Int64;
  loader @1 :UInt32;         # batch that began it (when steps are DataLoader-driven)
  batchIndex @2 :UInt64;
  epoch @3 :Int64;
  byOptimizer @4 :Bool;      # no DataLoader: steps counted by optimizer.step()
  byBackward @5 :Bool;       # no DataLoader, no optimizer: steps counted by backward()
  byGradientCall @6 :Bool;   # no DataLoader, optimizer nor backward(): steps counted by calls of
                             # a torch.func gradient transform (grad, grad_and_value)
}

struct StepEnd {
  step @0 :Int64;
  loss @1 :Float64;          # NaN when no loss was seen
  nonFinite @2 :UInt64;      # non-finite values seen in this step's digests
  digests @3 :UInt32;
  untrained @4 :Bool;        # no backward() nor optimizer.step() ran in it (an evaluation
                             # batch drawn with gradients enabled): no loss, not a training step
}

struct Loss {
  value @0 :Float64;
  digest @1 :TensorDigest;
}

struct TensorDigest {
  kind @0 :Kind;
  path @1 :Text;             # module path ("" = root), parameter name, or label
  callIndex @2 :UInt32;      # n-th call of this path within the step
  dtype @3 :Text;
  shape @4 :List(Int64);
  hash @5 :UInt64;           # XXH3-64 of the raw bytes: bit-exact
  nanCount @6 :UInt64;
  infCount @7 :UInt64;
  min @8 :Float64;           # over finite values; NaN when none
  max @9 :Float64;
  output @10 :UInt32;        # which output of a module returning several tensors
  algorithm @11 :Algorithm;  # how hash (and the figures) were computed; compare like with like
  enum Kind {
    moduleOutput @0;
    gradient @1;
    parameter @2;
    loss @3;
    batch @4;
    other @5;
    moduleInput @6;
  }
  enum Algorithm {
    xxh3 @0;                 # XXH3-64 of the raw bytes, on the host (CPU tensors)
    deviceSum @1;            # position-weighted checksum of the 32-bit words, computed with
                             # tensor ops where the tensor lives (CUDA tensors; docs/gpu.md)
  }
}

struct FullTensor {
  kind @0 :TensorDigest.Kind;
  path @1 :Text;
  callIndex @2 :UInt32;
  output @3 :UInt32;
  tensor @4 :TensorRef;
}

struct CudaLaunch {
  seq @0 :UInt32;            # launch number within the step
  nameId @1 :UInt32;         # InternedString id of the kernel name
  gridX @2 :UInt32;
  gridY @3 :UInt32;
  gridZ @4 :UInt32;
  blockX @5 :UInt32;
  blockY @6 :UInt32;
  blockZ @7 :UInt32;
  sharedMem @8 :UInt32;
  stream @9 :UInt64;
  device @10 :UInt32;
  correlationId @11 :UInt32;
  flags @12 :UInt32;         # 1 the launch failed, 2 completed by a nested (driver) call,
                             # 4 grid/block from the mirrored __cudaLaunchKernel layout,
                             # 8 grid/block from a documented parameter struct (0: unknown)
}

struct CudaMemcpy {
  seq @0 :UInt32;
  direction @1 :Direction;
  bytes @2 :UInt64;
  digest @3 :UInt64;         # XXH3-64 of host->device payloads, 0 otherwise
  stream @4 :UInt64;
  device @5 :UInt32;
  flags @6 :UInt32;          # 1 the copy failed, 2 completed by a nested call, 16 digest
                             # taken, 32 the host source was unreadable (no digest)
  correlationId @7 :UInt32;
  enum Direction {
    hostToDevice @0;
    deviceToHost @1;
    deviceToDevice @2;
    other @3;
  }
}

struct PyFrame {
  file @0 :Text;
  line @1 :Int32;
  function @2 :Text;
  code @3 :Text;
}

struct Failure {
  kind @0 :Kind;
  step @1 :Int64;
  where @2 :Text;            # module path / "loss" / "grad:NAME" / "file:line"
  message @3 :Text;
  exceptionType @4 :Text;
  traceback @5 :List(PyFrame);
  signal @6 :Int32;
  signalCode @7 :Int32;
  faultAddress @8 :UInt64;
  nativeStack @9 :List(UInt64);  # instruction pointers, innermost first
  nativeSymbols @10 :List(Text);
  pythonStack @11 :Text;     # faulthandler's text dump
  callIndex @12 :UInt32;
  digestKind @13 :TensorDigest.Kind;
  ringTensors @14 :UInt32;   # nonfinite: failure-ring tensors of this step written right after
                             # this event (fewer in the stream: the process ended first)
  ringChanged @15 :UInt32;   # nonfinite: failure-ring tensors (any step) left out because their
                             # bytes changed after their hook (in place, or freed) and are not what it digested
  enum Kind {
    nonfinite @0;
    exception @1;
    signal @2;
  }
}

struct RuntimeInfo {
  items @0 :List(KeyValue);  # python, torch, cuda, cudnn, driver, gpu, blas, threads, ...
}

struct InternedString {
  id @0 :UInt32;
  text @1 :Text;
}

struct RecorderStatus {
  ok @0 :Bool;
  message @1 :Text;          # why something is not being recorded
}

# ---------------------------------------------------------------- triage facts
# File-system lookups that failed (open, stat, access, mkdir, ...), aggregated per path. An
# event holds the entries that are new or changed since the previous MissingPaths event of
# the stream, each with its cumulative count: readers merge them by (path, op, error).
struct MissingPaths {
  paths @0 :List(MissingPath);
  droppedPaths @1 :UInt64;   # distinct paths not kept (over the cap), so far
  droppedFailures @2 :UInt64;  # failures on those paths, so far
}

struct MissingPath {
  path @0 :Text;             # absolute when it could be resolved (cwd, dirfd)
  error @1 :Int32;           # errno: ENOENT, ENOTDIR, EACCES, EPERM, EROFS, ENOSPC, ...
  op @2 :Op;
  count @3 :UInt64;          # failures so far
  firstNs @4 :Int64;         # Event.tNs clock: when it first failed
  firstStep @5 :Int64;       # training step in progress then (-1 before the first)
  enum Op {
    open @0;                 # open for reading
    create @1;               # open for writing / O_CREAT
    stat @2;                 # stat, lstat, fstatat
    access @3;               # access, faccessat
    mkdir @4;
    opendir @5;
    other @6;
  }
}

# A shared library that failed to load (dlopen returned NULL), with the loader's message.
struct LibraryLoadError {
  name @0 :Text;             # as passed to dlopen
  error @1 :Text;            # dlerror()
  count @2 :UInt64;
  firstNs @3 :Int64;
  firstStep @4 :Int64;
}

# Resource high-water marks. Written by a process at exit, at a failure and when its peak
# grows at a step commit; by the launcher (reason "launcher") for the whole job after it ended.
struct ResourcePeak {
  reason @0 :Text;           # step | failure | exit | launcher
  maxRssBytes @1 :UInt64;    # peak resident set (getrusage ru_maxrss; the launcher: of its children)
  vmPeakBytes @2 :UInt64;    # peak virtual size (VmPeak), 0 when unknown
  addressSpaceLimit @3 :UInt64;  # RLIMIT_AS soft limit (ulimit -v) in bytes, 0 = unlimited
  memoryLimit @4 :UInt64;    # cgroup memory.max in bytes, 0 = none or unknown
  memTotal @5 :UInt64;       # the machine's MemTotal in bytes
  oomKills @6 :UInt64;       # launcher: cgroup OOM kills (memory.events oom_kill) during the job
  gpus @7 :List(GpuMemory);  # when the job initialised CUDA (from torch.cuda, via the hook)
  cpuUserNs @8 :UInt64;      # CPU time so far (getrusage)
  cpuSystemNs @9 :UInt64;
}

struct GpuMemory {
  device @0 :Int32;
  maxAllocated @1 :UInt64;   # torch.cuda.max_memory_allocated
  maxReserved @2 :UInt64;    # torch.cuda.max_memory_reserved
  total @3 :UInt64;          # the device's total memory
}

# Top-level Python packages the job had imported (at a failure or at exit).
struct Packages {
  reason @0 :Text;           # failure | exit
  items @1 :List(Package);
}

struct Package {
  name @0 :Text;             # top-level module name (torch, numpy, ...)
  version @1 :Text;          # __version__ or the distribution's version; "" when unknown
  path @2 :Text;             # where it was imported from (the package directory or module file)
}

# ---------------------------------------------------------------- distributed
# One collective communication as this rank saw it, in the order the rank issued them (seq):
# torch.distributed calls (all_reduce, broadcast, all_gather, ...) and DDP gradient buckets
# (through a DDP communication hook). Replay of one rank alone serves `results` in seq order.
struct Collective {
  seq @0 :UInt64;            # collective number within the process, in issue order
  op @1 :Text;               # all_reduce | broadcast | all_gather | reduce_scatter | reduce |
                             # barrier | send | recv | all_to_all | gather | scatter | ddp_bucket
  group @2 :Text;            # "world" or the group's ranks ("0,2,3")
  reduceOp @3 :Text;         # sum | avg | product | min | max | ... ("" when not a reduction)
  peer @4 :Int32 = -1;       # root / src / dst rank (global numbering), -1 when none
  bucket @5 :Int32 = -1;     # DDP bucket index
  inputs @6 :List(CollectiveTensor);   # what this rank sent (before the call)
  results @7 :List(CollectiveTensor);  # what the call left in this rank's tensors
  asyncOp @8 :Bool;          # async_op=True: results recorded when the work completed
  status @9 :Text;           # "" ok; else why results are missing (error text)
}

# A rank's position in its collectives when it stopped meeting its peers, and every Python
# thread's stack then: written (and committed) by the hook's watchdog when a collective has been
# in flight longer than --hang-after, when no collective began for that long after the last
# one completed, or when the launcher's SIGTERM arrived.
struct CollectiveWait {
  reason @0 :Reason;
  waiting @1 :Bool;          # a collective was issued and not completed (seq/op/group/issuedStep)
  seq @2 :UInt64;
  op @3 :Text;
  group @4 :Text;
  issuedStep @5 :Int64;
  completedSeq @6 :Int64 = -1;   # the last collective completed (-1: none yet)
  completedOp @7 :Text;
  completedStep @8 :Int64 = -1;
  waitedMs @9 :UInt64;       # since the issue (waiting) or the last completion
  stacks @10 :Text;          # every Python thread's stack, the waiting thread first
  enum Reason {
    hang @0;                 # in a collective longer than --hang-after
    stalled @1;              # no collective for longer than --hang-after since the last one
    terminated @2;           # SIGTERM (torchrun stopping the job after another rank failed)
  }
}

struct CollectiveTensor {
  dtype @0 :Text;
  shape @1 :List(Int64);
  hash @2 :UInt64;           # XXH3-64 of the raw bytes (bit-exact)
  nanCount @3 :UInt64;
  infCount @4 :UInt64;
  data @5 :BlobRef;          # the bytes, when kept (results only: --collectives full, or the
                             # failure ring); size 0 and hash 0 when not kept
}

# ---------------------------------------------------------------- files (docs/replay.md)
# One thing the job's main process learnt from the file system, outside DataLoader batch
# fetches: what a path is (stat), what a directory lists, or bytes it read from a file. Each
# fact about a path is written once (again only if it changed); bytes are blobs, so a range
# read twice is stored once. Replay rebuilds these paths in a scratch tree and serves them
# where the real path is missing.
struct FileFact {
  path @0 :Text;             # absolute, lexically normalised, as the job named it
  kind @1 :Kind;
  size @2 :UInt64;           # st_size
  mode @3 :UInt32;           # st_mode
  mtimeNs @4 :Int64;         # st_mtim
  entries @5 :List(DirEntry);  # directories: what a listing returned (hasEntries)
  hasEntries @6 :Bool;
  offset @7 :UInt64;         # where `data` starts in the file
  data @8 :BlobRef;          # bytes the job used (size 0: none): the whole file when small,
                             # else only the ranges it touched (np.memmap slices)
  enum Kind {
    file @0;
    directory @1;
    symlink @2;
    other @3;
  }
}

struct DirEntry {
  name @0 :Text;
  kind @1 :FileFact.Kind;
}

# ---------------------------------------------------------------- footer
# Written once at clean close (kind FOOTER), followed by the 16-byte trailer.
struct Footer {
  steps @0 :List(StepIndex);
  blobs @1 :List(BlobIndex);
  events @2 :UInt64;
  frames @3 :UInt64;
  rawBytes @4 :UInt64;       # bytes before compression
  storedBytes @5 :UInt64;    # bytes of all frames
  blobsDeduplicated @6 :UInt64;
  lastStep @7 :Int64;
}

struct StepIndex {
  step @0 :Int64;
  frameOffset @1 :UInt64;    # EVENTS frame holding the step's StepBegin
}

struct BlobIndex {
  hashLo @0 :UInt64;
  hashHi @1 :UInt64;
  frameOffset @2 :UInt64;    # first chunk's BLOB frame
}

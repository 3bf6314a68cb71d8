/* The C API of the preloaded library (libdlrr.so), used by the Python hook through ctypes.
 *
 * Contract:
 * - Every function is safe to call in any mode; when recording is off (mode 0) they return
 *   at once. None of them ever raises a signal, aborts, or lets a C++ exception escape.
 * - Strings are UTF-8, NUL-terminated, borrowed for the duration of the call.
 * - Pointers to tensor data are read during the call only (the library copies what it keeps).
 * - Thread-safe. Batch building (dlrr_batch_begin .. dlrr_batch_end) is per calling thread.
 *
 * Decisions live on this side: what a failure is (first non-finite digest), what is
 * committed when, and, in replay, whether a recomputed digest matches the recording.
 */
#ifndef DLRR_DLRR_H
#define DLRR_DLRR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define DLRR_API extern "C" __attribute__((visibility("default")))
#else
#define DLRR_API __attribute__((visibility("default")))
#endif

enum dlrr_mode_t { DLRR_MODE_OFF = 0, DLRR_MODE_RECORD = 1, DLRR_MODE_REPLAY = 2 };

/* Digest kinds: same numbering as schema TensorDigest.Kind. */
enum dlrr_digest_kind_t {
  DLRR_DIGEST_MODULE_OUTPUT = 0,
  DLRR_DIGEST_GRADIENT = 1,
  DLRR_DIGEST_PARAMETER = 2,
  DLRR_DIGEST_LOSS = 3,
  DLRR_DIGEST_BATCH = 4,
  DLRR_DIGEST_OTHER = 5,
  DLRR_DIGEST_MODULE_INPUT = 6
};

/* RNG kinds: same numbering as schema RngState.Kind. */
enum dlrr_rng_kind_t { DLRR_RNG_TORCH_CPU = 0, DLRR_RNG_TORCH_CUDA = 1, DLRR_RNG_NUMPY = 2, DLRR_RNG_PYTHON = 3 };

typedef struct dlrr_digest {
  uint64_t hash; /* XXH3-64 of the raw bytes */
  uint64_t nan_count;
  uint64_t inf_count;
  double min; /* over finite values; NaN when there are none */
  double max;
} dlrr_digest_t;

/* ---- mode and status */
DLRR_API int dlrr_mode(void);
/* Why recording is off or degraded ("" when all is well). */
DLRR_API const char* dlrr_status(void);
DLRR_API const char* dlrr_trace_dir(void);
/* Capture level: -1 process (no steps: entropy, files, processes, exceptions), 0 minimal
 * (batches, RNG, loss, failures), 1 default (+ digests), 2 full (+ every module output tensor
 * every step). */
DLRR_API int dlrr_capture_level(void);
/* The descriptor the hook points faulthandler at, so that a fatal signal's Python stack is
 * embedded in the trace by the native handler: the library's own (one descriptor for both,
 * above the job's descriptor limit where the limits allow), owned by the library; -1 when off. */
DLRR_API int dlrr_pystack_fd(void);
/* 1: after enabling faulthandler, put the library's fatal-signal handlers back in front of it
 * (they record the kernel's fault code and address, then run faulthandler); 0: put faulthandler
 * back in front, before disabling it. Returns the number of signals changed. */
DLRR_API int dlrr_fatal_signals_first(int first);

/* ---- process facts */
DLRR_API void dlrr_runtime_info(const char* key, const char* value);
DLRR_API void dlrr_note(const char* text);
/* The hook reports what it could not record (e.g. "torch not imported: no step capture"). */
DLRR_API void dlrr_recorder_status(int ok, const char* message);

/* ---- steps. dlrr_step_end is the commit point: it returns once the step is durable
 * (dlrr_step_end_deferred: the next dlrr_batch_end). */
/* by_optimizer is the counting rule (enum dlrr_step_rule_t): a DataLoader batch began the step,
 * or steps are counted by optimizer.step(), by backward() (no DataLoader, no optimizer), or by
 * calls of a torch.func gradient transform (no DataLoader, no optimizer, no backward()). */
enum dlrr_step_rule_t {
  DLRR_STEP_BY_BATCH = 0,
  DLRR_STEP_BY_OPTIMIZER = 1,
  DLRR_STEP_BY_BACKWARD = 2,
  DLRR_STEP_BY_GRADIENT_CALL = 3
};
DLRR_API void dlrr_step_begin(int64_t step, uint32_t loader, uint64_t batch_index, int64_t epoch, int by_optimizer);
/* The open step ran no backward() and no optimizer.step(): not a training step (recorded at its end). */
DLRR_API void dlrr_step_untrained(int64_t step);
DLRR_API void dlrr_step_end(int64_t step, double loss);
/* dlrr_step_end for a step that ends at a DataLoader batch delivery: returns once the step end is
 * queued, and the writer thread writes it while the hook records the next step's RNG states and
 * batch. The step is durable when the next dlrr_batch_end (or dlrr_step_wait_durable) returns,
 * still before the job's code runs again. Replay: dlrr_step_end. */
DLRR_API void dlrr_step_end_deferred(int64_t step, double loss);
DLRR_API void dlrr_step_wait_durable(void);
/* Entropy this thread draws between enter (1) and exit (0) is a DataLoader's own worker
 * machinery (queue semaphores, connection challenges): recorded marked, skipped by replay. */
DLRR_API void dlrr_entropy_loader_scope(int enter);
DLRR_API int64_t dlrr_current_step(void);

/* ---- RNG state (raw bytes of the generator's state), at every step boundary */
DLRR_API void dlrr_rng_state(int kind, int device, const void* data, uint64_t n);
/* A forked trainer, as it begins its own stream: the states it inherited from its parent. */
DLRR_API void dlrr_rng_state_at_fork(int kind, int device, const void* data, uint64_t n);
/* One generator's state of dlrr_rng_states: dlrr_rng_state's arguments. */
typedef struct dlrr_rng_item {
  const void* data;
  uint64_t n;
  int32_t kind;
  int32_t device;
} dlrr_rng_item_t;
/* dlrr_rng_state of n generators in one call (a step's states: one crossing instead of one
 * per generator), with the same effect as n calls in item order. */
DLRR_API void dlrr_rng_states(uint32_t n, const dlrr_rng_item_t* items);
/* dlrr_rng_states without waking the writer thread: the states of a step that commits on the
 * calling thread (an optimizer-counted step: dlrr_step_end), written with that commit. Their
 * events are only written at the commit either way; the wake cost the caller a futex call. */
DLRR_API void dlrr_rng_states_queued(uint32_t n, const dlrr_rng_item_t* items);

/* ---- batches: a structured value built depth-first. Containers announce their child
 * count; dict children are each preceded by dlrr_val_key. */
DLRR_API void dlrr_batch_begin(uint32_t loader, uint32_t iteration, uint64_t index, int is_training,
                               const int64_t* sample_indices, uint64_t n_indices);
DLRR_API void dlrr_val_list(uint32_t n);
DLRR_API void dlrr_val_tuple(uint32_t n);
DLRR_API void dlrr_val_dict(uint32_t n);
DLRR_API void dlrr_val_key(const char* key);
DLRR_API void dlrr_val_none(void);
DLRR_API void dlrr_val_bool(int v);
DLRR_API void dlrr_val_int(int64_t v);
DLRR_API void dlrr_val_float(double v);
DLRR_API void dlrr_val_str(const char* s, uint64_t n);
DLRR_API void dlrr_val_bytes(const void* p, uint64_t n);
DLRR_API void dlrr_val_opaque(const char* type_name);
/* dtype: torch name without "torch." (float32, int64, bfloat16, bool, ...). data is
 * contiguous, nbytes long. */
DLRR_API void dlrr_val_tensor(const char* dtype, uint32_t elem_size, int ndim, const int64_t* shape, const void* data,
                              uint64_t nbytes, const char* device, int requires_grad);
DLRR_API void dlrr_batch_end(void);
/* ---- training-state snapshot at the start of `step` (jump replay): one value built with the
 * dlrr_val_* calls between begin and end (docs/format.md, "Snapshots"). failure: 1 for the
 * snapshot of the step with the first non-finite value; 2 for a snapshot held in memory with
 * the batch window and written with it (dlrecord --window). */
DLRR_API void dlrr_snapshot_begin(int64_t step, int failure);
/* After dlrr_batch_begin: this batch (of a map-style dataset) is recorded by reference (its
 * digest and sample digests; its bytes only in the window, dlrecord --window). */
DLRR_API void dlrr_batch_by_reference(void);
DLRR_API void dlrr_snapshot_end(void);
/* An iterator of `loader` ended (StopIteration) after `batches` batches. */
DLRR_API void dlrr_loader_end(uint32_t loader, uint32_t iteration, uint64_t batches);

/* ---- digests. Computes the digest of a contiguous tensor (any dtype; NaN/Inf/min/max for
 * floating dtypes float16/bfloat16/float32/float64) into *out. In record mode it is written
 * to the trace (and with keep != 0 the bytes go into the failure ring of the last K steps);
 * the first non-finite digest of the process is recorded as the failure. Returns:
 *   0 recorded / matches the recording,  1 replay: differs from the recording,
 *   2 replay: the recording has no such digest,  -1 off or error. */
DLRR_API int dlrr_digest(int kind, const char* path, uint32_t call_index, uint32_t output, const char* dtype, int ndim,
                         const int64_t* shape, const void* data, uint64_t nbytes, int keep, dlrr_digest_t* out);
/* dlrr_digest of a host tensor with keep = 1, kept for the failure ring without a copy when
 * recording at the default capture: the ring holds `data` and its hash, and at a failure reads
 * the bytes again, keeping them only if they still hash as now. lease[0]: the step digested;
 * lease[1]: 1 when the ring borrowed `data` (the caller must keep that memory alive while
 * lease[0] >= the floor any later call answers), else 0 (copied, written or not kept); lease[2]:
 * the floor, the lowest step whose borrowed memory the ring may still read (it only grows;
 * INT64_MAX once the ring was written at a failure). Returns as dlrr_digest. */
DLRR_API int dlrr_digest_borrowed(int kind, const char* path, uint32_t call_index, uint32_t output, const char* dtype,
                                  int ndim, const int64_t* shape, const void* data, uint64_t nbytes, dlrr_digest_t* out,
                                  int64_t* lease);
/* One tensor of dlrr_digest_many: dlrr_digest's arguments without kind and out. */
typedef struct dlrr_digest_item {
  const char* path;
  const char* dtype;
  const int64_t* shape;
  const void* data;
  uint64_t nbytes;
  uint32_t call_index;
  uint32_t output;
  int32_t ndim;
  int32_t keep;
} dlrr_digest_item_t;
/* dlrr_digest of n tensors of one kind in one call (a step's gradients or parameters: one
 * crossing instead of n), with the same effect as n calls in item order. Returns how many
 * differ from the recording (replay), 0 when recording, -1 off or error. */
DLRR_API int dlrr_digest_many(int kind, uint32_t n, const dlrr_digest_item_t* items);
/* 1 when this process has recorded a failure (its step in *step), else 0. */
DLRR_API int dlrr_first_failure_step(int64_t* step);

/* ---- failures */
/* An uncaught Python exception. Frames innermost last (as traceback.extract_tb gives). */
DLRR_API void dlrr_failure_exception(const char* type, const char* message, const char* where, int n_frames,
                                     const char* const* files, const int32_t* lines, const char* const* functions,
                                     const char* const* code);

/* ---- triage facts (docs/triage.md). Written with the failure, at step commits and at exit. */
/* Same numbering as schema MissingPath.Op. */
enum dlrr_lookup_op_t {
  DLRR_LOOKUP_OPEN = 0,
  DLRR_LOOKUP_CREATE = 1,
  DLRR_LOOKUP_STAT = 2,
  DLRR_LOOKUP_ACCESS = 3,
  DLRR_LOOKUP_MKDIR = 4,
  DLRR_LOOKUP_OPENDIR = 5,
  DLRR_LOOKUP_OTHER = 6
};
/* A file-system lookup that failed with errno `error` (the libc hooks report open, stat,
 * access, mkdir, opendir and fopen failures themselves; this is for what they cannot see).
 * Aggregated per path: one summary event, not one event per call. */
DLRR_API void dlrr_failed_path(const char* path, int error, int op);
/* A shared library that could not be loaded, with the loader's message (dlopen failures are
 * recorded by the library itself). */
DLRR_API void dlrr_library_load_error(const char* name, const char* error);
/* GPU memory peaks of one device (torch.cuda.max_memory_allocated/reserved, total), sent by
 * the hook at a failure and at exit when the job initialised CUDA; written with the next
 * resource peak (the failure's or the exit's). */
DLRR_API void dlrr_gpu_memory(int device, uint64_t max_allocated, uint64_t max_reserved, uint64_t total);
/* The top-level Python packages the job imported, with versions and locations; reason is
 * "failure" or "exit". */
DLRR_API void dlrr_packages(const char* reason, int n, const char* const* names, const char* const* versions,
                            const char* const* paths);

/* ---- replay (mode 2). The recording is served; the "record" calls above become checks:
 * dlrr_step_begin/dlrr_step_end track the step, dlrr_digest compares against the recording. */
enum dlrr_target_kind_t { DLRR_TARGET_END = 0, DLRR_TARGET_STEP = 1, DLRR_TARGET_NAN = 2, DLRR_TARGET_CRASH = 3 };

typedef struct dlrr_target {
  int kind;            /* dlrr_target_kind_t */
  int64_t step;        /* step to stop at (-1: unknown / none recorded) */
  int digest_kind;     /* nan: what went non-finite first (dlrr_digest_kind_t), -1 if unknown */
  uint32_t call_index; /* nan: n-th call of `where` within the step */
  char where[512];     /* nan: module path, "loss", "grad:NAME", "param:NAME"; crash: location */
} dlrr_target_t;

DLRR_API int dlrr_replay_target(dlrr_target_t* out);
/* Replay answers that hand back bytes (*data, *n: batches, stand-ins, snapshots, RNG states,
 * kept tensors, collective results) are valid until the calling thread's next call of the same
 * function: copy them before that. Nothing served is kept longer (replay memory stays bounded).
 * The recorded batch `index` (across iterations) of DataLoader `loader`, in the encoding of
 * replayer/BatchEncoding.h. 1 ok, 0 none. */
DLRR_API int dlrr_replay_batch(uint32_t loader, uint64_t index, const uint8_t** data, uint64_t* n);
/* Which step the batch began (-1: not a training batch) and its dataset sample indices (valid
 * while replaying: the index holds them). */
DLRR_API int dlrr_replay_batch_meta(uint32_t loader, uint64_t index, int64_t* step, int* is_training,
                                    const int64_t** sample_indices, uint64_t* n_indices);
/* Bounded traces. How batch `index` of `loader` was recorded: 0 not, 1 by value, 2 by
 * reference with its bytes in the trace, 3 by reference without them. */
DLRR_API int dlrr_replay_batch_kind(uint32_t loader, uint64_t index);
/* Its structure with zeros where the trace lacks its bytes (fast-forwarded steps). */
DLRR_API int dlrr_replay_batch_stand_in(uint32_t loader, uint64_t index, const uint8_t** data, uint64_t* n);
/* A batch the job's pipeline re-made: begin, its dlrr_val_* calls, end. End returns 1 same as
 * recorded, 0 different (`what`: how; *sample_pos: first differing sample, -1 unknown), -1
 * nothing to compare. */
DLRR_API void dlrr_replay_remade_begin(uint32_t loader, uint64_t index);
DLRR_API int dlrr_replay_remade_end(char* what, uint64_t cap, int64_t* sample_pos);
/* One line: which steps replay with the dataset present and which without it. 1 ok. */
DLRR_API int dlrr_replay_batch_map(char* out, uint64_t cap);
/* Batches the recorded iterator `iteration` of `loader` yielded; -1 when it never ended. */
DLRR_API int64_t dlrr_replay_iterator_length(uint32_t loader, uint32_t iteration);
/* RNG state recorded when batch `index` of `loader` was delivered (1 ok, 0 none). */
DLRR_API int dlrr_replay_rng_at_batch(uint32_t loader, uint64_t index, int kind, int device, const uint8_t** data,
                                      uint64_t* n);
/* RNG state recorded at the beginning of `step` (optimizer-counted loops). */
DLRR_API int dlrr_replay_rng_at_step(int64_t step, int kind, int device, const uint8_t** data, uint64_t* n);
/* RNG state a forked trainer inherited as it began recording (dlrr_rng_state_at_fork). */
DLRR_API int dlrr_replay_rng_at_fork(int kind, int device, const uint8_t** data, uint64_t* n);
/* A runtime fact of the recording ("torch.num_threads", ...), or NULL. */
DLRR_API const char* dlrr_replay_runtime_info(const char* key);
DLRR_API int64_t dlrr_replay_recorded_steps(void);
/* The last step the recording began (-1: none); a replayed step after it is past the trace. */
DLRR_API int64_t dlrr_replay_last_step_begun(void);
/* Jump replay: the step whose snapshot the replay restores (-1: replay from the start), and
 * that snapshot's value in the batch encoding (1 ok, 0 none). Steps before it are
 * fast-forwarded: not verified. */
DLRR_API int64_t dlrr_replay_jump_step(void);
DLRR_API int dlrr_replay_snapshot(int64_t step, const uint8_t** data, uint64_t* n);
DLRR_API double dlrr_replay_recorded_loss(int64_t step);
/* Full tensors the recording kept for `step` (the failure ring), as an encoded dict
 * "kind:path#call.output" -> tensor. Always 1 in replay (possibly an empty dict). */
DLRR_API int dlrr_replay_recorded_tensors(int64_t step, const uint8_t** data, uint64_t* n);
/* One recorded digest (dlrr_replay_recorded_digests): where it was taken, and its values. */
typedef struct dlrr_recorded_digest {
  const char* path; /* "" for the root module */
  int32_t kind;     /* enum dlrr_digest_kind_t */
  uint32_t call_index;
  uint32_t output;
  uint32_t reserved; /* 0 */
  dlrr_digest_t digest;
} dlrr_recorded_digest_t;
/* The recorded digests of `step` in (kind, path, call, output) order: *n of them at *items,
 * valid until this thread's next call. 1 (possibly none), 0 when not replaying. */
DLRR_API int dlrr_replay_recorded_digests(int64_t step, const dlrr_recorded_digest_t** items, uint64_t* n);
/* The first divergence, "" when none so far. */
DLRR_API const char* dlrr_replay_divergence(void);
/* A divergence the hook found from values the replay computed (kind: dlrr_digest_kind_t, or
 * -1 for none): kept when it is the first. */
DLRR_API void dlrr_replay_diverged(int64_t step, int kind, const char* path, const char* detail);
/* crash target: the recorded exception's type ("" when the recorded failure is not an
 * exception); *while_loading = 1 when it was raised while a DataLoader loaded a batch. */
DLRR_API const char* dlrr_replay_recorded_exception(int* while_loading);
/* Adds a line to the replay report (key "warning" collects warnings). */
DLRR_API void dlrr_replay_fact(const char* key, const char* value);
/* Called at the stop: writes the report, then calls dlrr_replay_stopped. */
DLRR_API void dlrr_replay_stop(const char* reason);
/* Does nothing: the breakpoint of `dlreplay --debug gdb`, reached once the report is written,
 * so that ending the job there (gdb's `kill`, `quit`) keeps the report. */
DLRR_API void dlrr_replay_stopped(const char* reason);

/* ---- GPU (docs/gpu.md). Kernel launches and copies are captured natively (CUPTI, started by
 * CUDA through InitializeInjection); the hook adds digests of CUDA tensors computed on the
 * device, so their bytes never cross to the host unless their step fails. */

/* Digest algorithms: same numbering as schema TensorDigest.Algorithm. */
enum dlrr_digest_algorithm_t { DLRR_DIGEST_XXH3 = 0, DLRR_DIGEST_DEVICE_SUM = 1 };

/* A digest the caller computed (`algorithm`), recorded like dlrr_digest records its own (the
 * first non-finite digest is the failure) or, in replay, compared with the recorded digest of
 * the same path when that one was computed with the same algorithm (else: not comparable,
 * returns 2 and warns once). Returns as dlrr_digest. */
DLRR_API int dlrr_digest_values(int kind, const char* path, uint32_t call_index, uint32_t output, const char* dtype,
                                int ndim, const int64_t* shape, int algorithm, const dlrr_digest_t* digest);
/* Bytes for the failure ring only, no digest (a device tensor copied to the host because its
 * step is failing). data is contiguous, nbytes long. */
DLRR_API void dlrr_keep_tensor(int kind, const char* path, uint32_t call_index, uint32_t output, const char* dtype,
                               int ndim, const int64_t* shape, const void* data, uint64_t nbytes);
/* GPU capture: "" not started (CUDA not initialised, or not recording), "on: ...", "off: why". */
DLRR_API const char* dlrr_gpu_capture_status(void);
/* paused != 0: the kernel launches and copies the calling thread makes from now on are not the
 * job's (the hook's own digest kernels) and are left out of the launch sequence, in record and
 * replay alike, until dlrr_gpu_pause(0). Nests. */
DLRR_API void dlrr_gpu_pause(int paused);
/* Replay: compare the current step's kernel launches so far now, as at a stop, and not again
 * for this step (the hook is about to make the job's threads launch kernels of its own, e.g.
 * anomaly mode's checks in backward). `why` completes "the N launches replayed ... match". */
DLRR_API void dlrr_gpu_check_launches_now(const char* why);
/* The device digest in one kernel a tensor (docs/gpu.md). open: NULL where this process has no
 * CUDA driver loaded or dlrr was built without the kernel, with the reason in *why (valid until
 * the next call on this thread). launch: enqueues the digest of `nbytes` of device memory at
 * `data` (`numel` elements of `element`: 0 other, 1 float32, 2 float64, 3 float16, 4 bfloat16,
 * 5 int64, 6 int32, 7 int16, 8 int8, 9 uint8/bool) into out[0..5] (device memory preset to
 * 0,0,0,0,~0,0) on `stream` (a CUstream, in the calling thread's current context); returns 0 or
 * the CUresult that failed. The caller pauses GPU capture around it (dlrr_gpu_pause). */
DLRR_API void* dlrr_digest_kernel_open(const char** why);
DLRR_API int dlrr_digest_kernel_launch(void* kernel, const void* data, uint64_t nbytes, uint64_t numel, int element,
                                       void* out, void* stream);
DLRR_API void dlrr_digest_kernel_close(void* kernel);

/* ---- torch.distributed (docs/distributed.md). One collective as this rank issued it: begin
 * numbers it (issue order) and returns that number; inputs are added before the call, results
 * once its work completed (any thread); end writes it. In replay the same calls check the
 * collective against the recording: begin the op, tensors what is sent (and, when peers really
 * communicate, what is received), returning as dlrr_digest (0 match, 1 differs, 2 none). */
DLRR_API uint64_t dlrr_collective_begin(const char* op, const char* group, const char* reduce_op, int peer, int bucket,
                                        int async_op);
DLRR_API int dlrr_collective_tensor(uint64_t seq, int is_result, const char* dtype, int ndim, const int64_t* shape,
                                    const void* data, uint64_t nbytes);
DLRR_API void dlrr_collective_end(uint64_t seq, const char* status);
/* Record only: where this rank waits (reason 0 hang: in collective `seq` longer than the
 * threshold; 1 stalled: no collective since `completed_seq` for that long; 2 terminated: the
 * launcher's SIGTERM), with every Python thread's stack. Committed before it returns. */
DLRR_API void dlrr_collective_wait(int reason, int waiting, uint64_t seq, const char* op, const char* group,
                                   int64_t issued_step, int64_t completed_seq, const char* completed_op,
                                   int64_t completed_step, uint64_t waited_ms, const char* stacks);
/* Record only: on SIGTERM, write a byte to notify_fd and wait up to wait_ms for one on ack_fd
 * (the hook's watch writing dlrr_collective_wait), then the signal goes on as before. Only when
 * SIGTERM has its default disposition. 1 installed, 0 left alone, -1 error. */
DLRR_API int dlrr_term_notice(int notify_fd, int ack_fd, int wait_ms);
/* Record only: writes the batch window (dlrecord --window) now and makes it durable (the
 * hook's answer to SIGTERM); later batches by reference then write their bytes at once. */
DLRR_API void dlrr_window_flush(void);
/* The common one-tensor collective in two crossings instead of four, with the same effect:
 * dlrr_collective_begin then dlrr_collective_tensor(seq, 0, ...) of its input; and
 * dlrr_collective_tensor(seq, 1, ...) of its result then dlrr_collective_end. A null dtype
 * leaves the tensor out (begin or end alone). */
DLRR_API uint64_t dlrr_collective_begin1(const char* op, const char* group, const char* reduce_op, int peer, int bucket,
                                         int async_op, const char* dtype, int ndim, const int64_t* shape,
                                         const void* data, uint64_t nbytes);
DLRR_API void dlrr_collective_end1(uint64_t seq, const char* dtype, int ndim, const int64_t* shape, const void* data,
                                   uint64_t nbytes, const char* status);
/* Replay: the recorded bytes of result `index` of collective `seq`, valid until the calling
 * thread's next call. 1 ok, 0 the recording kept only digests (recorded without
 * --collectives full), -1 no such collective or result. */
DLRR_API int dlrr_replay_collective_result(uint64_t seq, uint32_t index, const uint8_t** data, uint64_t* n);
/* Replay: the rank the replayed stream recorded (-1: not a rank of a distributed job). */
DLRR_API int dlrr_replay_rank(void);

/* ---- files (data-less replay, docs/replay.md "Files"). Record only; no-ops otherwise. */
/* From now on this process records what it learns from its files (stat, listings, small files
 * read whole); the libc hooks do the rest (interpose/FileServe.h). */
DLRR_API void dlrr_files_enable(void);
/* pause != 0: the calling thread's file accesses are not recorded (a DataLoader fetching a
 * batch: replay serves the batch) until dlrr_files_pause(0). Nests. */
DLRR_API void dlrr_files_pause(int pause);
/* Files under `dir` are not the job's data (the Python installation, dlrr's own files). */
DLRR_API void dlrr_files_exclude(const char* dir);
/* Files larger than this are not recorded whole when opened (0 when not recording files). */
DLRR_API uint64_t dlrr_files_whole_max(void);
/* The job used these n bytes at `offset` of `path` (a slice of an np.memmap). */
DLRR_API void dlrr_file_range(const char* path, uint64_t offset, const void* data, uint64_t n);

#endif /* DLRR_DLRR_H */

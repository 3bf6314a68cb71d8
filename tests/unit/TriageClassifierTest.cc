// The triage classifier on synthetic failure records: every category of the taxonomy,
// including the GPU-only ones this CPU machine cannot produce (CUDA out of memory, a missing
// libcudart, NCCL timeouts, no driver), the phase rules and the determinism advice.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>

#include "triage/Classifier.h"
#include "triage/Environment.h"
#include "triage/Names.h"

namespace dlrr::triage {
namespace {

Category cat(const std::string& type, const std::string& msg, const std::vector<Frame>& tb = {}) {
  return classifyException(type, msg, tb).category;
}

TriageInput exceptionInput(const std::string& type, const std::string& msg) {
  TriageInput in;
  FailureRecord f;
  f.kind = "exception";
  f.exceptionType = type;
  f.message = msg;
  f.traceback = {{"/home/u/train.py", 42, "main", "x = load()"}};
  f.tNs = 2'000'000'000;
  in.failure = f;
  in.exitCode = 1;
  in.timeline.endNs = f.tNs;
  return in;
}

bool evidenceHas(const TriageResult& r, const std::string& needle) {
  for (const auto& e : r.evidence)
    if (e.find(needle) != std::string::npos) return true;
  return false;
}

// ---------------------------------------------------------------- execution environment
TEST(TriageClassifier, PathNotFound) {
  EXPECT_EQ(cat("FileNotFoundError", "[Errno 2] No such file or directory: '/mnt/data/val.json'"),
            Category::PathNotFound);
  EXPECT_EQ(cat("NotADirectoryError", "[Errno 20] Not a directory: '/data/x/y'"), Category::PathNotFound);
  EXPECT_EQ(cat("OSError", "[Errno 2] No such file or directory: 'ckpt.pt'"), Category::PathNotFound);
  EXPECT_EQ(cat("ValueError", "dataset directory '/mnt/imagenet' does not exist"), Category::PathNotFound);
}

TEST(TriageClassifier, PathEvidenceNamesOtherMissingPathsUnderTheSameRoot) {
  TriageInput in = exceptionInput("FileNotFoundError", "[Errno 2] No such file or directory: '/mnt/data/val.json'");
  in.missingPaths = {
      {"/usr/pyvenv.cfg", 2, 0, 1, 10, -1, "p1"},      // interpreter start-up: not evidence
      {"/mnt/data/val.json", 2, 2, 1, 100, -1, "p1"},  // os.path.exists first
      {"/mnt/data/val.json", 2, 0, 1, 110, -1, "p1"},  // then the open
      {"/mnt/data/train.json", 2, 0, 1, 90, -1, "p1"}, {"/mnt/cache", 2, 4, 1, 80, -1, "p1"},
      {"/mnt/data/labels.txt", 2, 2, 3, 95, -1, "p1"}, {"/home/u/.cache/x", 2, 0, 1, 50, -1, "p1"},
  };
  TriageResult r = classify(in);
  EXPECT_EQ(r.category, Category::PathNotFound);
  EXPECT_EQ(r.dimension, Dimension::Environment);
  ASSERT_FALSE(r.evidence.empty());
  EXPECT_EQ(r.evidence[0], "FileNotFoundError: /mnt/data/val.json");
  EXPECT_TRUE(evidenceHas(r, "recorded: open /mnt/data/val.json failed with ENOENT")) << r.evidence[1];
  EXPECT_TRUE(evidenceHas(r, "3 other missing paths under /mnt")) << ::testing::PrintToString(r.evidence);
  EXPECT_FALSE(evidenceHas(r, "pyvenv"));
  EXPECT_FALSE(evidenceHas(r, ".cache"));
  EXPECT_EQ(r.determinism, Determinism::Deterministic);
  EXPECT_EQ(r.phase, Phase::Initialisation);
}

TEST(TriageClassifier, RelativePathInTheMessageMatchesTheRecordedAbsolutePath) {
  TriageInput in = exceptionInput("FileNotFoundError", "[Errno 2] No such file or directory: 'data/val.json'");
  in.missingPaths = {{"/home/u/job/data/val.json", 2, 0, 1, 100, -1, "p1"}};
  TriageResult r = classify(in);
  EXPECT_TRUE(evidenceHas(r, "recorded: open /home/u/job/data/val.json failed with ENOENT"));
}

// Issue 18 item 2: without a replay that reproduced it, determinism is not known; with several
// training processes (Hogwild-style) it cannot be claimed at all.
TEST(TriageClassifier, RetryClaimsNoDeterminismWithoutAReplay) {
  TriageInput in = exceptionInput("KeyError", "'missing'");
  TriageResult r = classify(in);
  EXPECT_EQ(r.retry.rfind("not known without a replay", 0), 0u) << r.retry;
  EXPECT_EQ(r.retry.find("will fail the same way"), std::string::npos) << r.retry;
  in.trainingProcesses = 4;
  r = classify(in);
  EXPECT_NE(r.retry.find("cannot be claimed: 4 processes trained at once"), std::string::npos) << r.retry;
  EXPECT_NE(r.retry.find("shared-memory updates race"), std::string::npos) << r.retry;
  // Processes the job created that dlrr did not record: say why, also with one trainer.
  in.trainingProcesses = 1;
  in.unrecordedProcesses = {"pid 7 forked by native code, not through Python's os.fork in p5"};
  r = classify(in);
  EXPECT_EQ(r.retry.rfind("not known, and cannot be claimed: 1 process of the job ran unrecorded (pid 7 forked", 0), 0u)
      << r.retry;
  EXPECT_NE(r.retry.find("what it did is not in the trace"), std::string::npos) << r.retry;
  in.trainingProcesses = 2;
  r = classify(in);
  EXPECT_NE(r.retry.find("cannot be claimed: 2 processes trained at once"), std::string::npos) << r.retry;
  EXPECT_NE(r.retry.find("; and 1 process of the job ran unrecorded"), std::string::npos) << r.retry;
}

TEST(TriageClassifier, LibraryNotFound) {
  // GPU images: a CUDA runtime missing from the image (only on GPU machines).
  EXPECT_EQ(cat("ImportError", "libcudart.so.11.0: cannot open shared object file: No such file or directory"),
            Category::LibraryNotFound);
  EXPECT_EQ(cat("OSError", "libcudnn.so.8: cannot open shared object file: No such file or directory"),
            Category::LibraryNotFound);
  EXPECT_EQ(cat("ModuleNotFoundError", "No module named 'apex'"), Category::LibraryNotFound);
  EXPECT_EQ(cat("ImportError", "/x/_C.so: undefined symbol: _ZN3c104cuda9SetDeviceEi"), Category::LibraryNotFound);
  EXPECT_EQ(cat("ImportError",
                "cannot import name 'soft_unicode' from 'markupsafe' (/usr/lib/python3/markupsafe/__init__.py)"),
            Category::LibraryNotFound);
  EXPECT_EQ(cat("AssertionError", "Torch not compiled with CUDA enabled"), Category::LibraryNotFound);
  EXPECT_EQ(cat("RuntimeError", "CUDA error: no kernel image is available for execution on the device"),
            Category::LibraryNotFound);
  EXPECT_EQ(classifyException("ModuleNotFoundError", "No module named 'apex.amp'").detail,
            "Python module 'apex.amp' is not installed");
}

TEST(TriageClassifier, LibraryEvidenceUsesTheRecordedDlopenErrors) {
  TriageInput in =
      exceptionInput("ImportError", "libcudart.so.12: cannot open shared object file: No such file or directory");
  in.libraryErrors = {
      {"libcudart.so.12", "libcudart.so.12: cannot open shared object file: No such file or directory", 1, 5, -1}};
  in.env["LD_LIBRARY_PATH"] = "/usr/local/cuda-11/lib64";
  in.runtime["python"] = "3.11.2";
  TriageResult r = classify(in);
  EXPECT_EQ(r.category, Category::LibraryNotFound);
  EXPECT_TRUE(evidenceHas(r, "dlopen(libcudart.so.12) failed"));
  EXPECT_TRUE(evidenceHas(r, "LD_LIBRARY_PATH=/usr/local/cuda-11/lib64"));
  EXPECT_TRUE(evidenceHas(r, "shared library libcudart.so.12 failed to load"));
}

TEST(TriageClassifier, MissingModuleIsCheckedAgainstTheImportedPackages) {
  TriageInput in = exceptionInput("ModuleNotFoundError", "No module named 'sklearn'");
  in.packages = {{"numpy", "1.24.2", "/usr/lib/python3/dist-packages/numpy"}, {"torch", "1.13.1", "/x/torch"}};
  TriageResult r = classify(in);
  EXPECT_TRUE(evidenceHas(r, "Python module 'sklearn' is not installed"));
  EXPECT_TRUE(evidenceHas(r, "'sklearn' is not among the 2 top-level packages"));
}

TEST(TriageClassifier, PermissionDenied) {
  EXPECT_EQ(cat("PermissionError", "[Errno 13] Permission denied: '/data/secret.txt'"), Category::PermissionDenied);
  EXPECT_EQ(cat("OSError", "[Errno 30] Read-only file system: '/output/model.pt'"), Category::PermissionDenied);
  TriageInput in = exceptionInput("PermissionError", "[Errno 13] Permission denied: '/data/secret.txt'");
  in.user = "nobody";
  in.uid = 65534;
  in.missingPaths = {{"/data/secret.txt", 13, 0, 1, 5, -1, "p1"}, {"/data/other.txt", 13, 0, 2, 6, -1, "p1"}};
  TriageResult r = classify(in);
  EXPECT_TRUE(evidenceHas(r, "failed with EACCES"));
  EXPECT_TRUE(evidenceHas(r, "1 other denied path under /data"));
  EXPECT_TRUE(evidenceHas(r, "the job ran as nobody (uid 65534)"));
}

TEST(TriageClassifier, DiskFullDeviceAndCommunication) {
  EXPECT_EQ(cat("OSError", "[Errno 28] No space left on device"), Category::DiskFull);
  EXPECT_EQ(cat("RuntimeError", "No CUDA GPUs are available"), Category::DeviceUnavailable);
  EXPECT_EQ(cat("RuntimeError", "Found no NVIDIA driver on your system."), Category::DeviceUnavailable);
  EXPECT_EQ(cat("RuntimeError",
                "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, "
                "Timeout(ms)=1800000) ran for 1800512 milliseconds before timing out."),
            Category::CommunicationFailure);
  EXPECT_EQ(
      cat("torch.distributed.DistBackendError", "NCCL error in: ProcessGroupNCCL.cpp:1269, unhandled system error"),
      Category::CommunicationFailure);
  TriageInput in = exceptionInput(
      "RuntimeError", "NCCL communicator was aborted on rank 1. Watchdog caught collective operation timeout");
  TriageResult r = classify(in);
  EXPECT_EQ(r.category, Category::CommunicationFailure);
  EXPECT_EQ(r.determinism, Determinism::NonDeterministic);
  EXPECT_NE(r.retry.find("non-deterministic"), std::string::npos);
}

// ---------------------------------------------------------------- deep-learning specific
TEST(TriageClassifier, GpuOutOfMemory) {
  const std::string msg =
      "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total capacity; 13.20 GiB already "
      "allocated; 1.05 GiB free; 13.50 GiB reserved in total by PyTorch)";
  EXPECT_EQ(cat("RuntimeError", msg), Category::GpuOutOfMemory);
  EXPECT_EQ(cat("torch.cuda.OutOfMemoryError", msg), Category::GpuOutOfMemory);
  EXPECT_EQ(cat("torch.OutOfMemoryError", "CUDA out of memory."), Category::GpuOutOfMemory);
  EXPECT_EQ(cat("RuntimeError", "CUDA error: out of memory"), Category::GpuOutOfMemory);
  EXPECT_EQ(cat("RuntimeError", "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
            Category::GpuOutOfMemory);
  EXPECT_EQ(classifyException("RuntimeError", msg).detail, "Tried to allocate 2.00 GiB");

  TriageInput in = exceptionInput("torch.cuda.OutOfMemoryError", msg);
  in.processPeak = ResourceRecord{};
  in.processPeak->gpus = {{0, 14ull << 30, 15ull << 30, 16ull << 30}};
  in.env["CUDA_VISIBLE_DEVICES"] = "0";
  in.timeline.stepsBegun = 8;
  in.timeline.lastStepBegun = 7;
  in.timeline.stepsCompleted = 7;
  in.timeline.stepOpen = true;
  in.timeline.firstStepNs = 1'000'000'000;
  TriageResult r = classify(in);
  EXPECT_EQ(r.category, Category::GpuOutOfMemory);
  EXPECT_EQ(r.dimension, Dimension::DeepLearning);
  EXPECT_EQ(r.determinism, Determinism::NonDeterministic);
  EXPECT_TRUE(evidenceHas(r, "cuda:0 peak allocated 14.0 GiB, reserved 15.0 GiB of 16.0 GiB"));
  EXPECT_TRUE(evidenceHas(r, "CUDA_VISIBLE_DEVICES=0"));
  EXPECT_EQ(r.phase, Phase::Training);
  EXPECT_EQ(r.step, 7);
  EXPECT_EQ(r.where, "training step 7");
  EXPECT_EQ(r.stepsCompleted, 7);
  EXPECT_DOUBLE_EQ(r.trainingSeconds, 1.0);
  EXPECT_NE(r.retry.find("co-tenants"), std::string::npos);
}

TEST(TriageClassifier, CpuOutOfMemory) {
  EXPECT_EQ(cat("MemoryError", ""), Category::CpuOutOfMemory);
  EXPECT_EQ(cat("numpy.core._exceptions._ArrayMemoryError",
                "Unable to allocate 256. TiB for an array with shape (35184372088832,) and data type float64"),
            Category::CpuOutOfMemory);
  EXPECT_EQ(cat("RuntimeError",
                "[enforce fail at alloc_cpu.cpp:75] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to "
                "allocate 4398046511104 bytes. Error code 12 (Cannot allocate memory)"),
            Category::CpuOutOfMemory);
  EXPECT_EQ(cat("RuntimeError", "DataLoader worker (pid 1234) is killed by signal: Killed. "),
            Category::CpuOutOfMemory);

  // Under ulimit -v the same limit fails the same way: deterministic.
  TriageInput in = exceptionInput("MemoryError", "");
  in.processPeak = ResourceRecord{"failure", 900ull << 20, 1900ull << 20, 2ull << 30, 0, 24ull << 30, 0, {}};
  TriageResult r = classify(in);
  EXPECT_EQ(r.category, Category::CpuOutOfMemory);
  EXPECT_EQ(r.determinism, Determinism::Deterministic);
  EXPECT_TRUE(evidenceHas(r, "address-space limit (ulimit -v) 2.0 GiB"));

  // Killed by the kernel's OOM killer: no exception, SIGKILL, the cgroup counted a kill.
  TriageInput k;
  k.exitCode = 137;
  k.launcherPeak = ResourceRecord{"launcher", 7ull << 30, 0, 0, 8ull << 30, 24ull << 30, 1, {}};
  k.timeline.stepsBegun = 3;
  k.timeline.stepOpen = true;
  k.timeline.lastStepBegun = 2;
  TriageResult kr = classify(k);
  EXPECT_EQ(kr.category, Category::CpuOutOfMemory);
  EXPECT_EQ(kr.determinism, Determinism::NonDeterministic);
  EXPECT_TRUE(evidenceHas(kr, "1 OOM kill(s)"));
}

TEST(TriageClassifier, TensorMismatch) {
  EXPECT_EQ(cat("RuntimeError", "mat1 and mat2 shapes cannot be multiplied (2x5 and 3x4)"), Category::TensorMismatch);
  EXPECT_EQ(
      cat("RuntimeError", "The size of tensor a (3) must match the size of tensor b (4) at non-singleton dimension 0"),
      Category::TensorMismatch);
  EXPECT_EQ(cat("RuntimeError",
                "Error(s) in loading state_dict for ResNet:\n\tMissing key(s) in state_dict: \"conv1.weight\". "
                "Unexpected key(s) in state_dict: \"module.conv1.weight\"."),
            Category::TensorMismatch);
  EXPECT_EQ(cat("ValueError", "Expected input batch_size (16) to match target batch_size (32)."),
            Category::TensorMismatch);
  EXPECT_EQ(
      cat("RuntimeError",
          "Given groups=1, weight of size [16, 3, 3, 3], expected input[8, 1, 28, 28] to have 3 channels, but got 1 "
          "channels instead"),
      Category::TensorMismatch);
  EXPECT_EQ(cat("RuntimeError",
                "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"),
            Category::TensorMismatch);
  EXPECT_EQ(cat("IndexError", "Dimension out of range (expected to be in range of [-1, 0], but got 1)"),
            Category::TensorMismatch);
}

TEST(TriageClassifier, LossNaN) {
  EXPECT_EQ(cat("RuntimeError", "Function 'LogBackward0' returned nan values in its 0th output."), Category::LossNaN);
  EXPECT_EQ(cat("ValueError", "Loss is NaN at step 30"), Category::LossNaN);
  EXPECT_EQ(cat("FloatingPointError", "Minimum loss scale reached (0.0001)."), Category::LossNaN);

  // No exception: the first non-finite value, the job kept going and exited 0.
  TriageInput in;
  in.exitCode = 0;
  FailureRecord n;
  n.kind = "nonfinite";
  n.message = "115 NaN, 13 Inf in output of conv1";
  n.where = "conv1";
  n.step = 30;
  in.nonfinite = n;
  in.timeline.firstNonFiniteLossStep = 30;
  in.timeline.lastFiniteLossStep = 29;
  in.timeline.lastFiniteLoss = 1.81;
  in.timeline.stepsCompleted = 30;
  in.batchFindings = {"sample 5 of the batch of step 30 (dataset index 1365): 12 non-finite input values in field 0"};
  TriageResult r = classify(in);
  EXPECT_EQ(r.category, Category::LossNaN);
  EXPECT_EQ(r.phase, Phase::Training);
  EXPECT_EQ(r.step, 30);
  EXPECT_TRUE(evidenceHas(r, "115 NaN, 13 Inf in output of conv1 at step 30"));
  EXPECT_TRUE(evidenceHas(r, "non-finite from step 30 on"));
  EXPECT_TRUE(evidenceHas(r, "dataset index 1365"));
  EXPECT_EQ(r.determinism, Determinism::Deterministic);
}

TEST(TriageClassifier, BenignNonFiniteOutputsAreNotAFailure) {
  // -inf attention masks: a module output holds -inf, the loss stays finite, exit 0.
  TriageInput in;
  in.exitCode = 0;
  FailureRecord n;
  n.kind = "nonfinite";
  n.message = "0 NaN, 64 Inf in output of encoder.mask";
  n.where = "encoder.mask";
  n.step = 0;
  in.nonfinite = n;
  in.timeline.lastFiniteLossStep = 99;
  EXPECT_EQ(classify(in).category, Category::None);
}

TEST(TriageClassifier, NaNBeforeAGenericErrorIsTheCause) {
  TriageInput in = exceptionInput("RuntimeError", "invalid multinomial distribution (sum of probabilities <= 0)");
  FailureRecord n;
  n.kind = "nonfinite";
  n.message = "1 NaN, 0 Inf in loss";
  n.where = "loss";
  n.step = 4;
  n.tNs = 1'000;
  in.nonfinite = n;
  TriageResult r = classify(in);
  EXPECT_EQ(r.category, Category::LossNaN);
  EXPECT_TRUE(evidenceHas(r, "first non-finite value: 1 NaN, 0 Inf in loss at step 4"));
}

TEST(TriageClassifier, FrameworkApiMisuse) {
  EXPECT_EQ(cat("RuntimeError",
                "Trying to backward through the graph a second time (or directly access saved tensors after they have "
                "already been freed)."),
            Category::FrameworkApiMisuse);
  EXPECT_EQ(cat("RuntimeError", "element 0 of tensors does not require grad and does not have a grad_fn"),
            Category::FrameworkApiMisuse);
  EXPECT_EQ(cat("RuntimeError",
                "Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must "
                "use the 'spawn' start method"),
            Category::FrameworkApiMisuse);
  EXPECT_EQ(cat("AttributeError", "module 'torch' has no attribute 'compile'"), Category::FrameworkApiMisuse);
  EXPECT_EQ(cat("ImportError", "cannot import name 'container_abcs' from 'torch._six' (/x/torch/_six.py)"),
            Category::FrameworkApiMisuse);
}

// ---------------------------------------------------------------- general code errors
TEST(TriageClassifier, GeneralCodeErrors) {
  EXPECT_EQ(cat("KeyError", "'lr'"), Category::KeyNotFound);
  EXPECT_EQ(cat("TypeError", "join() argument must be str, bytes, or os.PathLike object, not 'int'"),
            Category::TypeMismatch);
  EXPECT_EQ(cat("TypeError", "'NoneType' object is not subscriptable"), Category::NullReference);
  EXPECT_EQ(cat("AttributeError", "'NoneType' object has no attribute 'shape'"), Category::NullReference);
  EXPECT_EQ(cat("AttributeError", "'Config' object has no attribute 'lr'"), Category::AttributeNotFound);
  EXPECT_EQ(cat("SyntaxError", "invalid syntax (bad_module.py, line 3)"), Category::SyntaxError);
  EXPECT_EQ(cat("IndentationError", "unexpected indent (m.py, line 2)"), Category::SyntaxError);
  EXPECT_EQ(cat("IndexError", "list index out of range"), Category::IndexOutOfRange);
  EXPECT_EQ(cat("NameError", "name 'modle' is not defined"), Category::UndefinedName);
  EXPECT_EQ(cat("UnboundLocalError", "cannot access local variable 'x' where it is not associated with a value"),
            Category::UndefinedName);
  EXPECT_EQ(cat("NotImplementedError", ""), Category::NotImplemented);
  EXPECT_EQ(cat("ValueError", "learning rate must be positive, got -0.1"), Category::IllegalArgument);
  EXPECT_EQ(cat("argparse.ArgumentError", "train.py: error: argument --lr: invalid float value: 'abc'"),
            Category::IllegalArgument);
  EXPECT_EQ(cat("TypeError", "__init__() got an unexpected keyword argument 'dropout_p'"), Category::IllegalArgument);
  EXPECT_EQ(cat("RuntimeError", "CUDA error: device-side assert triggered"), Category::IllegalArgument);
  EXPECT_EQ(cat("ZeroDivisionError", "division by zero"), Category::OtherPythonError);
  EXPECT_EQ(cat("RecursionError", "maximum recursion depth exceeded"), Category::OtherPythonError);
}

TEST(TriageClassifier, SyntaxErrorNamesThePythonVersion) {
  TriageInput in = exceptionInput("SyntaxError", "invalid syntax (bad_module.py, line 3)");
  in.runtime["python"] = "3.6.9";
  TriageResult r = classify(in);
  EXPECT_TRUE(evidenceHas(r, "the code ran under Python 3.6.9"));
}

TEST(TriageClassifier, UsageErrorWithoutAnException) {
  TriageInput in;
  in.exitCode = 2;
  TriageResult r = classify(in);
  EXPECT_EQ(r.category, Category::IllegalArgument);
  EXPECT_TRUE(evidenceHas(r, "argparse"));
  EXPECT_EQ(r.phase, Phase::Initialisation);
}

TEST(TriageClassifier, SignalsAndExits) {
  TriageInput seg;
  FailureRecord f;
  f.kind = "signal";
  f.signal = 11;
  f.where = "libfoo.so+0x1234";
  f.pythonStack =
      "Fatal Python error: Segmentation fault\n\nThread 0x2 (most recent call first):\n  File "
      "\"/usr/lib/python3.11/threading.py\", line 320 in wait\n\nCurrent thread 0x1 (most recent call first):\n  File "
      "\"/usr/lib/python3.11/ctypes/__init__.py\", line 5 in f\n  File \"/job/x.py\", line 9 in crash\n";
  seg.failure = f;
  seg.exitCode = 139;
  TriageResult r = classify(seg);
  EXPECT_EQ(r.category, Category::NativeCrash);
  EXPECT_EQ(r.determinism, Determinism::Unknown);
  EXPECT_TRUE(evidenceHas(r, "crashing thread: File \"/usr/lib/python3.11/ctypes/__init__.py\", line 5 in f"));
  EXPECT_TRUE(evidenceHas(r, "in the job's code: File \"/job/x.py\", line 9 in crash"));
  EXPECT_FALSE(evidenceHas(r, "threading.py"));
  // si_code 0 is SI_USER: kill() from a process, not a fault.
  EXPECT_TRUE(evidenceHas(r, "SIGSEGV: sent with kill() by a process (SI_USER)"));
  seg.failure->signalCode = 1;
  seg.failure->faultAddress = 0x10;
  EXPECT_TRUE(
      evidenceHas(classify(seg), "SIGSEGV: address not mapped (SEGV_MAPERR) at 0x10: a null pointer dereference"));

  TriageInput term;
  term.exitCode = 143;
  TriageResult t = classify(term);
  EXPECT_EQ(t.category, Category::ExternalSignal);
  EXPECT_EQ(t.determinism, Determinism::NonDeterministic);

  TriageInput kill;  // SIGKILL, no OOM evidence: from outside
  kill.exitCode = 137;
  EXPECT_EQ(classify(kill).category, Category::ExternalSignal);

  // A death by a signal the process raised itself is a native crash, caught by the recorder
  // (a "signal" failure) or not (only the exit status): the same set both ways (kCrashSignals).
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGTRAP, SIGFPE, SIGABRT, SIGSYS}) {
    TriageInput uncaught;
    uncaught.exitCode = 128 + sig;
    EXPECT_EQ(classify(uncaught).category, Category::NativeCrash) << sig;
    TriageInput caught;
    FailureRecord crash;
    crash.kind = "signal";
    crash.signal = sig;
    caught.failure = crash;
    caught.exitCode = 128 + sig;
    EXPECT_EQ(classify(caught).category, Category::NativeCrash) << sig;
  }

  TriageInput ok;
  ok.exitCode = 0;
  EXPECT_EQ(classify(ok).category, Category::None);

  TriageInput one;
  one.exitCode = 1;
  EXPECT_EQ(classify(one).category, Category::Unknown);
  EXPECT_EQ(cat("KeyboardInterrupt", ""), Category::ExternalSignal);
}

// ---------------------------------------------------------------- data
TEST(TriageClassifier, Data) {
  EXPECT_EQ(cat("json.decoder.JSONDecodeError", "Expecting ',' delimiter: line 1 column 12 (char 11)"),
            Category::CorruptData);
  EXPECT_EQ(cat("_pickle.UnpicklingError", "pickle data was truncated"), Category::CorruptData);
  EXPECT_EQ(cat("RuntimeError", "PytorchStreamReader failed reading zip archive: failed finding central directory"),
            Category::CorruptData);
  EXPECT_EQ(cat("EOFError", "Ran out of input"), Category::CorruptData);
  // np.load of a truncated .npy: a ValueError raised inside numpy's format reader.
  EXPECT_EQ(cat("ValueError", "cannot reshape array of size 43 into shape (32,32)",
                {{"/job/load.py", 3, "<module>", "np.load(p)"},
                 {"/usr/lib/python3/dist-packages/numpy/lib/npyio.py", 432, "load", ""},
                 {"/usr/lib/python3/dist-packages/numpy/lib/format.py", 790, "read_array", ""}}),
            Category::CorruptData);
  EXPECT_EQ(cat("ValueError", "cannot reshape array of size 43 into shape (32,32)"), Category::IllegalArgument);
  EXPECT_EQ(cat("UnicodeDecodeError", "'ascii' codec can't decode byte 0xc3 in position 0: ordinal not in range(128)"),
            Category::UnexpectedEncoding);
  TriageInput in =
      exceptionInput("UnicodeDecodeError", "'utf-8' codec can't decode byte 0xff in position 0: invalid start byte");
  in.env["LANG"] = "C";
  TriageResult r = classify(in);
  EXPECT_EQ(r.dimension, Dimension::Data);
  EXPECT_TRUE(evidenceHas(r, "LANG=C"));
}

TEST(TriageClassifier, ExceptionsFromDataLoaderWorkers) {
  TriageInput in = exceptionInput(
      "KeyError",
      "Caught KeyError in DataLoader worker process 0.\nOriginal Traceback (most recent call last):\n"
      "  File \"/usr/lib/python3/dist-packages/torch/utils/data/_utils/worker.py\", line 302, in _worker_loop\n"
      "    data = fetcher.fetch(index)\n"
      "  File \"/job/dataset.py\", line 12, in __getitem__\n    return self.meta[i]['label']\nKeyError: 'label'\n");
  TriageResult r = classify(in);
  EXPECT_EQ(r.category, Category::KeyNotFound);
  EXPECT_EQ(r.summary, "KeyError: 'label'");
  EXPECT_TRUE(evidenceHas(r, "raised in a DataLoader worker process, at dataset.py:12 in __getitem__"));
  EXPECT_EQ(r.location, "dataset.py:12 in __getitem__ (in a DataLoader worker)");
  // JSONDecodeError cannot be rebuilt from a message: torch re-raises a RuntimeError.
  EXPECT_EQ(cat("RuntimeError",
                "Caught JSONDecodeError in DataLoader worker process 1.\nOriginal Traceback (most recent call last):\n"
                "  File \"/job/ds.py\", line 9, in __getitem__\n    return json.load(f)\n"
                "  File \"/usr/lib/python3.11/json/decoder.py\", line 353, in raw_decode\n    obj, end = "
                "self.scan_once(s, idx)\n"
                "json.decoder.JSONDecodeError: Expecting ',' delimiter: line 1 column 30 (char 29)\n"),
            Category::CorruptData);
}

// ---------------------------------------------------------------- where in the job
TEST(TriageClassifier, Phases) {
  TriageInput in = exceptionInput("KeyError", "'x'");
  EXPECT_EQ(classify(in).phase, Phase::Initialisation);

  in.timeline.stepsBegun = 5;
  in.timeline.stepsCompleted = 5;
  in.timeline.lastStepBegun = 4;
  in.timeline.lastStepEnded = 4;
  in.timeline.evalBatchSeen = true;
  in.timeline.evalLoader = 1;
  in.timeline.evalBatch = 2;
  TriageResult r = classify(in);
  EXPECT_EQ(r.phase, Phase::Evaluation);
  EXPECT_EQ(r.where, "evaluation (loader 1, batch 2), after training step 4");

  in.timeline.evalBatchSeen = false;
  in.timeline.trainingLoaderEnded = true;
  r = classify(in);
  EXPECT_EQ(r.phase, Phase::Evaluation);
  EXPECT_NE(r.where.find("after the last training step (4)"), std::string::npos);

  in.timeline.trainingLoaderEnded = false;
  r = classify(in);
  EXPECT_EQ(r.phase, Phase::Training);
  EXPECT_EQ(r.step, 4);

  in.timeline.exiting = true;
  EXPECT_EQ(classify(in).phase, Phase::Shutdown);
}

TEST(TriageClassifier, LostWorkCountsFromTheLaunch) {
  TriageInput in = exceptionInput("KeyError", "'x'");
  in.timeline.launchRealNs = 1'000'000'000'000;
  in.timeline.processStartRealNs = 1'000'500'000'000;  // the process started 0.5 s after dlrecord
  in.timeline.firstStepNs = 1'000'000'000;
  in.timeline.endNs = 3'000'000'000;
  in.timeline.stepsBegun = 10;
  in.timeline.stepsCompleted = 9;
  in.timeline.stepOpen = true;
  in.timeline.lastStepBegun = 9;
  TriageResult r = classify(in);
  EXPECT_DOUBLE_EQ(r.wallSeconds, 3.5);
  EXPECT_DOUBLE_EQ(r.initSeconds, 1.0);
  EXPECT_DOUBLE_EQ(r.trainingSeconds, 2.0);
  EXPECT_EQ(r.lost, "3.5 s of wall time since launch (initialisation 1.0 s, training 2.0 s), 9 completed steps");
}

TEST(TriageClassifier, Helpers) {
  EXPECT_EQ(pathInMessage("[Errno 2] No such file or directory: '/mnt/data/val.json'"), "/mnt/data/val.json");
  EXPECT_EQ(pathInMessage("[Errno 13] Permission denied: \"/root/x\""), "/root/x");
  EXPECT_EQ(pathInMessage("dataset directory '/mnt/imagenet' does not exist"), "/mnt/imagenet");
  EXPECT_EQ(pathInMessage("no path here"), "");
  EXPECT_TRUE(isStartupProbe("/usr/bin/pyvenv.cfg", 0));
  EXPECT_TRUE(isStartupProbe("/usr/lib/python311.zip", 2));
  EXPECT_TRUE(isStartupProbe("/usr/share/locale/en/LC_MESSAGES/messages.mo", 2));
  EXPECT_FALSE(isStartupProbe("/mnt/data/val.json", 0));
  EXPECT_TRUE(isStartupProbe("/opt/dlrr/lib/dlrr/python/dlrr_hook/__pycache__", 2));
  EXPECT_TRUE(isStartupProbe("/home/u/proj/__pycache__/model.cpython-313.pyc", 0));
  EXPECT_FALSE(isStartupProbe("/home/u/proj/__pycache__.json", 0));
  EXPECT_TRUE(isUserFrame({"/home/u/train.py", 1, "", ""}));
  EXPECT_FALSE(isUserFrame({"/usr/lib/python3.11/json/decoder.py", 1, "", ""}));
  EXPECT_FALSE(isUserFrame({"/usr/lib/python3/dist-packages/torch/nn/modules/module.py", 1, "", ""}));
  EXPECT_FALSE(isUserFrame({"<frozen importlib._bootstrap>", 1, "", ""}));
  for (const auto& c : allCategories()) {
    EXPECT_EQ(categoryInfo(c.category).id, c.id);
    if (c.category != Category::None && c.category != Category::Unknown) {
      EXPECT_STRNE(c.advice, "") << c.id;
    }
  }
}

// ---------------------------------------------------------------- environment diff
TEST(TriageEnvironment, VersionsAndDifferences) {
  EXPECT_TRUE(versionsAgree("1.13.0a0", "1.13.0a0+gitunknown"));
  EXPECT_TRUE(versionsAgree("2022.09.24", "2022.9.24"));
  EXPECT_FALSE(versionsAgree("1.13.1", "2.1.0"));
  EnvFacts rec = {{"python", "3.11.2"},
                  {"torch", "1.13.1"},
                  {"env.OMP_NUM_THREADS", "1"},
                  {"env.CUDA_VISIBLE_DEVICES", "0,1"},
                  {"cpu.count", "8"},
                  {"host", "a"},
                  {"blas", "/x/libopenblas.so:/x/liblapack.so"},
                  {"env.FOO", "1"},
                  {"cuda.device.0", "NVIDIA A100-SXM4-40GB"}};
  EnvFacts cur = {{"python", "3.11"},
                  {"torch", "2.1.0"},
                  {"env.OMP_NUM_THREADS", "<unset>"},
                  {"env.CUDA_VISIBLE_DEVICES", "0,1"},
                  {"cpu.count", "2"},
                  {"host", "b"},
                  {"blas", "/x/liblapack.so:/x/libopenblas.so"},
                  {"env.FOO", "2"},
                  {"cuda.device.0", "NVIDIA H100 80GB HBM3"}};
  auto d = diffEnvironments(rec, cur);
  std::map<std::string, EnvDifference> by;
  for (const auto& x : d) by[x.key] = x;
  EXPECT_FALSE(by.count("python"));  // 3.11 (from the interpreter's name) is 3.11.2's
  EXPECT_FALSE(by.count("blas"));    // same libraries, other order
  EXPECT_FALSE(by.count("env.CUDA_VISIBLE_DEVICES"));
  EXPECT_FALSE(by.count("env.FOO"));  // not a compared variable
  ASSERT_TRUE(by.count("torch"));
  EXPECT_EQ(by["torch"].impact, Impact::Breaks);
  ASSERT_TRUE(by.count("env.OMP_NUM_THREADS"));
  EXPECT_EQ(by["env.OMP_NUM_THREADS"].impact, Impact::Matters);
  EXPECT_EQ(by["cuda.device.0"].impact, Impact::Breaks);
  EXPECT_EQ(by["host"].impact, Impact::Info);
  EXPECT_EQ(d.front().impact, Impact::Breaks);  // most serious first
}

// A package whose version the probe cannot determine without importing it (setuptools' distutils
// shim on Python 3.12+ has no metadata) is not "another version".
TEST(TriageEnvironment, UnknownVersionHereIsNoDifference) {
  auto d =
      diffEnvironments({{"package.distutils", "3.13.5"}, {"package.scipy", "1.10.1"}},
                       {{"package.distutils", "<installed, version unknown>"}, {"package.scipy", "<not installed>"}});
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].key, "package.scipy");
}

// A library that failed to load when recorded and is not found here either fails the same way:
// no difference (env-diff exited 1 for it on the recording machine). One found here is.
TEST(TriageEnvironment, ALibraryMissingInBothIsNoDifference) {
  TriageInput facts;
  LibraryErrorRecord l;
  l.name = "libdlrr-no-such-library.so.7";
  facts.libraryErrors.push_back(l);
  RecordedEnvironment rec;
  EXPECT_TRUE(checkPaths(rec, facts).empty());
  facts.libraryErrors[0].name = "/bin/sh";  // exists here: it may load now
  auto d = checkPaths(rec, facts);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].key, "library./bin/sh");
}

// A path the recorded job missed and then created itself (inductor's cache) exists here because
// of the recording: no "missing then, exists now". One that existed before the recording is.
TEST(TriageEnvironment, PathsBornDuringTheRecordingAreNotReportedAsMissingThen) {
  char dirTemplate[] = "/tmp/dlrr-born-XXXXXX";
  ASSERT_NE(::mkdtemp(dirTemplate), nullptr);
  const std::string dir = dirTemplate, older = dir + "/older", made = dir + "/made";
  std::ofstream(older) << "x";
  struct timespec now {};
  ::clock_gettime(CLOCK_REALTIME, &now);
  const int64_t nowNs = now.tv_sec * 1000000000LL + now.tv_nsec;
  std::ofstream(made) << "x";
  struct timespec past[2] = {{now.tv_sec - 3600, 0}, {now.tv_sec - 3600, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, older.c_str(), past, 0), 0);  // an old mtime says nothing: birth (or ctime) counts
  TriageInput facts;
  for (const auto& p : {older, made}) {
    MissingPathRecord m;
    m.path = p;
    m.error = ENOENT;
    m.op = 0;
    m.count = 1;
    facts.missingPaths.push_back(m);
  }
  // The recording ran an hour ago: both paths were born after it, both are differences.
  facts.missingPaths[0].firstRealNs = facts.missingPaths[1].firstRealNs = nowNs - 3600'000'000'000LL;
  facts.recordingEndRealNs = nowNs - 3500'000'000'000LL;
  RecordedEnvironment rec;
  EXPECT_EQ(checkPaths(rec, facts).size(), 2u);
  // The recording is running now: both came into being while it ran.
  facts.missingPaths[0].firstRealNs = facts.missingPaths[1].firstRealNs = nowNs - 5'000'000'000LL;
  facts.recordingEndRealNs = nowNs + 1'000'000'000LL;
  EXPECT_EQ(checkPaths(rec, facts).size(), 0u);
  // A recording that starts later: the paths were there before it, so they are differences.
  facts.missingPaths[0].firstRealNs = facts.missingPaths[1].firstRealNs = nowNs + 10'000'000'000LL;
  facts.recordingEndRealNs = nowNs + 20'000'000'000LL;
  EXPECT_EQ(checkPaths(rec, facts).size(), 2u);
  // Unknown times (a trace from before this field): reported as before.
  facts.missingPaths[0].firstRealNs = facts.missingPaths[1].firstRealNs = 0;
  EXPECT_EQ(checkPaths(rec, facts).size(), 2u);
  ::unlink(older.c_str());
  ::unlink(made.c_str());
  ::rmdir(dir.c_str());
}

// env-diff once ran the trace's command[0] with -c when it was named python*: anyone's program,
// run by opening their trace. Only this machine's interpreter (or --python) may run.
TEST(TriageEnvironment, ProbeNeverRunsTheRecordedCommand) {
  char dirTemplate[] = "/tmp/dlrr-probe-XXXXXX";
  ASSERT_NE(::mkdtemp(dirTemplate), nullptr);
  std::string dir = dirTemplate, fake = dir + "/python3", marker = dir + "/ran";
  {
    std::ofstream f(fake);
    f << "#!/bin/sh\ntouch " << marker << "\nprintf 'python\\t9.9.9\\n'\n";
  }
  ASSERT_EQ(::chmod(fake.c_str(), 0755), 0);
  RecordedEnvironment rec;
  rec.command = {fake, "train.py"};
  EXPECT_EQ(recordedInterpreter(rec), fake);  // found, named...
  EXPECT_NE(chooseInterpreter(), fake);       // ...never chosen to run
  ProbeOptions opt;
  opt.timeoutSeconds = 20;
  std::vector<std::string> notes;
  EnvFacts cur = currentEnvironment(rec, opt, notes);
  EXPECT_NE(::access(marker.c_str(), F_OK), 0) << "the recorded command was run";
  EXPECT_NE(cur["python"], "9.9.9");
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes[0].find("not run unless named with --python"), std::string::npos) << notes[0];
  // Named by the user: then it runs.
  opt.python = fake;
  notes.clear();
  cur = currentEnvironment(rec, opt, notes);
  EXPECT_EQ(::access(marker.c_str(), F_OK), 0);
  EXPECT_EQ(cur["python"], "9.9.9");
  std::remove(marker.c_str());
  std::remove(fake.c_str());
  ::rmdir(dir.c_str());
}

// Durations come from trace bytes; a fuzzed trace once carried 3.4e9 s, which overflowed an
// int conversion (UB). Out-of-range values must print, not trap.
TEST(TriageNames, SecondsTextHandlesAnyDouble) {
  EXPECT_EQ(secondsText(5.25), "5.2 s");
  EXPECT_EQ(secondsText(125), "2 min 5 s");
  EXPECT_EQ(secondsText(3 * 3600 + 61), "3 h 1 min");
  EXPECT_EQ(secondsText(3.38671e9), "940752 h 46 min");
  EXPECT_EQ(secondsText(-1), "unknown");
  EXPECT_EQ(secondsText(std::numeric_limits<double>::quiet_NaN()), "unknown");
  EXPECT_EQ(secondsText(std::numeric_limits<double>::infinity()), "unknown");
  EXPECT_EQ(secondsText(1e300), "unknown");
}

TEST(TriageNames, SignalCauseText) {
  EXPECT_EQ(signalCauseText(11, 1, 0x10), "address not mapped (SEGV_MAPERR) at 0x10: a null pointer dereference");
  EXPECT_EQ(signalCauseText(11, 2, 0x7f0000001000), "access not permitted (SEGV_ACCERR) at 0x7f0000001000");
  EXPECT_EQ(signalCauseText(7, 2, 0x1000), "nonexistent physical address (BUS_ADRERR) at 0x1000");
  EXPECT_EQ(signalCauseText(8, 1, 0x401000), "integer divide by zero (FPE_INTDIV)");  // no address for FPE
  EXPECT_EQ(signalCauseText(6, -6, 0),
            "sent by the process to itself (SI_TKILL: raise(), abort(), or a handler re-raising)");
  EXPECT_EQ(signalCauseText(15, 0, 0), "sent with kill() by a process (SI_USER)");
  EXPECT_EQ(signalCauseText(11, 99, 0), "");   // a code it does not know
  EXPECT_EQ(signalCauseText(11, -60, 0), "");  // nor a negative one
  EXPECT_EQ(signalCauseText(0, 1, ~0ull), "");
}

TEST(TriageEnvironment, TorchVersionIsTheAssignmentNotTheFirstMention) {
  // torch 1.13's version.py, then 2.6's (Debian trixie), which names __version__ in __all__ first.
  EXPECT_EQ(versionAssigned("__version__ = '1.13.1'\ndebug = False\n"), "1.13.1");
  EXPECT_EQ(versionAssigned("from typing import Optional\n\n__all__ = ['__version__', 'debug', 'cuda', 'git_version', "
                            "'hip']\n__version__ = '2.6.0+debian'\ndebug = False\n"),
            "2.6.0+debian");
  EXPECT_EQ(versionAssigned("__version__: str = '2.1'\n"), "");  // annotated: not a form torch writes
  EXPECT_EQ(versionAssigned("if __version__ == '1': pass\n"), "");
  EXPECT_EQ(versionAssigned(""), "");
}

}  // namespace
}  // namespace dlrr::triage

#include "triage/Classifier.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "triage/Names.h"

namespace dlrr::triage {
namespace {

using C = Category;
using D = Dimension;
using T = Determinism;

constexpr CategoryInfo kCategories[] = {
    {C::None, "none", "No failure", D::None, T::Unknown, "", ""},
    {C::PathNotFound, "path_not_found", "Path not found", D::Environment, T::Deterministic,
     "fails the same way until the path exists where the job runs",
     "a path the job needs does not exist where it ran: a local path left in the code or the launch "
     "arguments, data not uploaded, a volume not mounted"},
    {C::LibraryNotFound, "library_not_found", "Library not found", D::Environment, T::Deterministic,
     "fails the same way until the image provides the module or library",
     "a Python module or shared library is missing from the image, or the installed version lacks what the "
     "job uses: install it or pin the version the job was written for"},
    {C::PermissionDenied, "permission_denied", "Permission denied", D::Environment, T::Deterministic,
     "fails the same way until the permissions or the user change",
     "the job's user may not read or write the path: an unwritable output directory, a file owned by "
     "another user, `pip install` into the system site without --user"},
    {C::DiskFull, "disk_full", "Disk full", D::Environment, T::NonDeterministic, "depends on what else fills the disk",
     "the file system ran out of space or quota: free space, or write checkpoints and logs elsewhere"},
    {C::DeviceUnavailable, "device_unavailable", "GPU unavailable", D::Environment, T::NonDeterministic,
     "depends on the node the job lands on and on other jobs holding its GPUs",
     "no usable GPU: the driver is missing or older than the CUDA runtime, CUDA_VISIBLE_DEVICES names no "
     "device, or the device is busy"},
    {C::CommunicationFailure, "communication_failure", "Distributed communication failure", D::Environment,
     T::NonDeterministic, "depends on the other ranks and the network: a straggler or a dead peer",
     "a collective timed out or a peer went away (NCCL/Gloo): look at the other ranks' traces for the one "
     "that failed first; raise the timeout only if a rank is legitimately slow"},
    {C::DistributedHang, "distributed_hang", "Distributed hang", D::Environment, T::Unknown,
     "depends on why the suspect rank stopped: its own code (deterministic) or its machine (not)",
     "the ranks stopped meeting in a collective: the suspect rank never reached it (stuck, ended early or "
     "died); its stack says where. torchrun's \"Root Cause\" names the first rank to fail, usually one that "
     "timed out waiting for the suspect, not the suspect itself"},
    {C::ExternalSignal, "external_signal", "Killed from outside", D::Environment, T::NonDeterministic,
     "the signal came from outside the job: scheduler preemption, a time limit, a user, the OOM killer",
     "the process did not fail by itself: check the scheduler's log (preemption, time limit) and, for "
     "SIGKILL, the kernel's OOM killer"},
    {C::GpuOutOfMemory, "gpu_out_of_memory", "GPU out of memory", D::DeepLearning, T::NonDeterministic,
     "depends on co-tenants, other processes on the same GPU, and on allocator fragmentation; deterministic "
     "when the job has the GPU to itself",
     "reduce the batch size or the model, use gradient accumulation, activation checkpointing or mixed "
     "precision; check for other processes on the GPU"},
    {C::CpuOutOfMemory, "cpu_out_of_memory", "CPU out of memory", D::DeepLearning, T::NonDeterministic,
     "depends on the memory other processes use on the machine",
     "the job needed more host memory than it had: reduce the batch size, the DataLoader workers or "
     "prefetching, or data held in memory; raise the limit"},
    {C::CollectiveDesync, "collective_desync", "Collective desync", D::DeepLearning, T::Deterministic,
     "the ranks' code took different paths to the same collective number",
     "a rank issued a different collective than its peers at the same point (a rank-dependent branch, a "
     "skipped or reordered collective): make every rank issue the same collectives in the same order. "
     "torchrun's \"Root Cause\" names the first rank to fail, not necessarily the one that diverged"},
    {C::TensorMismatch, "tensor_mismatch", "Tensor mismatch", D::DeepLearning, T::Deterministic,
     "the same shapes meet again on a retry",
     "tensor shapes, dtypes or devices do not fit the model (layer sizes, input shapes), or checkpoint keys "
     "do not match (the `module.` prefix of DataParallel saves)"},
    {C::LossNaN, "loss_nan", "Loss NaN", D::DeepLearning, T::Deterministic, "replay reproduces it bit for bit",
     "a value became NaN or Inf: `dlreplay TRACE --until nan` replays the failing step op by op and names "
     "the first op that made it, the line of your code that called it and why (an overflow and its huge "
     "input, 0/0, log of 0, a corrupt sample), with the loss and learning rate before it (--debug pdb "
     "stops there); `dlreplay TRACE --what-if CHANGE` tests a fix (lr-scale=F, clip-grad=F, "
     "drop-sample=I, skip-step, fp32)"},
    {C::FrameworkApiMisuse, "framework_api_misuse", "Framework API misuse", D::DeepLearning, T::Deterministic,
     "the same call fails again", "the framework was used in a way (or a version) it does not support"},
    {C::IllegalArgument, "illegal_argument", "Illegal argument", D::GeneralCode, T::Deterministic,
     "the same argument fails again",
     "a function or the launch command got a value it does not accept (half of these in the study came from "
     "launch-script arguments)"},
    {C::TypeMismatch, "type_mismatch", "Type mismatch", D::GeneralCode, T::Deterministic, "the same types meet again",
     "a value of the wrong type reached a function"},
    {C::KeyNotFound, "key_not_found", "Key not found", D::GeneralCode, T::Deterministic, "the same lookup fails again",
     "a dict or config lookup used a key that is not there"},
    {C::AttributeNotFound, "attribute_not_found", "Attribute not found", D::GeneralCode, T::Deterministic,
     "the same lookup fails again", "an object lacks the attribute used (often an API of another version)"},
    {C::NullReference, "null_reference", "Null reference", D::GeneralCode, T::Deterministic,
     "the same None comes back again", "a None was used where an object was expected"},
    {C::SyntaxError, "syntax_error", "Syntax error", D::GeneralCode, T::Deterministic,
     "the file does not change on a retry",
     "the code does not parse: often code written for another Python version than the one that ran it"},
    {C::IndexOutOfRange, "index_out_of_range", "Index out of range", D::GeneralCode, T::Deterministic,
     "the same index fails again", "an index went past the end of a list, array or tensor"},
    {C::UndefinedName, "undefined_name", "Undefined name", D::GeneralCode, T::Deterministic,
     "the same name is missing again", "a name was used before it was defined or imported"},
    {C::NotImplemented, "not_implemented", "Not implemented", D::GeneralCode, T::Deterministic,
     "the same path is taken again", "the code reached a method or feature that is not implemented"},
    {C::OtherPythonError, "other_python_error", "Other Python error", D::GeneralCode, T::Deterministic,
     "an ordinary exception in the job's code fails the same way again", "an exception in the job's code"},
    {C::NativeCrash, "native_crash", "Native crash", D::GeneralCode, T::Unknown,
     "a crash in native code may or may not repeat: memory corruption and races often do not",
     "native code crashed (a C/C++/CUDA extension or the framework): the native and Python stacks show "
     "where; replay tells whether it repeats"},
    {C::CorruptData, "corrupt_data", "Corrupt data", D::Data, T::Deterministic, "the same bytes are read again",
     "a data file could not be parsed (truncated or malformed JSON, pickle, .npy, archive, image): "
     "regenerate or skip the record"},
    {C::UnexpectedEncoding, "unexpected_encoding", "Unexpected encoding", D::Data, T::Deterministic,
     "the same bytes are decoded again",
     "text was decoded with the wrong encoding (e.g. ASCII for UTF-8 data under LANG=C): open files with an "
     "explicit encoding"},
    {C::Unknown, "unknown", "Unknown", D::Unknown, T::Unknown, "", ""},
};

std::string lower(const std::string& s) {
  std::string o(s);
  for (auto& c : o) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return o;
}

bool has(const std::string& haystack, const char* needle) { return haystack.find(needle) != std::string::npos; }

template <typename... Needles>
bool any(const std::string& s, Needles... n) {
  return (has(s, n) || ...);
}

// "json.decoder.JSONDecodeError" -> "JSONDecodeError"
std::string baseType(const std::string& type) {
  auto dot = type.rfind('.');
  return dot == std::string::npos ? type : type.substr(dot + 1);
}

bool framesMention(const std::vector<Frame>& tb, const char* fragment) {
  for (const auto& f : tb)
    if (has(f.file, fragment)) return true;
  return false;
}

// 'x' of "... 'x' ..." after `marker`.
std::string quotedAfter(const std::string& s, const std::string& marker) {
  auto p = s.find(marker);
  if (p == std::string::npos) return "";
  p += marker.size();
  auto q1 = s.find_first_of("'\"", p);
  if (q1 == std::string::npos) return "";
  auto q2 = s.find(s[q1], q1 + 1);
  if (q2 == std::string::npos) return "";
  return s.substr(q1 + 1, q2 - q1 - 1);
}

std::string clip(const std::string& s, size_t n = 300) {
  std::string one;
  for (char c : s) one += c == '\n' ? ' ' : c;
  return one.size() <= n ? one : one.substr(0, n) + "...";
}

const std::set<std::string>& frameworks() {
  static const std::set<std::string> f = {
      "torch",      "torchvision", "torchaudio",   "torchtext",         "tensorflow",
      "keras",      "jax",         "transformers", "pytorch_lightning", "lightning",
      "accelerate", "deepspeed",   "apex",         "horovod",           "mxnet",
      "paddle"};
  return f;
}

std::string topLevel(const std::string& module) {
  auto dot = module.find('.');
  return dot == std::string::npos ? module : module.substr(0, dot);
}

ExceptionClass make(Category c, std::string detail = "") { return {c, std::move(detail)}; }

}  // namespace

const CategoryInfo& categoryInfo(Category c) {
  for (const auto& i : kCategories)
    if (i.category == c) return i;
  return kCategories[std::size(kCategories) - 1];  // the last: Unknown
}

std::span<const CategoryInfo> allCategories() { return kCategories; }

const char* dimensionId(Dimension d) {
  switch (d) {
    case D::None:
      return "none";
    case D::Environment:
      return "execution_environment";
    case D::DeepLearning:
      return "deep_learning";
    case D::GeneralCode:
      return "general_code_error";
    case D::Data:
      return "data";
    case D::Unknown:
      return "unknown";
  }
  return "unknown";
}

const char* dimensionName(Dimension d) {
  switch (d) {
    case D::None:
      return "none";
    case D::Environment:
      return "Execution environment";
    case D::DeepLearning:
      return "Deep-learning specific";
    case D::GeneralCode:
      return "General code error";
    case D::Data:
      return "Data";
    case D::Unknown:
      return "Unknown";
  }
  return "Unknown";
}

const char* determinismId(Determinism d) {
  switch (d) {
    case T::Deterministic:
      return "deterministic";
    case T::NonDeterministic:
      return "nondeterministic";
    case T::Unknown:
      return "unknown";
  }
  return "unknown";
}

const char* phaseId(Phase p) {
  switch (p) {
    case Phase::None:
      return "none";
    case Phase::Initialisation:
      return "initialisation";
    case Phase::Training:
      return "training";
    case Phase::Evaluation:
      return "evaluation";
    case Phase::Shutdown:
      return "shutdown";
  }
  return "none";
}

std::string pathInMessage(const std::string& m) {
  // Python's OSError: "[Errno 2] No such file or directory: '/mnt/data/val.json'" (and
  // "-> 'dst'" for two-path calls: the first one is the one that failed).
  if (m.rfind("[Errno", 0) == 0) {
    auto colon = m.find(": '");
    if (colon == std::string::npos) colon = m.find(": \"");
    if (colon != std::string::npos) {
      char q = m[colon + 2];
      auto end = m.find(q, colon + 3);
      if (end != std::string::npos) return m.substr(colon + 3, end - colon - 3);
    }
  }
  // Otherwise the first quoted or bare token that looks like a path.
  for (size_t i = 0; i < m.size(); ++i) {
    char c = m[i];
    if (c == '\'' || c == '"') {
      auto end = m.find(c, i + 1);
      if (end == std::string::npos) break;
      std::string tok = m.substr(i + 1, end - i - 1);
      if (tok.find('/') != std::string::npos && tok.find(' ') == std::string::npos) return tok;
      i = end;
    } else if (c == '/' && (i == 0 || m[i - 1] == ' ' || m[i - 1] == '(')) {
      size_t end = m.find_first_of(" ,;:)'\"\n", i);
      std::string tok = m.substr(i, end == std::string::npos ? std::string::npos : end - i);
      if (tok.size() > 1) return tok;
    }
  }
  return "";
}

bool isStartupProbe(const std::string& path, int op) {
  auto slash = path.rfind('/');
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  static const char* names[] = {"pyvenv.cfg", "pybuilddir.txt", "Setup.local", "ld.so.preload",
                                "classid",    "fips_enabled",   "hwf.deny"};
  for (const char* n : names)
    if (base == n) return true;
  if (base.size() > 5 && base.compare(base.size() - 5, 5, "._pth") == 0) return true;
  if (base.rfind("python3", 0) == 0 && base.size() > 4 && base.compare(base.size() - 4, 4, ".zip") == 0) return true;
  if (op == 2 && base.rfind("__init__.", 0) == 0) return true;  // the import system probing a package
  // The import system's bytecode cache: looked up, then created by Python itself (a first run
  // creates it, so "missing then, here now" would be said of every fresh package).
  if (base == "__pycache__" || path.find("/__pycache__/") != std::string::npos) return true;
  static const char* parts[] = {"/LC_MESSAGES/",      "/bin/lib/python", "/bin/Modules/",
                                "/.local/lib/python", "/.local/bin",     "/usr/share/locale"};
  for (const char* p : parts)
    if (path.find(p) != std::string::npos) return true;
  static const char* prefixes[] = {"/usr/lib/locale/", "/etc/gcrypt/",      "/etc/selinux/",  "/etc/libnl/",
                                   "/etc/gnutls/",     "/proc/sys/crypto/", "/sys/fs/selinux"};
  for (const char* p : prefixes)
    if (path.rfind(p, 0) == 0) return true;
  return false;
}

bool isUserFrame(const Frame& f) {
  const std::string& p = f.file;
  if (p.empty() || p[0] == '<') return false;  // <frozen importlib._bootstrap>, <string>
  if (has(p, "-packages/") || has(p, "/dlrr_hook/")) return false;
  if (has(p, "/lib/python3") || has(p, "/lib64/python3")) return false;
  return true;
}

namespace {

// A DataLoader worker's exception re-raised in the main process (as its own type, or as a
// RuntimeError when that type cannot be rebuilt from a message) carries the worker's
// traceback as text: "Caught X in DataLoader worker process 0.\nOriginal Traceback (most
// recent call last):\n  File "f", line N, in fn\n    code\nmodule.X: message". Parses it.
bool parseWorkerException(const std::string& m, std::string& type, std::string& msg, std::vector<Frame>& frames) {
  const std::string marker = "Original Traceback (most recent call last):";
  auto o = m.find(marker);
  if (o == std::string::npos) return false;
  std::vector<std::string> lines;
  size_t start = o + marker.size();
  while (start < m.size()) {
    size_t nl = m.find('\n', start);
    if (nl == std::string::npos) nl = m.size();
    lines.push_back(m.substr(start, nl - start));
    start = nl + 1;
  }
  std::string last;
  for (const auto& l : lines) {
    auto p = l.find("File \"");
    if (p != std::string::npos) {
      auto q = l.find('"', p + 6);
      Frame f;
      f.file = q == std::string::npos ? "" : l.substr(p + 6, q - p - 6);
      auto ln = l.find("line ", q == std::string::npos ? p : q);
      if (ln != std::string::npos) std::from_chars(l.data() + ln + 5, l.data() + l.size(), f.line);  // else 0
      auto in = l.find(", in ");
      if (in != std::string::npos) f.function = l.substr(in + 5);
      frames.push_back(f);
    } else if (!l.empty() && l[0] != ' ' && l[0] != '\t') {
      last = l;
    }
  }
  if (last.empty()) return false;
  auto colon = last.find(": ");
  type = colon == std::string::npos ? last : last.substr(0, colon);
  msg = colon == std::string::npos ? "" : last.substr(colon + 2);
  return !type.empty() && type.find(' ') == std::string::npos;
}

// ---- the exception rule table: rules are tried in order and the first that matches decides.
// The order matters: GPU rules come first because their messages also say "out of memory" or
// "error"; specific messages come before the bare exception types that would also match them.

// What a rule looks at: the exception's type and message as recorded and lowercased, its
// base type name (without the module), and whether its traceback passes through a data reader.
struct ExceptionText {
  const std::string& type;
  const std::string& message;
  const std::vector<Frame>& tb;
  std::string base, m, t;
  bool readsData;
};

struct ExceptionRule {
  const char* name;  // what the rule recognises (for a reader of the table)
  bool (*matches)(const ExceptionText&);
  ExceptionClass (*classify)(const ExceptionText&);
};

bool readsDataFile(const std::vector<Frame>& tb) {
  for (const char* reader :
       {"/json/", "/pickle", "numpy/lib/format.py", "numpy/lib/npyio.py", "/csv.py", "torch/serialization.py", "PIL/",
        "/zipfile", "/tarfile", "/gzip.py", "pandas/io/", "h5py/"})
    if (framesMention(tb, reader)) return true;
  return false;
}

std::string frameworkModuleOf(const ExceptionText& x) {  // "module 'torch.x' has no attribute": torch.x
  if (x.base != "AttributeError" || !has(x.message, "module '")) return "";
  std::string mod = quotedAfter(x.message, "module");
  return frameworks().count(topLevel(mod)) ? mod : "";
}

ExceptionClass clipped(Category c, const ExceptionText& x) { return make(c, clip(x.message, 160)); }

constexpr ExceptionRule kExceptionRules[] = {
    // ---- GPU
    {"GPU out of memory",
     [](const ExceptionText& x) {
       return any(x.m, "cuda out of memory", "cuda error: out of memory", "cublas_status_alloc_failed",
                  "cudnn_status_alloc_failed", "hip out of memory", "mps backend out of memory",
                  "cudaerrormemoryallocation", "out of memory on device") ||
              (x.base == "OutOfMemoryError" && !any(x.t, "cpu"));
     },
     [](const ExceptionText& x) {
       std::string detail = "the GPU allocator could not satisfy a request";
       auto p = x.message.find("Tried to allocate ");
       if (p != std::string::npos) {
         detail = x.message.substr(p, x.message.find_first_of(";(", p) - p);
         while (!detail.empty() && detail.back() == ' ') detail.pop_back();
       }
       return make(C::GpuOutOfMemory, detail);
     }},
    {"collective failed or timed out",
     [](const ExceptionText& x) {
       return any(x.m, "nccl", "gloo", "process group", "c10d") &&
              any(x.m, "timeout", "timed out", "watchdog", "connection reset", "connection closed",
                  "unhandled system error", "remote process exited", "broken pipe", "peer");
     },
     [](const ExceptionText&) { return make(C::CommunicationFailure, "a collective operation failed or timed out"); }},
    {"torch.distributed error types",
     [](const ExceptionText& x) {
       return x.base == "DistBackendError" || x.base == "DistNetworkError" || x.base == "DistStoreError";
     },
     [](const ExceptionText& x) { return make(C::CommunicationFailure, x.base); }},
    {"no usable CUDA device",
     [](const ExceptionText& x) {
       return any(x.m, "no cuda gpus are available", "found no nvidia driver", "cuda driver version is insufficient",
                  "all cuda-capable devices are busy", "invalid device ordinal", "cuda error: unknown error",
                  "no cuda-capable device is detected", "cuda driver initialization failed");
     },
     [](const ExceptionText&) { return make(C::DeviceUnavailable, "no usable CUDA device"); }},
    {"framework build without this GPU",
     [](const ExceptionText& x) {
       return any(x.m, "torch not compiled with cuda enabled", "no kernel image is available");
     },
     [](const ExceptionText&) {
       return make(C::LibraryNotFound, "the installed framework build does not support this GPU (or has no CUDA)");
     }},
    // ---- memory
    {"host allocation failed",
     [](const ExceptionText& x) {
       return x.base == "MemoryError" || x.base == "_ArrayMemoryError" ||
              any(x.m, "defaultcpuallocator: can't allocate memory", "defaultcpuallocator: not enough memory",
                  "cannot allocate memory", "[errno 12]", "std::bad_alloc", "unable to allocate") ||
              (any(x.m, "out of memory") && !any(x.m, "cuda", "gpu", "device"));
     },
     [](const ExceptionText&) { return make(C::CpuOutOfMemory, "a host memory allocation failed"); }},
    {"DataLoader worker killed",
     [](const ExceptionText& x) { return any(x.m, "dataloader worker") && any(x.m, "killed by signal: killed"); },
     [](const ExceptionText&) {
       return make(C::CpuOutOfMemory, "a DataLoader worker was killed (SIGKILL: most often the kernel's OOM killer)");
     }},
    {"shared memory exhausted",
     [](const ExceptionText& x) { return any(x.m, "bus error") && any(x.m, "shared memory", "shm"); },
     [](const ExceptionText&) {
       return make(C::CpuOutOfMemory, "shared memory (/dev/shm) ran out for DataLoader workers");
     }},
    // ---- libraries and modules
    {"Python module missing", [](const ExceptionText& x) { return x.base == "ModuleNotFoundError"; },
     [](const ExceptionText& x) {
       std::string mod = quotedAfter(x.message, "No module named");
       return make(C::LibraryNotFound,
                   mod.empty() ? "a Python module is not installed" : "Python module '" + mod + "' is not installed");
     }},
    {"shared library failed to load",
     [](const ExceptionText& x) {
       return any(x.m, "cannot open shared object file", "undefined symbol:", "version `glibc", "wrong elf class",
                  "dll load failed", "image not found", "error while loading shared libraries");
     },
     [](const ExceptionText& x) {
       auto colon = x.message.find(':');
       std::string lib = colon == std::string::npos ? "" : x.message.substr(0, colon);
       auto sp = lib.rfind(' ');
       if (sp != std::string::npos) lib = lib.substr(sp + 1);
       return make(C::LibraryNotFound,
                   lib.empty() ? "a shared library failed to load" : "shared library " + lib + " failed to load");
     }},
    {"import failed", [](const ExceptionText& x) { return x.base == "ImportError"; },
     [](const ExceptionText& x) {
       if (has(x.message, "cannot import name")) {
         std::string name = quotedAfter(x.message, "cannot import name");
         std::string from = quotedAfter(x.message, "from");
         if (frameworks().count(topLevel(from)))
           return make(C::FrameworkApiMisuse,
                       "'" + name + "' is not in the installed " + topLevel(from) + " (an API of another version)");
         return make(C::LibraryNotFound, "the installed '" + from + "' has no '" + name + "' (another version?)");
       }
       return make(C::LibraryNotFound, "an import failed");
     }},
    // ---- file system
    {"permission denied",
     [](const ExceptionText& x) {
       return x.base == "PermissionError" ||
              any(x.m, "[errno 13]", "permission denied", "[errno 1] operation not permitted", "read-only file system",
                  "[errno 30]");
     },
     [](const ExceptionText& x) { return make(C::PermissionDenied, pathInMessage(x.message)); }},
    {"disk full",
     [](const ExceptionText& x) {
       return any(x.m, "[errno 28]", "no space left on device", "disk quota exceeded", "[errno 122]");
     },
     [](const ExceptionText& x) { return make(C::DiskFull, pathInMessage(x.message)); }},
    {"path not found",
     [](const ExceptionText& x) {
       return x.base == "FileNotFoundError" || x.base == "NotADirectoryError" || x.base == "IsADirectoryError" ||
              any(x.m, "[errno 2]", "no such file or directory", "[errno 20]", "not a directory") ||
              (any(x.m, "does not exist", "not found", "can't find", "cannot find", "could not find") &&
               !pathInMessage(x.message).empty());
     },
     [](const ExceptionText& x) { return make(C::PathNotFound, pathInMessage(x.message)); }},
    // ---- syntax
    {"syntax error",
     [](const ExceptionText& x) {
       return x.base == "SyntaxError" || x.base == "IndentationError" || x.base == "TabError";
     },
     [](const ExceptionText& x) { return make(C::SyntaxError, x.message); }},
    // ---- data
    {"text decoding",
     [](const ExceptionText& x) {
       return x.base == "UnicodeDecodeError" || x.base == "UnicodeEncodeError" || x.base == "UnicodeError" ||
              x.base == "UnicodeTranslateError" || any(x.m, "codec can't decode", "codec can't encode");
     },
     [](const ExceptionText& x) { return make(C::UnexpectedEncoding, x.message.substr(0, x.message.find(':'))); }},
    {"corrupt data file",
     [](const ExceptionText& x) {
       const std::string& b = x.base;
       return b == "JSONDecodeError" || b == "UnpicklingError" || b == "BadZipFile" || b == "BadZipfile" ||
              b == "UnidentifiedImageError" || b == "BadGzipFile" || b == "ParserError" || x.t == "_csv.error" ||
              x.t == "csv.error" || x.t == "tarfile.readerror" || x.t == "zlib.error" ||
              any(x.m, "pytorchstreamreader failed", "failed finding central directory", "invalid load key",
                  "pickle data was truncated", "image file is truncated", "cannot identify image file",
                  "compressed file ended before", "expecting value: line", "unterminated string starting at",
                  "failed to interpret file", "as a pickle", "could not convert string to float", "truncated file") ||
              (b == "EOFError" && (x.readsData || any(x.m, "ran out of input", "no data left in file"))) ||
              (x.readsData && (b == "ValueError" || b == "OSError"));
     },
     [](const ExceptionText& x) {
       return make(C::CorruptData, x.readsData ? "while reading a data file" : "a record could not be parsed");
     }},
    // ---- deep-learning specific: shapes, NaN, API use
    {"tensor shapes, dtypes or devices",
     [](const ExceptionText& x) {
       return any(x.m, "size mismatch", "shape mismatch", "shapes cannot be multiplied",
                  "must match the size of tensor", "sizes of tensors must match", "expected input batch_size",
                  "to match target batch_size", "error(s) in loading state_dict", "missing key(s) in state_dict",
                  "unexpected key(s) in state_dict", "is invalid for input of size", "expected scalar type",
                  "expected object of scalar type", "expected all tensors to be on the same device",
                  "should be the same", "dimension out of range", "inconsistent tensor size",
                  "number of dims don't match", "doesn't match the broadcast shape", "mismatch in shape", "expected 2d",
                  "expected 3d", "expected 4d", "-dimensional input", "must be the same as input size",
                  "using a target size", "to have 3 channels", " channels, but got ", "non-singleton dimension",
                  "found dtype");
     },
     [](const ExceptionText& x) { return clipped(C::TensorMismatch, x); }},
    {"NaN or Inf loss",
     [](const ExceptionText& x) {
       return x.base == "FloatingPointError" ||
              any(x.m, "returned nan", "loss is nan", "nan loss", "loss nan", "non-finite loss", "loss is inf",
                  "contains nan", "nan or inf", "inf or nan", "`inf`, `nan`", "nan values", "is nan");
     },
     [](const ExceptionText& x) { return clipped(C::LossNaN, x); }},
    {"framework API misuse",
     [](const ExceptionText& x) {
       return any(x.m, "backward through the graph a second time", "does not require grad and does not have a grad_fn",
                  "a leaf variable that requires grad", "modified by an inplace operation",
                  "can't call numpy() on tensor that requires grad", "can't convert cuda", "use tensor.cpu()",
                  "cannot re-initialize cuda in forked subprocess", "default process group has not been initialized",
                  "expected to have finished reduction in the prior iteration",
                  "grad can be implicitly created only for scalar outputs", "can't pickle local object",
                  "weights only load failed", "is not a module subclass");
     },
     [](const ExceptionText& x) { return clipped(C::FrameworkApiMisuse, x); }},
    {"framework attribute of another version", [](const ExceptionText& x) { return !frameworkModuleOf(x).empty(); },
     [](const ExceptionText& x) {
       return make(C::FrameworkApiMisuse, "'" + frameworkModuleOf(x) + "' has no '" +
                                              quotedAfter(x.message, "has no attribute") +
                                              "' (an API of another version)");
     }},
    // ---- general code errors
    {"None used as a value",
     [](const ExceptionText& x) {
       return any(x.m, "nonetype") && (x.base == "AttributeError" || x.base == "TypeError");
     },
     [](const ExceptionText& x) { return clipped(C::NullReference, x); }},
    {"launch argument rejected",
     [](const ExceptionText& x) { return x.base == "ArgumentError" || x.t == "argparse.argumenterror"; },
     [](const ExceptionText&) { return make(C::IllegalArgument, "a launch argument was rejected"); }},
    {"device-side assert", [](const ExceptionText& x) { return any(x.m, "device-side assert triggered"); },
     [](const ExceptionText&) {
       return make(C::IllegalArgument, "a device-side assert (most often a label or index out of range)");
     }},
    {"interrupted", [](const ExceptionText& x) { return x.base == "KeyboardInterrupt"; },
     [](const ExceptionText&) { return make(C::ExternalSignal, "interrupted (SIGINT)"); }},
    {"call with wrong arguments",
     [](const ExceptionText& x) {
       return x.base == "TypeError" && any(x.m, "unexpected keyword argument", "required positional argument",
                                           "positional argument but", "positional arguments but");
     },
     [](const ExceptionText& x) { return clipped(C::IllegalArgument, x); }},
    {"TypeError", [](const ExceptionText& x) { return x.base == "TypeError"; },
     [](const ExceptionText& x) { return clipped(C::TypeMismatch, x); }},
    {"ValueError", [](const ExceptionText& x) { return x.base == "ValueError"; },
     [](const ExceptionText& x) { return clipped(C::IllegalArgument, x); }},
    {"KeyError", [](const ExceptionText& x) { return x.base == "KeyError"; },
     [](const ExceptionText& x) { return make(C::KeyNotFound, "key " + x.message); }},
    {"AttributeError", [](const ExceptionText& x) { return x.base == "AttributeError"; },
     [](const ExceptionText& x) { return clipped(C::AttributeNotFound, x); }},
    {"IndexError", [](const ExceptionText& x) { return x.base == "IndexError"; },
     [](const ExceptionText& x) { return clipped(C::IndexOutOfRange, x); }},
    {"undefined name", [](const ExceptionText& x) { return x.base == "NameError" || x.base == "UnboundLocalError"; },
     [](const ExceptionText& x) { return clipped(C::UndefinedName, x); }},
    {"NotImplementedError", [](const ExceptionText& x) { return x.base == "NotImplementedError"; },
     [](const ExceptionText& x) { return clipped(C::NotImplemented, x); }},
    {"input ended early", [](const ExceptionText& x) { return x.base == "EOFError"; },
     [](const ExceptionText&) { return make(C::CorruptData, "input ended early"); }},
};

}  // namespace

ExceptionClass classifyException(const std::string& type, const std::string& message, const std::vector<Frame>& tb) {
  {
    std::string wType, wMessage;
    std::vector<Frame> wFrames;
    if (parseWorkerException(message, wType, wMessage, wFrames)) return classifyException(wType, wMessage, wFrames);
  }
  const ExceptionText x{type, message, tb, baseType(type), lower(message), lower(type), readsDataFile(tb)};
  for (const ExceptionRule& r : kExceptionRules)
    if (r.matches(x)) return r.classify(x);
  return make(C::OtherPythonError, x.base.empty() ? "" : x.base);
}

namespace {

// An exception re-raised from a DataLoader worker carries the worker's traceback in its
// message ("Caught KeyError in DataLoader worker process 0.\nOriginal Traceback ...\nKeyError:
// 'x'"): the last line is the exception itself.
constexpr const char* kOriginalTraceback = "Original Traceback (most recent call last):";

std::string shownMessage(const std::string& m) {
  if (m.find(kOriginalTraceback) == std::string::npos) return m;
  std::string last;
  size_t start = 0;
  while (start < m.size()) {
    size_t nl = m.find('\n', start);
    if (nl == std::string::npos) nl = m.size();
    std::string line = m.substr(start, nl - start);
    if (line.find_first_not_of(" \t") != std::string::npos) last = line;
    start = nl + 1;
  }
  auto colon = last.find(": ");
  return colon == std::string::npos ? last : last.substr(colon + 2);
}

// "worker.py:12 in __getitem__" from the last File line of a worker's traceback, or "".
std::string workerFrame(const std::string& m) {
  auto o = m.find(kOriginalTraceback);
  if (o == std::string::npos) return "";
  auto p = m.rfind("File \"");
  if (p == std::string::npos || p < o) return "";
  auto q = m.find('"', p + 6);
  if (q == std::string::npos) return "";
  std::string file = m.substr(p + 6, q - p - 6);
  auto slash = file.rfind('/');
  std::string out = slash == std::string::npos ? file : file.substr(slash + 1);
  auto ln = m.find("line ", q);
  int line = 0;
  if (ln != std::string::npos && std::from_chars(m.data() + ln + 5, m.data() + m.size(), line).ec == std::errc{})
    out += ":" + std::to_string(line);
  auto in = m.find(", in ", q);
  auto eol = m.find('\n', q);
  if (in != std::string::npos && (eol == std::string::npos || in < eol))
    out += " in " + m.substr(in + 5, eol == std::string::npos ? std::string::npos : eol - in - 5);
  return out;
}

std::string frameText(const Frame& f) {
  auto slash = f.file.rfind('/');
  std::string out = (slash == std::string::npos ? f.file : f.file.substr(slash + 1)) + ":" + std::to_string(f.line);
  if (!f.function.empty()) out += " in " + f.function;
  if (!f.code.empty()) out += ": " + clip(f.code, 100);
  return out;
}

// The innermost frame, and the innermost frame of the job's own code when that is another.
std::string locationOf(const FailureRecord& f) {
  if (f.traceback.empty()) return f.where;
  const Frame& inner = f.traceback.back();
  std::string out = frameText(inner);
  if (!isUserFrame(inner)) {
    for (auto it = f.traceback.rbegin(); it != f.traceback.rend(); ++it)
      if (isUserFrame(*it)) {
        out += " (called from " + frameText(*it) + ")";
        break;
      }
  }
  return out;
}

// "/mnt/data/val.json" -> "/mnt"; relative paths -> "".
std::string topDir(const std::string& p) {
  if (p.size() < 2 || p[0] != '/') return "";
  auto s = p.find('/', 1);
  return s == std::string::npos ? "" : p.substr(0, s);
}

bool samePath(const std::string& recorded, const std::string& named) {
  if (named.empty()) return false;
  if (recorded == named) return true;
  return named[0] != '/' && recorded.size() > named.size() &&
         recorded.compare(recorded.size() - named.size(), named.size(), named) == 0 &&
         recorded[recorded.size() - named.size() - 1] == '/';
}

std::string missingText(const MissingPathRecord& m) {
  return m.path + " (" + errnoName(m.error) + ", " + lookupOpName(m.op) +
         (m.count > 1 ? ", " + std::to_string(m.count) + "x" : "") + ")";
}

void pathEvidence(const TriageInput& in, const std::string& named, std::vector<std::string>& ev, bool denied) {
  const MissingPathRecord* exact = nullptr;
  for (const auto& m : in.missingPaths)
    if (samePath(m.path, named) && (!exact || (exact->op == 2 && m.op != 2))) exact = &m;
  if (exact)
    ev.push_back("recorded: " + std::string(lookupOpName(exact->op)) + " " + exact->path + " failed with " +
                 errnoName(exact->error) + " (" + errnoText(exact->error) + ")" +
                 (exact->count > 1 ? ", " + std::to_string(exact->count) + " times" : ""));
  std::string top = topDir(exact ? exact->path : named);
  std::vector<const MissingPathRecord*> related, others;
  std::set<std::string> seen;
  for (const auto& m : in.missingPaths) {
    if (&m == exact || isStartupProbe(m.path, m.op) || !seen.insert(m.path).second) continue;
    if (exact && m.path == exact->path) continue;
    bool deniedErr = m.error == 13 || m.error == 1 || m.error == 30;
    if (denied != deniedErr) continue;
    if (!top.empty() && m.path.rfind(top + "/", 0) == 0)
      related.push_back(&m);
    else
      others.push_back(&m);
  }
  const char* what = denied ? "denied" : "missing";
  if (!related.empty()) {
    std::string line = std::to_string(related.size()) + " other " + what + " path" + (related.size() > 1 ? "s" : "") +
                       " under " + top + ": ";
    for (size_t i = 0; i < related.size() && i < 5; ++i) line += (i ? ", " : "") + missingText(*related[i]);
    if (related.size() > 5) line += ", ...";
    ev.push_back(line);
  } else if (named.empty() && !others.empty()) {
    std::string line = std::string(what) + " paths recorded: ";
    for (size_t i = 0; i < others.size() && i < 5; ++i) line += (i ? ", " : "") + missingText(*others[i]);
    if (others.size() > 5) line += ", ... (" + std::to_string(others.size()) + " in all)";
    ev.push_back(line);
  }
}

std::string envValue(const TriageInput& in, const char* key) {
  auto it = in.env.find(key);
  return it == in.env.end() ? "" : it->second;
}

std::string runtimeValue(const TriageInput& in, const char* key) {
  auto it = in.runtime.find(key);
  return it == in.runtime.end() ? "" : it->second;
}

void memoryEvidence(const TriageInput& in, std::vector<std::string>& ev) {
  auto add = [&](const ResourceRecord& r, const char* who) {
    std::string line = std::string(who) + " peak resident memory " + bytesText(r.maxRss);
    if (r.vmPeak) line += ", peak virtual " + bytesText(r.vmPeak);
    if (r.addressSpaceLimit) line += "; address-space limit (ulimit -v) " + bytesText(r.addressSpaceLimit);
    if (r.memoryLimit) line += "; cgroup memory limit " + bytesText(r.memoryLimit);
    if (r.memTotal) line += "; machine memory " + bytesText(r.memTotal);
    ev.push_back(line);
  };
  if (in.processPeak) add(*in.processPeak, "process");
  if (in.launcherPeak) {
    if (in.launcherPeak->maxRss && (!in.processPeak || in.launcherPeak->maxRss > in.processPeak->maxRss / 4 * 5))
      ev.push_back("largest process of the job: peak resident memory " + bytesText(in.launcherPeak->maxRss));
    if (in.launcherPeak->oomKills)
      ev.push_back("the memory cgroup counted " + std::to_string(in.launcherPeak->oomKills) +
                   " OOM kill(s) while the job ran");
  }
}

void gpuEvidence(const TriageInput& in, std::vector<std::string>& ev) {
  if (in.processPeak)
    for (const auto& g : in.processPeak->gpus)
      ev.push_back("cuda:" + std::to_string(g.device) + " peak allocated " + bytesText(g.maxAllocated) + ", reserved " +
                   bytesText(g.maxReserved) + " of " + bytesText(g.total));
  std::string vis = envValue(in, "CUDA_VISIBLE_DEVICES");
  if (!vis.empty()) ev.push_back("CUDA_VISIBLE_DEVICES=" + vis);
  for (const char* k : {"cuda.device.0", "cuda.device_count", "cudnn.version"}) {
    std::string v = runtimeValue(in, k);
    if (!v.empty()) ev.push_back(std::string(k) + " = " + v);
  }
}

void libraryEvidence(const TriageInput& in, const std::string& message, std::vector<std::string>& ev) {
  for (const auto& l : in.libraryErrors)
    ev.push_back("dlopen(" + l.name + ") failed: " + clip(l.error, 200) +
                 (l.count > 1 ? " (" + std::to_string(l.count) + " times)" : ""));
  std::string ld = envValue(in, "LD_LIBRARY_PATH");
  if (!in.libraryErrors.empty() || has(message, ".so"))
    ev.push_back(ld.empty() ? "LD_LIBRARY_PATH was not set" : "LD_LIBRARY_PATH=" + ld);
  std::string mod = quotedAfter(message, "No module named");
  std::string from = quotedAfter(message, "from");
  std::string want = topLevel(!mod.empty() ? mod : from);
  if (!want.empty()) {
    bool found = false;
    for (const auto& p : in.packages)
      if (p.name == want) {
        ev.push_back("installed " + p.name + (p.version.empty() ? "" : " " + p.version) + " at " + p.path);
        found = true;
      }
    if (!found && !mod.empty() && !in.packages.empty())
      ev.push_back("'" + want + "' is not among the " + std::to_string(in.packages.size()) +
                   " top-level packages the job had imported");
  }
  std::string py = runtimeValue(in, "python");
  if (!py.empty()) ev.push_back("Python " + py);
}

// The failure came out of a DataLoader while it produced a batch (its iterator, a worker).
bool loadingBatch(const TriageInput& in) {
  if (!in.failure) return false;
  if (in.failure->message.find("in DataLoader worker process") != std::string::npos) return true;
  for (const auto& f : in.failure->traceback)
    if (f.file.find("torch/utils/data/dataloader.py") != std::string::npos) return true;
  return false;
}

std::string whereText(const TriageInput& in, Phase& phase, int64_t& step) {
  const Timeline& t = in.timeline;
  step = -1;
  if (t.exiting) {
    phase = Phase::Shutdown;
    return "shutdown (after the program finished, while the process exited)";
  }
  if (t.stepOpen) {
    phase = Phase::Training;
    step = t.lastStepBegun;
    if (loadingBatch(in)) return "training step " + std::to_string(t.lastStepBegun) + ", loading the next batch";
    return "training step " + std::to_string(t.lastStepBegun);
  }
  if (t.evalBatchSeen) {
    phase = Phase::Evaluation;
    std::string s =
        "evaluation (loader " + std::to_string(t.evalLoader) + ", batch " + std::to_string(t.evalBatch) + ")";
    if (t.lastStepEnded >= 0) s += ", after training step " + std::to_string(t.lastStepEnded);
    return s;
  }
  if (t.stepsBegun == 0 && in.runtime.count("capture.steps")) {  // --capture process: none recorded
    phase = Phase::None;
    return "not known (no steps are recorded under --capture process)";
  }
  if (t.stepsBegun == 0) {
    phase = Phase::Initialisation;
    return loadingBatch(in) ? "initialisation (loading the first batch, before the first training step)"
                            : "initialisation (before the first training step)";
  }
  if (t.byOptimizer || !t.trainingLoaderEnded) {
    phase = Phase::Training;
    step = t.lastStepEnded;
    if (loadingBatch(in))
      return "training, loading the batch of step " + std::to_string(t.lastStepEnded + 1) + " (after step " +
             std::to_string(t.lastStepEnded) + ")";
    return "training step " + std::to_string(t.lastStepEnded) +
           (t.byBackward       ? " (after its backward(), before the next step)"
            : t.byGradientCall ? " (after its gradient call, before the next step)"
                               : " (after its optimizer update, before the next step)");
  }
  phase = Phase::Evaluation;
  return "after the last training step (" + std::to_string(t.lastStepEnded) +
         "): evaluation, checkpointing or the end of the script";
}

std::string lostText(const TriageResult& r) {
  std::string out;
  if (r.wallSeconds >= 0) out = secondsText(r.wallSeconds) + " of wall time since launch";
  std::string parts;
  if (r.initSeconds >= 0) parts += "initialisation " + secondsText(r.initSeconds);
  if (r.trainingSeconds >= 0)
    parts += (parts.empty() ? "" : ", ") + std::string("training ") + secondsText(r.trainingSeconds);
  if (!parts.empty()) out += (out.empty() ? "" : " ") + ("(" + parts + ")");
  out += (out.empty() ? "" : ", ") + std::to_string(r.stepsCompleted) + " completed step" +
         (r.stepsCompleted == 1 ? "" : "s");
  return out;
}

bool nonfiniteIsDivergence(const TriageInput& in) {
  if (!in.nonfinite) return false;
  const std::string& w = in.nonfinite->where;
  return w == "loss" || w.rfind("grad:", 0) == 0 || w.rfind("param:", 0) == 0 ||
         in.timeline.firstNonFiniteLossStep >= 0;
}

}  // namespace

TriageResult classify(const TriageInput& in) {
  TriageResult r;
  const FailureRecord* f = in.failure ? &*in.failure : nullptr;
  std::string detail;
  std::vector<std::string> ev;
  int exitCode = in.exitCode.value_or(-1);

  if (f && f->kind == "exception") {
    ExceptionClass ec = classifyException(f->exceptionType, f->message, f->traceback);
    r.category = ec.category;
    detail = ec.detail;
    r.summary = clip(f->exceptionType + ": " + shownMessage(f->message), 240);
    // A NaN that came first and reached the loss explains a generic error that followed it.
    if ((ec.category == C::OtherPythonError || ec.category == C::IllegalArgument) && in.nonfinite &&
        nonfiniteIsDivergence(in) && in.nonfinite->tNs <= f->tNs) {
      r.category = C::LossNaN;
      ev.push_back("the first non-finite value came before the exception: " + in.nonfinite->message + " at step " +
                   std::to_string(in.nonfinite->step));
    }
  } else if (f && f->kind == "signal") {
    int sig = f->signal;
    r.summary = "killed by " + signalName(sig) + (f->where.empty() ? "" : " in " + f->where);
    if (isCrashSignal(sig))
      r.category = C::NativeCrash;
    else
      r.category = C::ExternalSignal;
  } else if (in.nonfinite) {
    const FailureRecord& n = *in.nonfinite;
    r.summary = "non-finite value at step " + std::to_string(n.step) + ": " + n.message;
    if (exitCode == 0 && !nonfiniteIsDivergence(in)) {
      r.category = C::None;
      ev.push_back("non-finite values appeared (" + n.message +
                   ") but the loss stayed finite and the job exited 0 "
                   "(e.g. -inf attention masks): not a failure");
    } else {
      r.category = C::LossNaN;
    }
  } else if (exitCode == 0) {
    r.category = C::None;
    r.summary = "no failure: the job exited 0";
  } else if (exitCode > 128 && exitCode < 128 + 65) {
    int sig = exitCode - 128;
    r.summary = "killed by " + signalName(sig) + " (exit status " + std::to_string(exitCode) +
                ") with no failure recorded in the process";
    bool oomKilled = sig == 9 && in.launcherPeak && in.launcherPeak->oomKills > 0;
    bool nearLimit = false;
    if (sig == 9) {
      uint64_t rss =
          std::max(in.processPeak ? in.processPeak->maxRss : 0, in.launcherPeak ? in.launcherPeak->maxRss : 0);
      uint64_t limit = in.launcherPeak && in.launcherPeak->memoryLimit ? in.launcherPeak->memoryLimit
                       : in.processPeak && in.processPeak->memoryLimit ? in.processPeak->memoryLimit
                                                                       : 0;
      nearLimit = limit && rss >= limit / 10 * 9;
    }
    if (oomKilled || nearLimit) {
      r.category = C::CpuOutOfMemory;
      detail = oomKilled ? "killed by the kernel's OOM killer" : "SIGKILL with resident memory at the cgroup limit";
    } else if (isCrashSignal(sig)) {
      r.category = C::NativeCrash;
      detail = "the crash was not caught by the recorder (a child process, or the job replaced the handlers)";
    } else {
      r.category = C::ExternalSignal;
      detail = signalName(sig) + " came from outside the process";
    }
  } else if (exitCode == 2 && in.timeline.stepsBegun == 0) {
    r.category = C::IllegalArgument;
    r.summary = "exit status 2 before the first step, with no exception";
    detail = "exit status 2 is argparse's usage error (the message is on the job's stderr)";
  } else if (exitCode > 0) {
    r.category = C::Unknown;
    r.summary = "exit status " + std::to_string(exitCode) + " with no uncaught exception";
    detail = "the job called sys.exit(" + std::to_string(exitCode) +
             ") or os._exit, or its failure was not in a recorded process";
  } else {
    r.category = C::Unknown;
    r.summary = "the job's end was not recorded (still running, or dlrecord was killed)";
  }

  // Ranks that stopped meeting: the rank that failed first (torchrun's "Root Cause") is usually
  // one that timed out waiting; the suspect the collectives point at is the failure.
  const bool hangFirst = in.hang && !in.hang->suspects.empty();
  const std::string victim = r.summary;
  if (hangFirst) {
    r.category = in.hang->desync ? C::CollectiveDesync : C::DistributedHang;
    r.summary = in.hang->summary;
  }
  const CategoryInfo& info = categoryInfo(r.category);
  r.dimension = info.dimension;
  r.advice = info.advice;
  r.determinism = info.determinism;
  std::string why = info.why;

  // ---- evidence, most telling first
  std::vector<std::string> head;
  if (f && f->kind == "exception") {
    const std::string shown = shownMessage(f->message);
    std::string workerLine = workerFrame(f->message);
    std::string named = pathInMessage(shown);
    switch (r.category) {
      case C::PathNotFound:
        head.push_back(f->exceptionType + ": " + (named.empty() ? clip(f->message, 200) : named));
        pathEvidence(in, named, head, false);
        break;
      case C::PermissionDenied:
        head.push_back(f->exceptionType + ": " + (named.empty() ? clip(f->message, 200) : named));
        pathEvidence(in, named, head, true);
        head.push_back("the job ran as " + (in.user.empty() ? std::string("uid ") + std::to_string(in.uid)
                                                            : in.user + " (uid " + std::to_string(in.uid) + ")"));
        break;
      case C::DiskFull:
        head.push_back(f->exceptionType + ": " + clip(shown, 200));
        break;
      case C::LibraryNotFound:
        head.push_back(f->exceptionType + ": " + clip(shown, 200));
        if (!detail.empty()) head.push_back(detail);
        libraryEvidence(in, f->message, head);
        break;
      case C::GpuOutOfMemory:
        head.push_back(f->exceptionType + ": " + clip(shown, 200));
        gpuEvidence(in, head);
        break;
      case C::DeviceUnavailable:
        head.push_back(f->exceptionType + ": " + clip(shown, 200));
        gpuEvidence(in, head);
        break;
      case C::CpuOutOfMemory:
        head.push_back(f->exceptionType + ": " + clip(shown, 200));
        memoryEvidence(in, head);
        if (in.processPeak && in.processPeak->addressSpaceLimit) {
          r.determinism = T::Deterministic;
          why = "the job hit its own address-space limit, ulimit -v, which is the same on a retry";
        } else if (in.processPeak && in.processPeak->memoryLimit) {
          why = "depends on what else runs in the job's memory cgroup";
        }
        break;
      case C::SyntaxError:
        head.push_back(f->exceptionType + ": " + clip(shown, 200));
        if (!runtimeValue(in, "python").empty())
          head.push_back("the code ran under Python " + runtimeValue(in, "python") +
                         " (syntax errors are often code written for another version)");
        break;
      case C::UnexpectedEncoding: {
        head.push_back(f->exceptionType + ": " + clip(shown, 200));
        std::string locale;
        for (const char* k : {"LC_ALL", "LC_CTYPE", "LANG", "PYTHONIOENCODING", "PYTHONUTF8"}) {
          std::string v = envValue(in, k);
          if (!v.empty()) locale += (locale.empty() ? "" : ", ") + std::string(k) + "=" + v;
        }
        head.push_back(locale.empty()
                           ? "no locale variables set (LANG, LC_ALL): Python defaults may differ between machines"
                           : "locale of the job: " + locale);
        break;
      }
      case C::LossNaN:
        head.push_back(f->exceptionType + ": " + clip(shown, 200));
        break;
      default:
        head.push_back(f->exceptionType + ": " + clip(shown, 200));
        if (!detail.empty() && detail != f->message && detail.find(f->message) == std::string::npos &&
            r.category != C::OtherPythonError)
          head.push_back(detail);
        break;
    }
    if (!workerLine.empty()) head.push_back("raised in a DataLoader worker process, at " + clip(workerLine, 200));
    if (r.category == C::IllegalArgument && f->exceptionType == "argparse.ArgumentError" && !in.command.empty()) {
      std::string cmd;
      for (const auto& a : in.command) cmd += (cmd.empty() ? "" : " ") + a;
      head.push_back("launch command: " + clip(cmd, 200));
    }
  } else if (f && f->kind == "signal") {
    head.push_back(r.summary);
    if (std::string cause = signalCauseText(f->signal, f->signalCode, f->faultAddress); !cause.empty())
      head.push_back(signalName(f->signal) + ": " + cause);
    // faulthandler's dump lists every thread; the crashing one is "Current thread", most
    // recent call first: its innermost line, and the job's own innermost line.
    const std::string& py = f->pythonStack;
    auto cur = py.find("Current thread");
    size_t from = cur == std::string::npos ? 0 : cur;
    size_t end = py.find("\n\n", from);
    std::string block = py.substr(from, end == std::string::npos ? std::string::npos : end - from);
    std::vector<std::string> lines;
    for (size_t p = block.find("File \""); p != std::string::npos; p = block.find("File \"", p + 1))
      lines.push_back(block.substr(p, block.find('\n', p) - p));
    if (!lines.empty()) {
      head.push_back("Python stack of the crashing thread: " + clip(lines.front(), 200));
      for (const auto& l : lines) {
        auto q = l.find('"', 6);
        Frame fr{q == std::string::npos ? "" : l.substr(6, q - 6), 0, "", ""};
        if (isUserFrame(fr)) {
          if (l != lines.front()) head.push_back("in the job's code: " + clip(l, 200));
          break;
        }
      }
    }
    if (r.category == C::ExternalSignal) {
      r.determinism = T::NonDeterministic;
      why = info.why;
    }
  } else if (in.nonfinite || r.category == C::LossNaN) {
    if (in.nonfinite) head.push_back(in.nonfinite->message + " at step " + std::to_string(in.nonfinite->step));
  } else {
    if (!detail.empty()) head.push_back(detail);
    if (r.category == C::CpuOutOfMemory || (r.category == C::ExternalSignal && exitCode == 137))
      memoryEvidence(in, head);
    if (r.category == C::CpuOutOfMemory)
      why = "the OOM killer picks a victim by memory use on the whole machine or cgroup";
  }
  if (r.category == C::LossNaN && in.timeline.lastFiniteLossStep >= 0) {
    char b[160];
    if (in.timeline.firstNonFiniteLossStep >= 0)
      std::snprintf(b, sizeof b, "loss %.6g at step %lld, non-finite from step %lld on", in.timeline.lastFiniteLoss,
                    static_cast<long long>(in.timeline.lastFiniteLossStep),
                    static_cast<long long>(in.timeline.firstNonFiniteLossStep));
    else
      std::snprintf(b, sizeof b, "last finite loss %.6g at step %lld", in.timeline.lastFiniteLoss,
                    static_cast<long long>(in.timeline.lastFiniteLossStep));
    head.push_back(b);
  }
  if (r.category == C::LossNaN)
    for (const auto& b : in.batchFindings) head.push_back(b);
  if (r.category == C::LossNaN && f && f->kind == "exception" && in.nonfinite)
    head.push_back("first non-finite value: " + in.nonfinite->message + " at step " +
                   std::to_string(in.nonfinite->step));
  head.insert(head.end(), ev.begin(), ev.end());
  if (hangFirst) {
    std::vector<std::string> h = in.hang->why;
    h.push_back("the first failure recorded (what torchrun's \"Root Cause\" names) was " + in.stream + "'s: " + victim);
    for (const auto& w : in.hang->wavefront) h.push_back("wavefront: " + w);
    head.insert(head.begin(), h.begin(), h.end());
  }
  // De-duplicate, keep order.
  std::set<std::string> seen;
  for (auto& e : head)
    if (!e.empty() && seen.insert(e).second) r.evidence.push_back(e);

  // ---- where, location, lost work
  if (r.category != C::None) r.where = whereText(in, r.phase, r.step);
  if (f && f->step >= 0 && r.phase == Phase::Training && r.step < 0) r.step = f->step;
  if (!f && in.nonfinite && r.category == C::LossNaN) {
    r.phase = Phase::Training;
    r.step = in.nonfinite->step;
    r.where = "training step " + std::to_string(r.step);
  }
  if (f) r.location = locationOf(*f);
  if (f && !workerFrame(f->message).empty())
    r.location = workerFrame(f->message) + " (in a DataLoader worker)";
  else if (in.nonfinite)
    r.location = in.nonfinite->where;
  const Timeline& t = in.timeline;
  r.stepsCompleted = t.stepsCompleted;
  int64_t end = t.endNs;
  if (end >= 0) {
    if (t.launchRealNs && t.processStartRealNs && t.processStartRealNs >= t.launchRealNs)
      r.wallSeconds = static_cast<double>(t.processStartRealNs - t.launchRealNs + end) / 1e9;
    else
      r.wallSeconds = static_cast<double>(end) / 1e9;
    if (t.firstStepNs >= 0) {
      r.initSeconds = static_cast<double>(t.firstStepNs) / 1e9;
      r.trainingSeconds = static_cast<double>(std::max<int64_t>(0, end - t.firstStepNs)) / 1e9;
    } else if (!in.runtime.count("capture.steps")) {  // under --capture process no step is known
      r.initSeconds = static_cast<double>(end) / 1e9;
    }
  }
  r.lost = lostText(r);
  if (t.firstStepNs < 0 && in.runtime.count("capture.steps"))
    r.lost = (r.wallSeconds >= 0 ? secondsText(r.wallSeconds) + " of wall time since launch; " : std::string()) +
             "steps not recorded (--capture process)";
  if (hangFirst && !in.hang->location.empty())
    r.location = in.hang->location + " (rank " + std::to_string(in.hang->suspects.front()) + ")";

  // ---- retry advice
  switch (r.determinism) {
    case T::Deterministic:  // the category's usual determinism; only a replay shows it
      r.retry = "not known without a replay: this kind usually fails the same way again (" + why +
                "); `dlreplay --check` tells by replaying to the failure";
      break;
    case T::NonDeterministic:
      r.retry = "non-deterministic: " + why + "; a retry may succeed";
      break;
    case T::Unknown:
      r.retry = why.empty() ? "" : "unknown: " + why + "; `dlreplay --check` tells whether it reproduces";
      break;
  }
  std::string unclaimable;
  if (in.trainingProcesses > 1)
    unclaimable = std::to_string(in.trainingProcesses) +
                  " processes trained at once (e.g. torch.multiprocessing workers sharing a model): their "
                  "shared-memory updates race, so two runs of the same command can fail at different steps";
  if (!in.unrecordedProcesses.empty()) {
    const size_t n = in.unrecordedProcesses.size();
    std::string which = in.unrecordedProcesses.front() + (n > 1 ? ", ..." : "");
    unclaimable += (unclaimable.empty() ? "" : "; and ") + std::to_string(n) + (n == 1 ? " process" : " processes") +
                   " of the job ran unrecorded (" + which + "): what " + (n == 1 ? "it" : "they") +
                   " did is not in the trace, and may differ from run to run";
  }
  if (!unclaimable.empty()) r.retry = "not known, and cannot be claimed: " + unclaimable;
  if (r.category == C::None) r.retry.clear();
  return r;
}

}  // namespace dlrr::triage

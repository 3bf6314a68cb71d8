// dltrace dump: a recorded tensor, batch field or RNG state as a NumPy .npy file.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "format/Trace.h"
#include "format/UniqueFd.h"
#include "tools/common/Npy.h"
#include "tools/common/Text.h"
#include "tools/dltrace/Commands.h"
#include "tools/dltrace/EventText.h"
#include "tools/dltrace/OptionValues.h"
#include "tools/dltrace/StepScan.h"

namespace dlrr::tools {
namespace {

constexpr size_t kMaxListedPaths = 40;

// What to write, copied out of the event (readers die with the callback).
struct Target {
  std::string what;  // for messages: "field 0 of the batch of step 3"
  std::string dtype;
  std::vector<int64_t> shape;
  bool fromBlob = true;
  Hash128 hash;
  uint64_t size = 0;
  std::vector<uint8_t> inlineBytes;  // scalars and bytes values
  std::string npyDescr;              // set for inline values
};

std::string kindOf(schema::Value::Reader v) {
  switch (v.which()) {
    case schema::Value::NONE:
      return "None";
    case schema::Value::BOOL:
      return "bool";
    case schema::Value::INT:
      return "int";
    case schema::Value::FLOAT:
      return "float";
    case schema::Value::TEXT:
      return "text";
    case schema::Value::BYTES:
      return "bytes";
    case schema::Value::TENSOR:
      return "tensor";
    case schema::Value::LIST:
      return "list";
    case schema::Value::TUPLE:
      return "tuple";
    case schema::Value::DICT:
      return "dict";
    case schema::Value::OPAQUE:
      return "opaque";
  }
  return "unknown";
}

// Dumpable leaves under v: "inputs.0 (tensor float32[2,3] cpu 24 B)".
void listPaths(schema::Value::Reader v, const std::string& prefix, std::vector<std::string>& out) {
  if (out.size() > kMaxListedPaths) return;
  auto child = [&](const std::string& name) { return prefix.empty() ? name : prefix + "." + name; };
  switch (v.which()) {
    case schema::Value::LIST:
      for (unsigned i = 0; i < v.getList().size(); ++i) listPaths(v.getList()[i], child(std::to_string(i)), out);
      return;
    case schema::Value::TUPLE:
      for (unsigned i = 0; i < v.getTuple().size(); ++i) listPaths(v.getTuple()[i], child(std::to_string(i)), out);
      return;
    case schema::Value::DICT:
      for (auto e : v.getDict()) listPaths(e.getValue(), child(printable(e.getKey().cStr())), out);
      return;
    default:
      out.push_back((prefix.empty() ? std::string("(the whole batch)") : prefix) + " (" + describeValue(v) + ")");
  }
}

std::string pathList(schema::Value::Reader root) {
  std::vector<std::string> paths;
  listPaths(root, "", paths);
  std::string out;
  for (size_t i = 0; i < paths.size() && i < kMaxListedPaths; ++i) out += (i ? ", " : "") + paths[i];
  if (paths.size() > kMaxListedPaths) out += ", ...";
  return out.empty() ? "(none)" : out;
}

Target targetFromValue(schema::Value::Reader v, const std::string& what) {
  Target t;
  t.what = what;
  auto scalar = [&](const void* p, size_t n, const char* descr) {
    t.fromBlob = false;
    t.npyDescr = descr;
    const auto* b = static_cast<const uint8_t*>(p);
    t.inlineBytes.assign(b, b + n);
  };
  switch (v.which()) {
    case schema::Value::TENSOR: {
      auto tr = v.getTensor();
      t.dtype = tr.getDtype().cStr();
      for (auto d : tr.getShape()) t.shape.push_back(d);
      t.hash = {tr.getData().getHashLo(), tr.getData().getHashHi()};
      t.size = tr.getData().getSize();
      return t;
    }
    case schema::Value::INT: {
      int64_t x = v.getInt();
      scalar(&x, sizeof x, "<i8");
      return t;
    }
    case schema::Value::FLOAT: {
      double x = v.getFloat();
      scalar(&x, sizeof x, "<f8");
      return t;
    }
    case schema::Value::BOOL: {
      uint8_t x = v.getBool() ? 1 : 0;
      scalar(&x, 1, "|b1");
      return t;
    }
    case schema::Value::BYTES: {
      auto d = v.getBytes();
      scalar(d.begin(), d.size(), "|u1");
      t.shape = {static_cast<int64_t>(d.size())};
      return t;
    }
    default:
      throw TraceError(ErrorKind::NotFound, what + " is " + kindOf(v) + " (" + describeValue(v) + "), not an array");
  }
}

void writeAllTo(int fd, const std::string& file, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw TraceError(ErrorKind::Io, "cannot write " + file + ": " + std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void writeNpy(const std::string& file, const Target& t, StreamReader& s) {
  std::string descr = t.npyDescr;
  std::vector<uint8_t> data;
  if (t.fromBlob) {
    auto dt = npyDtypeForTorch(t.dtype);
    if (!dt)
      throw TraceError(ErrorKind::NotFound,
                       t.what + " has dtype '" + printable(t.dtype) + "', which has no NumPy equivalent");
    uint64_t need = dt->itemSize;
    for (int64_t d : t.shape) {
      if (d < 0 || __builtin_mul_overflow(need, static_cast<uint64_t>(d), &need))
        throw TraceError(ErrorKind::Corrupt, t.what + " has an invalid shape");
    }
    if (need != t.size)
      throw TraceError(ErrorKind::Corrupt, t.what + ": shape and dtype need " + std::to_string(need) +
                                               " bytes, the blob has " + std::to_string(t.size));
    data = s.readBlob(t.hash, t.size);
    descr = dt->descr;
    if (!dt->note.empty()) warn(dt->note);
  } else {
    data = t.inlineBytes;
  }
  std::string header = npyHeader(descr, t.shape);
  UniqueFd fd;
  if (file == "-") {
    fd.reset(::dup(STDOUT_FILENO));
  } else {
    fd.reset(::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  }
  if (!fd.valid()) throw TraceError(ErrorKind::Io, "cannot create " + file + ": " + std::strerror(errno));
  writeAllTo(fd.get(), file, header.data(), header.size());
  writeAllTo(fd.get(), file, data.data(), data.size());
  if (file != "-" && ::fsync(fd.get()) != 0 && errno != EINVAL)
    throw TraceError(ErrorKind::Io, "cannot write " + file + ": " + std::strerror(errno));
}

// Calls fn on each event of `step` in `s` (jumping there through the step index), the failure
// ring's tensors of the step included (StepScan).
void forEachEventOfStep(StreamReader& s, int64_t step, const std::function<void(schema::Event::Reader)>& fn) {
  uint64_t from = 0;
  if (step >= 0) {
    auto off = s.stepFrameOffset(step);
    if (!off) throw TraceError(ErrorKind::NotFound, "stream " + s.name() + " has no step " + std::to_string(step));
    from = *off;
  }
  StepScan scan(step);
  s.forEachEventUntil(
      [&](schema::Event::Reader e, const FrameInfo&) {
        auto v = scan(e);
        if (v == StepScan::Verdict::Take) fn(e);
        return v != StepScan::Verdict::Stop;
      },
      from);
}

// The output never goes into the trace it is read from (it would replace or add a stream).
void refuseOutputInsideTrace(const std::string& out, const std::string& trace) {
  if (out == "-") return;
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path dir = fs::weakly_canonical(fs::absolute(trace, ec), ec);
  fs::path file = fs::weakly_canonical(fs::absolute(out, ec), ec);
  std::string d = dir.string(), f = file.string();
  if (!d.empty() && (f == d || (f.size() > d.size() && f.compare(0, d.size(), d) == 0 && f[d.size()] == '/')))
    throw UsageError("-o " + printable(out) + " is inside the trace " + printable(trace) +
                     " it reads; write it elsewhere");
}

int run(const Args& args, Output&) {
  const DumpOptions opts = checkDumpOptions(args);
  refuseOutputInsideTrace(opts.outFile, args.trace());
  auto trace = openTraceForTool(args.trace());
  StreamReader& s = selectStream(*trace, args.value("--stream"));
  warnIfDamaged(s);
  const std::string stepText = "step " + std::to_string(opts.step);
  std::optional<Target> target;

  if (args.has("--batch")) {
    auto path = args.value("--batch");
    int batches = 0;
    forEachEventOfStep(s, opts.step, [&](schema::Event::Reader e) {
      if (!e.isBatch() || batches++ > 0) return;
      auto root = e.getBatch().getValue();
      std::string what =
          path ? "field '" + printable(*path) + "' of the batch of " + stepText : "the batch of " + stepText;
      if (!path) {
        // An (inputs, targets) batch, the most common shape: its first field, the inputs, and
        // a note naming the others. Anything else needs a PATH.
        const bool seq = root.isTuple() || root.isList();
        const auto items = root.isTuple() ? root.getTuple() : root.isList() ? root.getList() : root.getTuple();
        if (seq && items.size() > 0 && items[0].isTensor()) {
          warn("the batch of " + stepText + " is a " + kindOf(root) + " (" + pathList(root) +
               "); dumped field 0 (--batch 1 for the next)");
          target = targetFromValue(items[0], "field '0' of the batch of " + stepText);
          return;
        }
        if (!root.isTensor() && root.which() != schema::Value::INT && root.which() != schema::Value::FLOAT &&
            root.which() != schema::Value::BOOL && root.which() != schema::Value::BYTES)
          throw UsageError("the batch of " + stepText + " is a " + kindOf(root) +
                           "; add a PATH after --batch: " + pathList(root));
        target = targetFromValue(root, what);
        return;
      }
      auto v = resolveBatchPath(root, *path);
      if (!v)
        throw TraceError(ErrorKind::NotFound, "no field '" + printable(*path) + "' in the batch of " + stepText +
                                                  "; fields: " + pathList(root));
      target = targetFromValue(*v, what);
    });
    if (batches == 0)
      throw TraceError(ErrorKind::NotFound, "no batch recorded in " + stepText + " of stream " + s.name());
    if (batches > 1) warn(stepText + " has " + std::to_string(batches) + " batches; dumped the first");
  } else if (auto rng = args.value("--rng")) {
    const RngSpec rs = parseRngSpec(*rng);
    const std::string& spec = rs.kindText;
    const std::optional<int>& device = rs.device;
    std::vector<std::string> seen;
    std::vector<Target> matches;
    forEachEventOfStep(s, opts.step, [&](schema::Event::Reader e) {
      if (!e.isRngState()) return;
      auto r = e.getRngState();
      seen.push_back(enumName(r.getKind()) + ":" + std::to_string(r.getDevice()));
      if (r.getKind() != rs.kind || (device && r.getDevice() != *device)) return;
      Target t;
      t.what = enumName(r.getKind()) + " RNG state of " + stepText;
      t.dtype = "uint8";
      t.hash = {r.getState().getHashLo(), r.getState().getHashHi()};
      t.size = r.getState().getSize();
      t.shape = {static_cast<int64_t>(t.size)};
      matches.push_back(t);
    });
    std::string have;
    for (const auto& x : seen) have += (have.empty() ? "" : ", ") + x;
    if (matches.empty())
      throw TraceError(ErrorKind::NotFound, "no " + *rng + " RNG state in " + stepText + " of stream " + s.name() +
                                                " (recorded: " + (have.empty() ? "none" : have) + ")");
    if (matches.size() > 1 && !device)
      throw TraceError(ErrorKind::NotFound,
                       stepText + " has several " + spec + " RNG states (" + have + "); name one as KIND:DEVICE");
    target = matches.front();
  } else {
    std::string path = *args.value("--tensor");
    if (path == "<root>") path.clear();  // a root module's output, as dltrace events names it
    std::optional<schema::TensorDigest::Kind> tkind;
    if (auto k = args.value("--tensor-kind")) tkind = parseTensorKind(*k);
    auto call = args.intValue("--call");
    auto output = args.intValue("--output");
    std::vector<std::string> seen, matchLabels;
    std::vector<Target> matches;
    forEachEventOfStep(s, opts.step, [&](schema::Event::Reader e) {
      if (!e.isTensor()) return;
      auto t = e.getTensor();
      std::string label = enumName(t.getKind()) + " " +
                          (t.getPath().size() ? "'" + printable(t.getPath().cStr()) + "'" : std::string("<root>")) +
                          " call " + std::to_string(t.getCallIndex()) + " output " + std::to_string(t.getOutput());
      seen.push_back(label);
      if (std::string_view(t.getPath().begin(), t.getPath().size()) != path) return;
      if ((tkind && t.getKind() != *tkind) || (call && t.getCallIndex() != *call) ||
          (output && t.getOutput() != *output))
        return;
      auto tr = t.getTensor();
      Target x;
      x.what = "tensor " + label + " of " + stepText;
      x.dtype = tr.getDtype().cStr();
      for (auto d : tr.getShape()) x.shape.push_back(d);
      x.hash = {tr.getData().getHashLo(), tr.getData().getHashHi()};
      x.size = tr.getData().getSize();
      matchLabels.push_back(label);
      matches.push_back(std::move(x));
    });
    std::string have;
    for (size_t i = 0; i < seen.size() && i < kMaxListedPaths; ++i) have += (i ? ", " : "") + seen[i];
    if (matches.empty())
      throw TraceError(ErrorKind::NotFound, "no tensor '" + printable(path) + "' in " + stepText + " of stream " +
                                                s.name() + " (recorded: " + (have.empty() ? "none" : have) + ")");
    if (matches.size() > 1) {
      // Only the matches: the step's other tensors would read as candidates.
      std::string which;
      for (size_t i = 0; i < matchLabels.size() && i < kMaxListedPaths; ++i) which += (i ? ", " : "") + matchLabels[i];
      if (matchLabels.size() > kMaxListedPaths) which += ", ... (" + std::to_string(matchLabels.size()) + " in all)";
      throw TraceError(ErrorKind::NotFound, "several tensors match '" + printable(path) + "' in " + stepText + " (" +
                                                which + "); narrow with --tensor-kind, --call, --output");
    }
    target = matches.front();
  }
  writeNpy(opts.outFile, *target, s);
  if (opts.outFile != "-")
    std::fprintf(stderr, "dltrace: wrote %s to %s\n", target->what.c_str(), opts.outFile.c_str());
  return kExitOk;
}

}  // namespace

CommandDef dumpCommand() {
  return {"dump",
          "a recorded tensor, batch field or RNG state as a NumPy .npy file",
          "dltrace dump TRACE --step N (--batch [PATH] | --rng KIND | --tensor PATH) -o FILE.npy",
          "Writes one recorded array of step N as NumPy .npy (format 1.0; load with np.load).\n"
          "\n"
          "  --batch [PATH]   the step's batch, or the field at PATH: dict keys and list/tuple\n"
          "                   indices separated by dots (0, 1, x, inputs.0). Without PATH the\n"
          "                   batch must be a single tensor; otherwise the error lists the paths.\n"
          "                   Use --batch=PATH when PATH starts with '-'.\n"
          "  --rng KIND[:DEV]  an RNG state as uint8: torchCpu, torchCuda, numpy, python\n"
          "  --tensor PATH     a full tensor the recording kept for step N: a module's output\n"
          "                    (its module path, e.g. conv1) or the loss (loss). The failure ring\n"
          "                    keeps them for the last steps before a failure, --capture full for\n"
          "                    every step; gradients and parameters are only digested, never kept.\n"
          "                    Narrow with --tensor-kind K (moduleOutput, loss), --call N, --output N\n"
          "  --stream NAME     another stream (default: the main training process)\n"
          "  -o FILE.npy       output file ('-' for stdout)\n"
          "\n"
          "bfloat16 has no NumPy dtype: it is written as '<u2' (its raw bits), with a note on\n"
          "stderr. Integers, floats and bools in a batch dump as 0-d arrays.\n",
          {{"--step", OptSpec::Type::Value},
           {"--batch", OptSpec::Type::OptionalValue},
           {"--rng", OptSpec::Type::Value},
           {"--tensor", OptSpec::Type::Value},
           {"--tensor-kind", OptSpec::Type::Value},
           {"--call", OptSpec::Type::Value},
           {"--output", OptSpec::Type::Value},
           {"--stream", OptSpec::Type::Value},
           {"-o", OptSpec::Type::Value}},
          run};
}

}  // namespace dlrr::tools

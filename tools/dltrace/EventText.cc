#include "tools/dltrace/EventText.h"

#include <capnp/dynamic.h>
#include <capnp/schema.h>

#include <cctype>

#include "tools/common/Text.h"
#include "tools/dltrace/TriageEventText.h"

namespace dlrr::tools {
namespace {

constexpr size_t kMaxChildren = 8;    // shown per list/tuple/dict in one line
constexpr size_t kMaxTextChars = 60;  // of a recorded string shown inline
constexpr size_t kMaxJsonDataBytes = 4096;

std::string normalizeKind(std::string_view s) {
  std::string out;
  for (char c : s)
    if (c != '-' && c != '_') out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string shortText(capnp::Text::Reader t) {
  std::string_view s(t.begin(), t.size());
  if (s.size() > kMaxTextChars) return "'" + printable(s.substr(0, kMaxTextChars)) + "...'";
  return "'" + printable(s) + "'";
}

std::string text(capnp::Text::Reader t) { return printable(std::string_view(t.begin(), t.size())); }

std::string shape(capnp::List<int64_t>::Reader s) {
  std::string out = "[";
  for (unsigned i = 0; i < s.size(); ++i) {
    if (i) out += ",";
    if (i == kMaxChildren * 2) {
      out += "...";
      break;
    }
    out += std::to_string(s[i]);
  }
  return out + "]";
}

std::string blob(schema::BlobRef::Reader b) {
  return humanBytes(b.getSize()) + " blob " + hex64(b.getHashHi()).substr(2, 8);
}

void appendValue(std::string& out, schema::Value::Reader v, size_t& budget);

template <typename List, typename Fn>
void appendChildren(std::string& out, List list, const char* open, const char* close, size_t& budget, Fn&& each) {
  out += open;
  unsigned n = list.size();
  for (unsigned i = 0; i < n; ++i) {
    if (i) out += ", ";
    if (i == kMaxChildren || budget == 0) {
      out += "... (+" + std::to_string(n - i) + " more)";
      break;
    }
    each(list[i]);
  }
  out += close;
}

void appendValue(std::string& out, schema::Value::Reader v, size_t& budget) {
  if (budget > 0) --budget;
  switch (v.which()) {
    case schema::Value::NONE:
      out += "None";
      return;
    case schema::Value::BOOL:
      out += v.getBool() ? "True" : "False";
      return;
    case schema::Value::INT:
      out += std::to_string(v.getInt());
      return;
    case schema::Value::FLOAT:
      out += formatDouble(v.getFloat());
      return;
    case schema::Value::TEXT:
      out += shortText(v.getText());
      return;
    case schema::Value::BYTES:
      out += "bytes[" + std::to_string(v.getBytes().size()) + "]";
      return;
    case schema::Value::TENSOR:
      out += "tensor " + describeTensor(v.getTensor());
      return;
    case schema::Value::LIST:
      appendChildren(out, v.getList(), "[", "]", budget, [&](schema::Value::Reader c) { appendValue(out, c, budget); });
      return;
    case schema::Value::TUPLE:
      appendChildren(out, v.getTuple(), "(", v.getTuple().size() == 1 ? ",)" : ")", budget,
                     [&](schema::Value::Reader c) { appendValue(out, c, budget); });
      return;
    case schema::Value::DICT:
      appendChildren(out, v.getDict(), "{", "}", budget, [&](schema::DictEntry::Reader c) {
        out += shortText(c.getKey()) + ": ";
        appendValue(out, c.getValue(), budget);
      });
      return;
    case schema::Value::OPAQUE:
      out += "<opaque " + text(v.getOpaque()) + ">";
      return;
  }
  out += "<unknown value kind " + std::to_string(static_cast<int>(v.which())) + ">";
}

bool hexField(std::string_view name) {
  return name == "hash" || name == "hashLo" || name == "hashHi" || name == "digest" || name == "faultAddress" ||
         name == "nativeStack";
}

void dynJson(JsonWriter& j, const capnp::DynamicValue::Reader& v, std::string_view field) {
  switch (v.getType()) {
    case capnp::DynamicValue::VOID:
      j.null();
      return;
    case capnp::DynamicValue::BOOL:
      j.value(v.as<bool>());
      return;
    case capnp::DynamicValue::INT:
      j.value(v.as<int64_t>());
      return;
    case capnp::DynamicValue::UINT:
      if (hexField(field))
        j.value(hex64(v.as<uint64_t>()));
      else
        j.value(v.as<uint64_t>());
      return;
    case capnp::DynamicValue::FLOAT:
      j.value(v.as<double>());
      return;
    case capnp::DynamicValue::TEXT: {
      auto t = v.as<capnp::Text>();
      j.value(std::string_view(t.begin(), t.size()));
      return;
    }
    case capnp::DynamicValue::DATA: {
      auto d = v.as<capnp::Data>();
      j.beginObject();
      j.field("size", static_cast<uint64_t>(d.size()));
      j.field("hex", hexPrefix(d.begin(), d.size(), kMaxJsonDataBytes));
      j.endObject();
      return;
    }
    case capnp::DynamicValue::LIST: {
      j.beginArray();
      for (auto e : v.as<capnp::DynamicList>()) dynJson(j, e, field);
      j.endArray();
      return;
    }
    case capnp::DynamicValue::ENUM: {
      auto e = v.as<capnp::DynamicEnum>();
      KJ_IF_MAYBE (en, e.getEnumerant()) {
        j.value(std::string_view(en->getProto().getName().cStr()));
      } else {
        j.value(e.getRaw());
      }
      return;
    }
    case capnp::DynamicValue::STRUCT: {
      auto s = v.as<capnp::DynamicStruct>();
      j.beginObject();
      auto schema = s.getSchema();  // named: g++ 14 warns (-Wdangling-reference) about a temporary
      for (auto f : schema.getNonUnionFields()) {
        auto name = f.getProto().getName();
        j.key(std::string_view(name.cStr(), name.size()));
        dynJson(j, s.get(f), std::string_view(name.cStr(), name.size()));
      }
      KJ_IF_MAYBE (f, s.which()) {
        auto name = f->getProto().getName();
        j.key(std::string_view(name.cStr(), name.size()));
        dynJson(j, s.get(*f), std::string_view(name.cStr(), name.size()));
      }
      j.endObject();
      return;
    }
    default:
      j.null();
      return;  // capabilities and AnyPointer do not occur in the schema
  }
}

}  // namespace

template <typename E>
std::string enumName(E v) {
  capnp::DynamicEnum d(capnp::Schema::from<E>(), static_cast<uint16_t>(v));
  KJ_IF_MAYBE (en, d.getEnumerant()) {
    return en->getProto().getName().cStr();
  }
  return std::to_string(static_cast<unsigned>(v));
}

template std::string enumName(schema::RngState::Kind);
template std::string enumName(schema::TensorDigest::Kind);
template std::string enumName(schema::Failure::Kind);
template std::string enumName(schema::Entropy::Source);
template std::string enumName(schema::CudaMemcpy::Direction);
template std::string enumName(schema::StreamHeader::Role);
template std::string enumName(schema::FileFact::Kind);

std::string eventKindName(schema::Event::Reader e) {
  auto d = capnp::toDynamic(e);
  KJ_IF_MAYBE (f, d.which()) {
    return f->getProto().getName().cStr();
  }
  return "unknown" + std::to_string(static_cast<unsigned>(e.which()));
}

std::vector<std::string> eventKindNames() {
  std::vector<std::string> out;
  auto eventSchema = capnp::Schema::from<schema::Event>();
  for (auto f : eventSchema.getUnionFields()) out.emplace_back(f.getProto().getName().cStr());
  return out;
}

std::optional<schema::Event::Which> parseEventKind(std::string_view name) {
  std::string want = normalizeKind(name);
  auto eventSchema = capnp::Schema::from<schema::Event>();
  for (auto f : eventSchema.getUnionFields()) {
    if (normalizeKind(f.getProto().getName().cStr()) == want)
      return static_cast<schema::Event::Which>(f.getProto().getDiscriminantValue());
  }
  return std::nullopt;
}

std::string describeTensor(schema::TensorRef::Reader t) {
  std::string out = text(t.getDtype()) + shape(t.getShape());
  if (t.getDevice().size()) out += " " + text(t.getDevice());
  out += " " + humanBytes(t.getData().getSize());
  if (t.getRequiresGrad()) out += " grad";
  return out;
}

std::string describeValue(schema::Value::Reader v) {
  std::string out;
  size_t budget = 64;  // values shown per line, whatever the nesting
  appendValue(out, v, budget);
  return out;
}

std::string describeEvent(schema::Event::Reader e, const InternTable& names) {
  using E = schema::Event;
  switch (e.which()) {
    case E::NOTE:
      return text(e.getNote());
    case E::PROCESS_START: {
      auto p = e.getProcessStart();
      std::string out = "pid " + std::to_string(p.getPid()) + " ppid " + std::to_string(p.getPpid()) + " argv";
      for (auto a : p.getArgv()) out += " " + shortText(a);
      return out;
    }
    case E::FORK: {
      auto f = e.getFork();
      using K = schema::Fork::Kind;
      std::string ident = f.getChildIdentity().size() ? " identity " + text(f.getChildIdentity()) : "";
      switch (f.getKind()) {
        case K::RECORDED:
          return "child pid " + std::to_string(f.getChildPid()) + ident + " records stream " + text(f.getChildStream());
        case K::LOADER_WORKER:
          return "child pid " + std::to_string(f.getChildPid()) + ident +
                 " (DataLoader worker: not recorded; its batches are, here)";
        case K::NATIVE:
          return "child pid " + std::to_string(f.getChildPid()) +
                 " (forked by native code, not through os.fork: not recorded unless it execs)";
        default:
          return "child pid " + std::to_string(f.getChildPid()) +
                 (f.getChildStream().size() ? " stream " + text(f.getChildStream()) : " (not recorded)");
      }
    }
    case E::PROCESS_EXIT: {
      auto x = e.getProcessExit();
      return "pid " + std::to_string(x.getPid()) +
             (x.getExited() ? " exited with code " + std::to_string(x.getCode())
                            : " killed by signal " + std::to_string(x.getCode())) +
             " (exit status " + std::to_string(x.getExitCode()) + ")";
    }
    case E::ENTROPY: {
      auto en = e.getEntropy();
      auto d = en.getData();
      char flags[16];
      std::snprintf(flags, sizeof flags, "0x%x", en.getFlags());
      return enumName(en.getSource()) + " " + std::to_string(d.size()) + " B (requested " +
             std::to_string(en.getRequested()) + ", flags " + flags + ") " + hexPrefix(d.begin(), d.size(), 16);
    }
    case E::RNG_STATE: {
      auto r = e.getRngState();
      return enumName(r.getKind()) + " device " + std::to_string(r.getDevice()) + ": " + blob(r.getState());
    }
    case E::BATCH: {
      auto b = e.getBatch();
      std::string out = "loader " + std::to_string(b.getLoader()) + " iteration " + std::to_string(b.getIteration()) +
                        " index " + std::to_string(b.getIndex()) + (b.getIsTraining() ? " training" : "");
      auto idx = b.getSampleIndices();
      if (idx.size()) {
        out += " samples [";
        for (unsigned i = 0; i < idx.size(); ++i) {
          if (i) out += ",";
          if (i == kMaxChildren) {
            out += "... +" + std::to_string(idx.size() - i);
            break;
          }
          out += std::to_string(idx[i]);
        }
        out += "]";
      }
      return out + " value " + describeValue(b.getValue());
    }
    case E::STEP_BEGIN: {
      auto s = e.getStepBegin();
      std::string out = "step " + std::to_string(s.getStep());
      if (s.getByOptimizer()) return out + " (counted by optimizer.step)";
      if (s.getByBackward()) return out + " (counted by backward(): no optimizer)";
      if (s.getByGradientCall()) return out + " (counted by torch.func gradient calls: no optimizer, no backward())";
      return out + " epoch " + std::to_string(s.getEpoch()) + " loader " + std::to_string(s.getLoader()) + " batch " +
             std::to_string(s.getBatchIndex());
    }
    case E::STEP_END: {
      auto s = e.getStepEnd();
      std::string loss = s.getUntrained() ? "- (untrained: no backward())" : formatDouble(s.getLoss());
      return "step " + std::to_string(s.getStep()) + " loss " + loss + " non-finite " +
             std::to_string(s.getNonFinite()) + " digests " + std::to_string(s.getDigests());
    }
    case E::LOSS: {
      auto l = e.getLoss();
      return formatDouble(l.getValue()) + " digest " + hex64(l.getDigest().getHash());
    }
    case E::DIGEST: {
      auto d = e.getDigest();
      // A root module's path is empty: named <root>, as dlreplay names it, not ''.
      std::string out = enumName(d.getKind()) + " " + (d.getPath().size() ? "'" + text(d.getPath()) + "'" : "<root>");
      if (d.getCallIndex()) out += " call " + std::to_string(d.getCallIndex());
      if (d.getOutput()) out += " output " + std::to_string(d.getOutput());
      return out + " " + text(d.getDtype()) + shape(d.getShape()) + " hash " + hex64(d.getHash()) + " nan " +
             std::to_string(d.getNanCount()) + " inf " + std::to_string(d.getInfCount()) + " min " +
             formatDouble(d.getMin()) + " max " + formatDouble(d.getMax());
    }
    case E::TENSOR: {
      auto t = e.getTensor();
      std::string out = enumName(t.getKind()) + " " + (t.getPath().size() ? "'" + text(t.getPath()) + "'" : "<root>");
      if (t.getCallIndex()) out += " call " + std::to_string(t.getCallIndex());
      if (t.getOutput()) out += " output " + std::to_string(t.getOutput());
      return out + " " + describeTensor(t.getTensor());
    }
    case E::CUDA_LAUNCH: {
      auto c = e.getCudaLaunch();
      auto it = names.find(c.getNameId());
      std::string name = it != names.end() ? printable(it->second) : "kernel#" + std::to_string(c.getNameId());
      return "#" + std::to_string(c.getSeq()) + " " + name + " grid (" + std::to_string(c.getGridX()) + "," +
             std::to_string(c.getGridY()) + "," + std::to_string(c.getGridZ()) + ") block (" +
             std::to_string(c.getBlockX()) + "," + std::to_string(c.getBlockY()) + "," + std::to_string(c.getBlockZ()) +
             ") smem " + std::to_string(c.getSharedMem()) + " device " + std::to_string(c.getDevice()) + " stream " +
             hex64(c.getStream());
    }
    case E::CUDA_MEMCPY: {
      auto c = e.getCudaMemcpy();
      return "#" + std::to_string(c.getSeq()) + " " + enumName(c.getDirection()) + " " + humanBytes(c.getBytes()) +
             " digest " + hex64(c.getDigest()) + " device " + std::to_string(c.getDevice());
    }
    case E::FAILURE: {
      auto f = e.getFailure();
      std::string out = enumName(f.getKind()) + " at step " + std::to_string(f.getStep());
      if (f.getWhere().size()) out += " in '" + text(f.getWhere()) + "'";
      if (f.getExceptionType().size()) out += " " + text(f.getExceptionType());
      if (f.getSignal()) out += " signal " + std::to_string(f.getSignal());
      if (f.getMessage().size()) out += ": " + text(f.getMessage());
      return out;
    }
    case E::RUNTIME_INFO: {
      std::string out;
      for (auto kv : e.getRuntimeInfo().getItems()) {
        if (!out.empty()) out += " ";
        out += text(kv.getKey()) + "=" + shortText(kv.getValue());
      }
      return out;
    }
    case E::INTERNED_STRING: {
      auto s = e.getInternedString();
      return "#" + std::to_string(s.getId()) + " = " + shortText(s.getText());
    }
    case E::LOADER_END: {
      auto l = e.getLoaderEnd();
      return "loader " + std::to_string(l.getLoader()) + " iteration " + std::to_string(l.getIteration()) + " after " +
             std::to_string(l.getBatches()) + " batches";
    }
    case E::RECORDER_STATUS: {
      auto r = e.getRecorderStatus();
      return std::string(r.getOk() ? "ok" : "NOT OK") + (r.getMessage().size() ? ": " + text(r.getMessage()) : "");
    }
    case E::MISSING_PATHS:
    case E::LIBRARY_LOAD_ERROR:
    case E::RESOURCE_PEAK:
    case E::PACKAGES:
      return describeTriageEvent(e);  // TriageEventText.cc
    case E::COLLECTIVE: {
      auto c = e.getCollective();
      std::string out = "#" + std::to_string(c.getSeq()) + " " + text(c.getOp());
      if (c.getBucket() >= 0) out += " bucket " + std::to_string(c.getBucket());
      if (c.getReduceOp().size()) out += " " + text(c.getReduceOp());
      if (c.getPeer() >= 0) out += " peer " + std::to_string(c.getPeer());
      out += " group " + text(c.getGroup());
      auto side = [&](const char* label, capnp::List<schema::CollectiveTensor>::Reader ts) {
        if (ts.size() == 0) return;
        out += std::string("; ") + label;
        unsigned shown = 0;
        for (auto t : ts) {
          if (shown++ == 4) {
            out += " ... (" + std::to_string(ts.size()) + ")";
            break;
          }
          out += " " + text(t.getDtype()) + shape(t.getShape()) + " " + hex64(t.getHash());
          if (t.getNanCount() || t.getInfCount())
            out += " NaN " + std::to_string(t.getNanCount()) + " Inf " + std::to_string(t.getInfCount());
          if (t.hasData() && t.getData().getSize()) out += " (kept)";
        }
      };
      side("sent", c.getInputs());
      side("received", c.getResults());
      if (c.getAsyncOp()) out += "; async";
      if (c.getStatus().size()) out += "; " + text(c.getStatus());
      return out;
    }
    case E::FILE: {
      auto f = e.getFile();
      std::string out = text(f.getPath()) + " " + enumName(f.getKind()) + " " + humanBytes(f.getSize());
      if (f.getHasEntries()) out += ", " + std::to_string(f.getEntries().size()) + " entries";
      if (f.getData().getSize())
        out += ", bytes " + std::to_string(f.getOffset()) + "+" + humanBytes(f.getData().getSize());
      return out;
    }
    case E::SNAPSHOT: {
      auto sn = e.getSnapshot();
      return "step " + std::to_string(sn.getStep()) + " " + enumName(sn.getReason()) + ", tensors " +
             humanBytes(sn.getTensorBytes()) + " (" + humanBytes(sn.getNewBytes()) + " new)";
    }
    case E::COLLECTIVE_WAIT: {
      auto w = e.getCollectiveWait();
      std::string out = enumName(w.getReason()) + " after " + std::to_string(w.getWaitedMs()) + " ms: ";
      if (w.getWaiting())
        out += "in #" + std::to_string(w.getSeq()) + " " + text(w.getOp()) + " group " + text(w.getGroup()) +
               " (step " + std::to_string(w.getIssuedStep()) + ")";
      else
        out += "no collective in flight";
      if (w.getCompletedSeq() >= 0)
        out += "; last completed #" + std::to_string(w.getCompletedSeq()) + " " + text(w.getCompletedOp());
      return out;
    }
  }
  return "(written by a newer dlrr; use --json to see its fields)";
}

std::vector<std::string> eventDetailLines(schema::Event::Reader e) {
  std::vector<std::string> out;
  if (e.isCollectiveWait()) {
    std::string stacks = e.getCollectiveWait().getStacks().cStr();
    size_t start = 0;
    while (start < stacks.size()) {
      size_t end = stacks.find('\n', start);
      if (end == std::string::npos) end = stacks.size();
      out.push_back("    " + printable(stacks.substr(start, end - start)));
      start = end + 1;
    }
    return out;
  }
  if (!e.isFailure()) return out;
  auto f = e.getFailure();
  for (auto fr : f.getTraceback()) {
    std::string l = "    File \"" + text(fr.getFile()) + "\", line " + std::to_string(fr.getLine()) + ", in " +
                    text(fr.getFunction());
    out.push_back(l);
    if (fr.getCode().size()) out.push_back("      " + text(fr.getCode()));
  }
  auto stack = f.getNativeStack();
  auto syms = f.getNativeSymbols();
  for (unsigned i = 0; i < stack.size(); ++i) {
    std::string l = "    #" + std::to_string(i) + " " + hex64(stack[i]);
    if (i < syms.size() && syms[i].size()) l += " " + text(syms[i]);
    out.push_back(l);
  }
  if (f.getFaultAddress()) out.push_back("    fault address " + hex64(f.getFaultAddress()));
  auto py = f.getPythonStack();
  std::string_view rest(py.begin(), py.size());
  while (!rest.empty()) {
    size_t nl = rest.find('\n');
    std::string_view lineText = rest.substr(0, nl);
    if (!lineText.empty()) out.push_back("    | " + printable(lineText));
    if (nl == std::string_view::npos) break;
    rest.remove_prefix(nl + 1);
  }
  return out;
}

void eventJson(JsonWriter& j, schema::Event::Reader e) {
  capnp::DynamicValue::Reader v = capnp::toDynamic(e);
  dynJson(j, v, "");
}

}  // namespace dlrr::tools

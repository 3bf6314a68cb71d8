#include "support/SampleTrace.h"

#include <capnp/message.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "format/Redact.h"
#include "format/TraceDir.h"
#include "schema/dlrr.capnp.h"

namespace dlrr::testing {
namespace fs = std::filesystem;

namespace {

void setRef(schema::BlobRef::Builder b, const BlobId& id) {
  b.setHashLo(id.hash.lo);
  b.setHashHi(id.hash.hi);
  b.setSize(id.size);
}

}  // namespace

std::string makeTempDir(const std::string& tag) {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/dlrr-" + tag + "-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
  return buf.data();
}

void removeTree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
}

std::vector<uint8_t> readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

void writeFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

SampleResult writeSampleTrace(const std::string& dir, const SampleOptions& opts) {
  SampleResult res;
  res.dir = dir;
  UniqueFd dirFd = createTraceDir(dir);
  auto patterns = defaultRedactPatterns();

  // Launcher stream: the command and (redacted) environment.
  std::string launcherName;
  {
    capnp::MallocMessageBuilder hm;
    auto h = hm.initRoot<schema::StreamHeader>();
    h.setStreamName(kLauncherStream);
    h.setRole(schema::StreamHeader::Role::LAUNCHER);
    h.setPid(100);
    auto ti = h.initTrace();
    ti.setHost("testhost");
    ti.setUser("tester");
    auto cmd = ti.initCommand(2);
    cmd.set(0, "python3");
    cmd.set(1, "train.py");
    auto env = ti.initEnv(static_cast<unsigned>(opts.env.size()));
    for (size_t i = 0; i < opts.env.size(); ++i) {
      auto eq = opts.env[i].find('=');
      std::string k = opts.env[i].substr(0, eq), v = opts.env[i].substr(eq + 1);
      env[i].setKey(k);
      env[i].setValue(isSecretName(k, patterns) ? kRedacted : v);
    }
    StreamWriter lw(createStreamFile(dirFd.get(), kLauncherStream, launcherName), hm, opts.writer);
    capnp::MallocMessageBuilder em;
    auto e = em.initRoot<schema::Event>();
    e.setStep(-1);
    auto pe = e.initProcessExit();
    pe.setPid(101);
    pe.setExited(true);
    pe.setCode(0);
    pe.setExitCode(0);
    lw.append(em);
    lw.commit();
    lw.close();
  }

  capnp::MallocMessageBuilder hm;
  auto h = hm.initRoot<schema::StreamHeader>();
  h.setStreamName("p101");
  h.setRole(schema::StreamHeader::Role::PROCESS);
  h.setPid(101);
  h.setPpid(100);
  std::string name;
  StreamWriter w(createStreamFile(dirFd.get(), "p101", name), hm, opts.writer);
  res.processStream = name + kStreamExt;
  std::mt19937 rng(42);
  std::normal_distribution<float> normal;
  std::vector<float> batch(opts.batchFloats);
  auto streamSize = [&] {
    struct stat st {};
    ::stat((dir + "/" + res.processStream).c_str(), &st);
    return static_cast<uint64_t>(st.st_size);
  };
  {
    capnp::MallocMessageBuilder em;
    auto e = em.initRoot<schema::Event>();
    e.setStep(-1);
    auto en = e.initEntropy();
    en.setSource(schema::Entropy::Source::GETRANDOM);
    uint8_t bytes[24];
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    en.setData(kj::arrayPtr(bytes, sizeof bytes));
    en.setRequested(sizeof bytes);
    w.append(em);
  }
  for (int s = 0; s < opts.steps; ++s) {
    for (auto& x : batch) x = normal(rng);
    if (s == opts.nanAtStep) batch[3] = std::nanf("");
    BlobId bid = w.putBlob(batch.data(), batch.size() * sizeof(float), 4);
    std::vector<uint8_t> rngState(64, static_cast<uint8_t>(s));
    BlobId rid = w.putBlob(rngState.data(), rngState.size());
    {
      capnp::MallocMessageBuilder em;
      auto e = em.initRoot<schema::Event>();
      e.setStep(s);
      auto sb = e.initStepBegin();
      sb.setStep(s);
      sb.setBatchIndex(static_cast<uint64_t>(s));
      w.append(em, s);
    }
    {
      capnp::MallocMessageBuilder em;
      auto e = em.initRoot<schema::Event>();
      e.setStep(s);
      auto r = e.initRngState();
      r.setKind(schema::RngState::Kind::TORCH_CPU);
      setRef(r.initState(), rid);
      w.append(em);
    }
    {
      capnp::MallocMessageBuilder em;
      auto e = em.initRoot<schema::Event>();
      e.setStep(s);
      auto b = e.initBatch();
      b.setIndex(static_cast<uint64_t>(s));
      b.setIsTraining(true);
      auto idx = b.initSampleIndices(2);
      idx.set(0, s * 2);
      idx.set(1, s * 2 + 1);
      auto fillTensor = [&](schema::TensorRef::Builder t) {
        t.setDtype("float32");
        auto shape = t.initShape(2);
        shape.set(0, 2);
        shape.set(1, static_cast<int64_t>(opts.batchFloats / 2));
        t.setDevice("cpu");
        setRef(t.initData(), bid);
      };
      if (!opts.rich) {
        auto tup = b.initValue().initTuple(2);
        fillTensor(tup[0].initTensor());
        tup[1].setInt(s % 10);
      } else {
        // {"inputs": [x, x_bf16], "label": int64[2], "id": s, "meta": {"w": 0.5, "ok": True, "tag": "train"}}
        std::vector<int64_t> labels = {s, s + 1};
        BlobId lid = w.putBlob(labels.data(), labels.size() * sizeof(int64_t), 8);
        std::vector<uint16_t> bf16(batch.size());
        for (size_t i = 0; i < batch.size(); ++i) {
          uint32_t bits;
          std::memcpy(&bits, &batch[i], 4);
          bf16[i] = static_cast<uint16_t>(bits >> 16);
        }
        BlobId hid = w.putBlob(bf16.data(), bf16.size() * 2, 2);
        auto d = b.initValue().initDict(4);
        d[0].setKey("inputs");
        auto inputs = d[0].initValue().initList(2);
        fillTensor(inputs[0].initTensor());
        auto h = inputs[1].initTensor();
        h.setDtype("bfloat16");
        h.initShape(1).set(0, static_cast<int64_t>(bf16.size()));
        h.setDevice("cpu");
        setRef(h.initData(), hid);
        d[1].setKey("label");
        auto lt = d[1].initValue().initTensor();
        lt.setDtype("int64");
        lt.initShape(1).set(0, 2);
        setRef(lt.initData(), lid);
        d[2].setKey("id");
        d[2].initValue().setInt(s);
        d[3].setKey("meta");
        auto meta = d[3].initValue().initDict(3);
        meta[0].setKey("w");
        meta[0].initValue().setFloat(0.5);
        meta[1].setKey("ok");
        meta[1].initValue().setBool(true);
        meta[2].setKey("tag");
        meta[2].initValue().setText("train");
      }
      w.append(em);
    }
    if (opts.rich && s == 0) {
      auto emit = [&](auto&& fill) {
        capnp::MallocMessageBuilder em;
        auto e = em.initRoot<schema::Event>();
        e.setStep(s);
        fill(e);
        w.append(em);
      };
      emit([](schema::Event::Builder e) {
        auto items = e.initRuntimeInfo().initItems(2);
        items[0].setKey("torch");
        items[0].setValue("1.13.1");
        items[1].setKey("threads");
        items[1].setValue("2");
      });
      emit([](schema::Event::Builder e) { e.setNote("a note\nwith a newline and \x1b[31mescape"); });
      emit([](schema::Event::Builder e) {
        auto r = e.initRecorderStatus();
        r.setOk(false);
        r.setMessage("CUDA capture off: cuptiSubscribe returned 999");
      });
      emit([](schema::Event::Builder e) {
        auto i = e.initInternedString();
        i.setId(7);
        i.setText("void gemm_kernel<float>(...)");
      });
      emit([](schema::Event::Builder e) {
        auto c = e.initCudaLaunch();
        c.setNameId(7);
        c.setGridX(128);
        c.setGridY(1);
        c.setGridZ(1);
        c.setBlockX(256);
        c.setBlockY(1);
        c.setBlockZ(1);
      });
    }
    bool nan = s == opts.nanAtStep;
    {
      capnp::MallocMessageBuilder em;
      auto e = em.initRoot<schema::Event>();
      e.setStep(s);
      auto d = e.initDigest();
      d.setKind(schema::TensorDigest::Kind::MODULE_OUTPUT);
      d.setPath("fc1");
      d.setDtype("float32");
      d.initShape(1).set(0, 8);
      d.setHash(0x1234 + static_cast<uint64_t>(s));
      d.setNanCount(nan ? 1 : 0);
      d.setMin(-1);
      d.setMax(1);
      w.append(em);
    }
    double loss = nan ? std::nan("") : 2.0 / (s + 1);
    if (nan && opts.rich) {
      // The full tensors kept for the failure: fc1's output (float32) and a bf16 parameter.
      std::vector<float> out(8, 1.5f);
      out[3] = std::nanf("");
      BlobId oid = w.putBlob(out.data(), out.size() * sizeof(float), 4);
      std::vector<uint16_t> wbits(6, 0x3f80);  // bfloat16 1.0
      BlobId wid = w.putBlob(wbits.data(), wbits.size() * 2, 2);
      for (int k = 0; k < 2; ++k) {
        capnp::MallocMessageBuilder em;
        auto e = em.initRoot<schema::Event>();
        e.setStep(s);
        auto ft = e.initTensor();
        ft.setKind(k == 0 ? schema::TensorDigest::Kind::MODULE_OUTPUT : schema::TensorDigest::Kind::PARAMETER);
        ft.setPath(k == 0 ? "fc1" : "fc1.weight");
        auto t = ft.initTensor();
        t.setDtype(k == 0 ? "float32" : "bfloat16");
        auto shape = t.initShape(2);
        shape.set(0, 2);
        shape.set(1, k == 0 ? 4 : 3);
        setRef(t.initData(), k == 0 ? oid : wid);
        w.append(em);
      }
    }
    if (nan) {
      capnp::MallocMessageBuilder em;
      auto e = em.initRoot<schema::Event>();
      e.setStep(s);
      auto f = e.initFailure();
      f.setKind(schema::Failure::Kind::NONFINITE);
      f.setStep(s);
      f.setWhere("fc1");
      f.setMessage("1 NaN in output of fc1");
      if (opts.rich) {
        auto tb = f.initTraceback(1);
        tb[0].setFile("train.py");
        tb[0].setLine(42);
        tb[0].setFunction("forward");
        tb[0].setCode("x = self.fc1(x)");
      }
      w.append(em);
    }
    if (s == opts.raiseAtStep) {
      capnp::MallocMessageBuilder em;
      auto e = em.initRoot<schema::Event>();
      e.setStep(s);
      auto f = e.initFailure();
      f.setKind(schema::Failure::Kind::EXCEPTION);
      f.setStep(s);
      f.setWhere("clip_grad.py:45");
      f.setExceptionType("RuntimeError");
      f.setMessage("The total norm of order 2.0 for gradients from `parameters` is non-finite");
      w.append(em);
    }
    {
      capnp::MallocMessageBuilder em;
      auto e = em.initRoot<schema::Event>();
      e.setStep(s);
      auto se = e.initStepEnd();
      se.setStep(s);
      se.setLoss(loss);
      se.setNonFinite(nan ? 1 : 0);
      se.setDigests(1);
      w.append(em);
    }
    w.commit();
    res.stepEndOffsets.push_back(streamSize());
  }
  if (opts.closeCleanly) {
    capnp::MallocMessageBuilder em;
    auto e = em.initRoot<schema::Event>();
    e.setStep(opts.steps - 1);
    auto pe = e.initProcessExit();
    pe.setPid(101);
    pe.setExited(true);
    w.append(em);
  }
  w.commit();
  w.close();
  if (!opts.closeCleanly) {
    // What a writer killed after its last commit leaves: no footer, no trailer.
    if (::truncate((dir + "/" + res.processStream).c_str(), static_cast<off_t>(res.stepEndOffsets.back())) != 0)
      throw std::runtime_error("truncate failed");
  }
  return res;
}

}  // namespace dlrr::testing

// dlrr_format_bench: what the trace writer costs and saves on realistic float32 tensors.
// For each kind of data, byte-shuffle off/on and zstd level 1/3, it writes the tensors as
// blobs through a real StreamWriter into a temporary trace and prints the input throughput
// (MB/s of tensor bytes accepted, end to end: hash, copy, shuffle, compress, write, close)
// and the compression ratio; then the codec alone on one core; then the effect of content
// dedup when epochs repeat the same batches. docs/performance.md keeps the figures.
//   dlrr_format_bench [MiB per data set, default 32]
#include <capnp/message.h>
#include <sys/stat.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "format/Codec.h"
#include "format/StreamWriter.h"
#include "format/TraceDir.h"
#include "schema/dlrr.capnp.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kTensorBytes = 4u << 20;  // one tensor (a large layer's weights or activations)
constexpr int kRuns = 3;

struct DataSet {
  const char* name;
  std::vector<std::vector<float>> tensors;
};

std::vector<float> makeTensor(const char* kind, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> uni(0.f, 1.f);
  std::vector<float> t(kTensorBytes / 4);
  std::string k = kind;
  for (auto& x : t) {
    float n = normal(rng);
    if (k == "weights") {
      x = n * 0.02f;
    } else if (k == "gradients") {
      // Small and heavy-tailed, with a third exactly zero (dead units, unused embeddings).
      x = uni(rng) < 0.33f ? 0.f : n * 1e-4f * std::exp(normal(rng));
    } else if (k == "relu") {
      x = n > 0 ? n : 0.f;
    } else {  // bf16-origin: float32 that came from bfloat16 (low 16 bits zero)
      float v = n * 0.02f;
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      bits &= 0xFFFF0000u;
      std::memcpy(&x, &bits, 4);
    }
  }
  return t;
}

std::string tempRoot() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/dlrr-bench-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data())) {
    std::perror("mkdtemp");
    std::exit(1);
  }
  return buf.data();
}

struct WriteResult {
  double seconds = 0;
  uint64_t rawBytes = 0;     // tensor bytes handed to putBlob
  uint64_t storedBytes = 0;  // bytes of the stream file
  uint64_t deduplicated = 0;
  uint64_t blocked = 0;
};

// Writes `batches` (each a list of tensors) through one StreamWriter, one commit per batch.
WriteResult writeTrace(const std::vector<const std::vector<float>*>& tensors, const dlrr::WriterOptions& opts,
                       size_t perCommit) {
  std::string root = tempRoot();
  WriteResult r;
  {
    dlrr::UniqueFd dir = dlrr::createTraceDir(root + "/t");
    capnp::MallocMessageBuilder hm;
    auto h = hm.initRoot<dlrr::schema::StreamHeader>();
    h.setStreamName("bench");
    h.setRole(dlrr::schema::StreamHeader::Role::PROCESS);
    std::string name;
    dlrr::UniqueFd fd = dlrr::createStreamFile(dir.get(), "bench", name);
    auto t0 = Clock::now();
    dlrr::StreamWriter w(std::move(fd), hm, opts);
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto& t = *tensors[i];
      w.putBlob(t.data(), t.size() * 4, 4);
      r.rawBytes += t.size() * 4;
      if ((i + 1) % perCommit == 0) w.commit();
    }
    w.close();
    r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    auto st = w.stats();
    r.deduplicated = st.blobsDeduplicated;
    r.blocked = st.blockedCount;
    struct stat sb {};
    ::stat((root + "/t/" + name + dlrr::kStreamExt).c_str(), &sb);
    r.storedBytes = static_cast<uint64_t>(sb.st_size);
  }
  std::error_code ec;
  std::filesystem::remove_all(root, ec);
  return r;
}

double codecMBps(const std::vector<std::vector<float>>& tensors, int level, uint8_t shuffle, double* ratio) {
  dlrr::PayloadCodec codec(level);
  std::vector<uint8_t> out;
  uint64_t in = 0, stored = 0;
  auto t0 = Clock::now();
  for (const auto& t : tensors) {
    out.clear();
    codec.encode(reinterpret_cast<const uint8_t*>(t.data()), t.size() * 4,
                 dlrr::Codec{dlrr::Compression::Zstd, shuffle}, out);
    in += t.size() * 4;
    stored += out.size();
  }
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  *ratio = static_cast<double>(in) / static_cast<double>(stored);
  return static_cast<double>(in) / 1e6 / s;
}

}  // namespace

int main(int argc, char** argv) {
  size_t mib = 32;
  if (argc > 1 && (std::from_chars(argv[1], argv[1] + std::strlen(argv[1]), mib).ec != std::errc{} || mib == 0)) {
    std::fprintf(stderr, "usage: format_bench [MIB]  (MiB of tensors to encode, default 32)\n");
    return 2;
  }
  size_t count = std::max<size_t>(1, (mib << 20) / kTensorBytes);
  std::mt19937 rng(1234);
  std::vector<DataSet> sets;
  for (const char* k : {"weights", "gradients", "relu", "bf16-origin"}) {
    DataSet d{k, {}};
    for (size_t i = 0; i < count; ++i) d.tensors.push_back(makeTensor(k, rng));
    sets.push_back(std::move(d));
  }
  std::printf("trace writer, %zu x %zu MiB float32 tensors per data set, one commit per tensor\n", count,
              kTensorBytes >> 20);
  std::printf("MB/s in: tensor bytes accepted per second end to end (putBlob .. close), writer thread + caller\n");
  std::printf("codec MB/s: shuffle + zstd alone on one core; best of %d runs each\n\n", kRuns);
  std::printf("%-12s %-8s %-5s %10s %8s %12s %8s\n", "data", "shuffle", "zstd", "MB/s in", "ratio", "codec MB/s",
              "c.ratio");
  for (const auto& d : sets) {
    std::vector<const std::vector<float>*> ts;
    for (const auto& t : d.tensors) ts.push_back(&t);
    for (bool shuffle : {false, true}) {
      for (int level : {1, 3}) {
        dlrr::WriterOptions o;
        o.zstdLevel = level;
        o.shuffleFloats = shuffle;
        // Best of kRuns: the machine is shared; the fastest run is the least disturbed one.
        WriteResult r;
        double cratio = 0, cmbps = 0;
        for (int run = 0; run < kRuns; ++run) {
          WriteResult x = writeTrace(ts, o, 1);
          if (run == 0 || x.seconds < r.seconds) r = x;
          cmbps = std::max(cmbps, codecMBps(d.tensors, level, shuffle ? 4 : 0, &cratio));
        }
        std::printf("%-12s %-8s %-5d %10.0f %8.2f %12.0f %8.2f\n", d.name, shuffle ? "4-byte" : "off", level,
                    static_cast<double>(r.rawBytes) / 1e6 / r.seconds,
                    static_cast<double>(r.rawBytes) / static_cast<double>(r.storedBytes), cmbps, cratio);
      }
    }
  }

  // Dedup: an epoch of distinct batches, replayed for 3 epochs (no shuffling of samples
  // within a batch: the same batch tensors come back, as with a fixed sampler or a small set).
  std::printf("\ndedup: %zu distinct 4 MiB batches x 3 epochs (weights-like data, shuffle on, zstd 1)\n", count);
  std::vector<const std::vector<float>*> epochs;
  for (int e = 0; e < 3; ++e)
    for (const auto& t : sets[0].tensors) epochs.push_back(&t);
  dlrr::WriterOptions o;
  auto best = [&](const std::vector<const std::vector<float>*>& ts) {
    WriteResult r;
    for (int run = 0; run < kRuns; ++run) {
      WriteResult x = writeTrace(ts, o, 1);
      if (run == 0 || x.seconds < r.seconds) r = x;
    }
    return r;
  };
  WriteResult one =
      best(std::vector<const std::vector<float>*>(epochs.begin(), epochs.begin() + static_cast<long>(count)));
  WriteResult three = best(epochs);
  std::printf("%-10s %12s %12s %10s %8s %12s\n", "epochs", "raw MB", "stored MB", "MB/s in", "ratio", "dedup hits");
  for (auto [n, r] : {std::pair{1, one}, std::pair{3, three}})
    std::printf("%-10d %12.1f %12.1f %10.0f %8.2f %12llu\n", n, static_cast<double>(r.rawBytes) / 1e6,
                static_cast<double>(r.storedBytes) / 1e6, static_cast<double>(r.rawBytes) / 1e6 / r.seconds,
                static_cast<double>(r.rawBytes) / static_cast<double>(r.storedBytes),
                static_cast<unsigned long long>(r.deduplicated));
  return 0;
}

// dlrr_record_bench: what the native side of recording costs per step, without Python/torch.
//   dlrr_record_bench [steps, default 400] [digest|session|modules|lm-outputs[-borrowed]|all, default all]
//                     [ring steps (session, lm-outputs: default 2) | modules (modules, default 64)]
// 1. digest: computeDigest (XXH3-64 + NaN/Inf count + finite min/max) on float32 tensors of
//    the sizes a small CNN produces, in MB/s for each kernel width this CPU runs, best of 5.
// 2. session: a real RecordSession writing a temporary trace, fed what the Python hook feeds
//    it for one step of examples/train.py's SmallCNN with batch 32 (capture default): step
//    begin, 3 RNG states, one batch (32x3x16x16 float32 + 32 int64), 9 module outputs kept
//    for the failure ring, 8 gradients, 8 parameters, the loss, step end (the commit).
//    Prints the caller's time per step, split into the parts: median and p90 over steps of
//    the calling thread's CPU time (robust on a shared machine) and of wall time (includes
//    waiting: the commit waits for the writer thread, whose work otherwise overlaps the step).
// 3. modules: the library's part of a module call (bench/module_call_ab.py measures it whole):
//    a step of 64 tiny outputs (4 floats), each digested and kept in the failure ring, as
//    dlrr_digest does for a module output; CPU ns per call (min, median, p90 over steps).
// 4. lm-outputs: the module outputs of one step of bench/shape_job.py's lm shape (20 module
//    calls, 4.75 MB of float32 a step: 128 KB and 512 KB activations), each digested and kept
//    in the failure ring as dlrr_digest does; CPU us per step (min, median, p90 over steps).
//    lm-outputs-borrowed: the same kept as dlrr_digest_borrowed keeps them (no copy: the ring
//    holds their address and hash, FailureRing::keepBorrowed).
// docs/performance.md keeps the figures.
#include <sys/stat.h>
#include <time.h>

#include <algorithm>
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

#include "format/Hash.h"
#include "recorder/RecordSession.h"
#include "session/TensorDigest.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Mark {
  double cpu;   // this thread's CPU time, s
  double wall;  // monotonic, s
};

Mark mark() {
  timespec c{}, w{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c);
  clock_gettime(CLOCK_MONOTONIC, &w);
  return {static_cast<double>(c.tv_sec) + static_cast<double>(c.tv_nsec) * 1e-9,
          static_cast<double>(w.tv_sec) + static_cast<double>(w.tv_nsec) * 1e-9};
}

std::vector<float> makeData(const char* kind, size_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) {
    float g = normal(rng);
    x = std::strcmp(kind, "relu") == 0 ? std::max(g, 0.f) : g * 0.02f;
  }
  return v;
}

void benchDigest() {
  std::mt19937 rng(1);
  const std::vector<unsigned> widths = dlrr::digestVectorWidths();
  std::printf(
      "computeDigest, float32, best of 5: MB/s by kernel width (bytes per vector; the first is the one used)\n");
  std::printf("%-8s %10s", "data", "elements");
  for (unsigned w : widths) std::printf(" %9s%-3u", "width ", w);
  std::printf(" %12s %14s\n", "XXH3 MB/s", "hash ns/elem");
  for (const char* kind : {"weights", "relu"}) {
    for (size_t n : {size_t{1} << 10, size_t{1} << 14, size_t{1} << 16, size_t{1} << 20, size_t{1} << 22}) {
      auto v = makeData(kind, n, rng);
      size_t reps = std::max<size_t>(1, (size_t{64} << 20) / (n * 4));
      std::vector<double> best(widths.size(), 1e30);
      double bestHash = 1e30;
      volatile uint64_t sink = 0;
      for (int run = 0; run < 5; ++run) {
        for (size_t k = 0; k < widths.size(); ++k) {
          auto t0 = Clock::now();
          for (size_t r = 0; r < reps; ++r)
            sink = sink + dlrr::computeDigestWithWidth(widths[k], "float32", v.data(), n * 4).hash;
          best[k] = std::min(best[k], seconds(Clock::now() - t0) / static_cast<double>(reps));
        }
        auto t1 = Clock::now();
        for (size_t r = 0; r < reps; ++r) sink = sink + dlrr::hash64(v.data(), n * 4);
        bestHash = std::min(bestHash, seconds(Clock::now() - t1) / static_cast<double>(reps));
      }
      std::printf("%-8s %10zu", kind, n);
      for (double b : best) std::printf(" %12.0f", static_cast<double>(n) * 4 / b / 1e6);
      std::printf(" %12.0f %14.3f\n", static_cast<double>(n) * 4 / bestHash / 1e6,
                  bestHash / static_cast<double>(n) * 1e9);
    }
  }
}

struct Tensor {
  const char* path;
  std::vector<int64_t> shape;
  std::vector<float> data;
};

Tensor tensor(const char* path, std::vector<int64_t> shape, const char* kind, std::mt19937& rng) {
  size_t n = 1;
  for (auto d : shape) n *= static_cast<size_t>(d);
  return {path, std::move(shape), makeData(kind, n, rng)};
}

void benchSession(int steps, int ringSteps) {
  std::mt19937 rng(2);
  std::vector<Tensor> outputs, params;
  outputs.push_back(tensor("conv1", {32, 8, 16, 16}, "weights", rng));
  outputs.push_back(tensor("pool", {32, 8, 8, 8}, "relu", rng));
  outputs.push_back(tensor("conv2", {32, 16, 8, 8}, "weights", rng));
  outputs.push_back(tensor("pool", {32, 16, 4, 4}, "relu", rng));  // (second call of a module)
  outputs.push_back(tensor("fc1", {32, 64}, "weights", rng));
  outputs.push_back(tensor("dropout", {32, 64}, "relu", rng));
  outputs.push_back(tensor("fc2", {32, 10}, "weights", rng));
  outputs.push_back(tensor("CrossEntropyLoss", {}, "weights", rng));
  outputs.push_back(tensor("", {32, 10}, "weights", rng));
  params.push_back(tensor("conv1.weight", {8, 3, 3, 3}, "weights", rng));
  params.push_back(tensor("conv1.bias", {8}, "weights", rng));
  params.push_back(tensor("conv2.weight", {16, 8, 3, 3}, "weights", rng));
  params.push_back(tensor("conv2.bias", {16}, "weights", rng));
  params.push_back(tensor("fc1.weight", {64, 1024}, "weights", rng));
  params.push_back(tensor("fc1.bias", {64}, "weights", rng));
  params.push_back(tensor("fc2.weight", {10, 64}, "weights", rng));
  params.push_back(tensor("fc2.bias", {10}, "weights", rng));
  std::vector<uint8_t> torchRng(5056), npRng(2512), pyRng(2516);
  std::vector<int64_t> labels(32), indices(32);
  int64_t batchShape[4] = {32, 3, 16, 16}, labelShape[1] = {32};

  std::string dir =
      (std::filesystem::temp_directory_path() / ("dlrr-record-bench-" + std::to_string(::getpid()))).string();
  dlrr::Config cfg;
  cfg.mode = dlrr::Mode::Record;
  cfg.traceDir = dir + "/t";
  cfg.ringSteps = ringSteps;
  std::filesystem::create_directories(dir);
  enum Part { kBegin, kRng, kBatch, kOutputs, kGrads, kParams, kEnd, kParts };
  const char* names[kParts] = {"step begin", "rng states",       "batch", "module outputs", "gradients",
                               "parameters", "step end (commit)"};
  std::vector<std::vector<double>> parts(kParts), partsWall(kParts);
  std::vector<double> total, totalWall;
  {
    dlrr::RecordSession s(cfg);
    dlrr::DigestResult r;
    for (int step = 0; step < steps; ++step) {
      // New batch content every step (no dedup), as a shuffled loader delivers.
      auto batch = makeData("weights", 32 * 3 * 16 * 16, rng);
      for (auto& b : torchRng) b = static_cast<uint8_t>(rng());
      for (auto& b : npRng) b = static_cast<uint8_t>(rng());
      for (auto& b : pyRng) b = static_cast<uint8_t>(rng());
      for (size_t i = 0; i < 32; ++i) indices[i] = static_cast<int64_t>(rng() % 2048);
      // Outputs and parameters change a little every step, so their bytes differ.
      for (auto& t : outputs) t.data[0] += 1.f;
      for (auto& t : params) t.data[0] += 1.f;
      Mark t0 = mark();
      s.stepBegin(step, 0, static_cast<uint64_t>(step), 0);
      Mark t1 = mark();
      // As dlrr_rng_states: the states queued, then the writer woken once.
      s.rngState(0, -1, torchRng.data(), torchRng.size(), false, false);
      s.rngState(2, -1, npRng.data(), npRng.size(), false, false);
      s.rngState(3, -1, pyRng.data(), pyRng.size(), false, false);
      s.wakeWriter();
      Mark t2 = mark();
      s.batchBegin(0, 0, static_cast<uint64_t>(step), true, indices.data(), indices.size());
      s.batchBuilder().tuple(2);
      s.batchTensor("float32", 4, 4, batchShape, batch.data(), batch.size() * 4, "cpu", false);
      s.batchTensor("int64", 8, 1, labelShape, labels.data(), labels.size() * 8, "cpu", false);
      s.batchEnd();
      Mark t3 = mark();
      for (auto& t : outputs)
        s.digest(0, t.path, 0, 0, "float32", static_cast<int>(t.shape.size()), t.shape.data(), t.data.data(),
                 t.data.size() * 4, true, r);
      Mark t4 = mark();
      for (auto& t : params)
        s.digest(1, t.path, 0, 0, "float32", static_cast<int>(t.shape.size()), t.shape.data(), t.data.data(),
                 t.data.size() * 4, false, r);
      Mark t5 = mark();
      for (auto& t : params)
        s.digest(2, t.path, 0, 0, "float32", static_cast<int>(t.shape.size()), t.shape.data(), t.data.data(),
                 t.data.size() * 4, false, r);
      Mark t6 = mark();
      s.stepEnd(step, 1.0);
      Mark t7 = mark();
      Mark marks[kParts + 1] = {t0, t1, t2, t3, t4, t5, t6, t7};
      if (step >= steps / 10) {  // warm-up
        for (int p = 0; p < kParts; ++p) {
          parts[p].push_back(marks[p + 1].cpu - marks[p].cpu);
          partsWall[p].push_back(marks[p + 1].wall - marks[p].wall);
        }
        total.push_back(t7.cpu - t0.cpu);
        totalWall.push_back(t7.wall - t0.wall);
      }
    }
    s.onExit(true, 0);
  }
  std::filesystem::remove_all(dir);
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  auto p90 = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() * 9 / 10];
  };
  std::printf("\nRecordSession, one SmallCNN step (capture default), %d steps after warm-up\n",
              static_cast<int>(total.size()));
  std::printf("%-20s %14s %12s %14s %12s\n", "part", "cpu median us", "cpu p90 us", "wall median us", "wall p90 us");
  auto row = [&](const char* name, const std::vector<double>& cpu, const std::vector<double>& wall) {
    std::printf("%-20s %14.1f %12.1f %14.1f %12.1f\n", name, median(cpu) * 1e6, p90(cpu) * 1e6, median(wall) * 1e6,
                p90(wall) * 1e6);
  };
  for (int p = 0; p < kParts; ++p) row(names[p], parts[p], partsWall[p]);
  row("total", total, totalWall);
}

// The library's part of a module call (what bench/module_call_ab.py measures whole): a step of
// `modules` tiny outputs (4 floats: hashing is negligible), each digested and kept in the
// failure ring as dlrr_digest does for a module output. CPU ns per digest, median of steps.
void benchModuleCalls(int steps, int modules) {
  std::string dir =
      (std::filesystem::temp_directory_path() / ("dlrr-record-bench-" + std::to_string(::getpid()))).string();
  dlrr::Config cfg;
  cfg.mode = dlrr::Mode::Record;
  cfg.traceDir = dir + "/t";
  std::filesystem::create_directories(dir);
  std::vector<std::string> paths;
  paths.reserve(static_cast<size_t>(std::max(modules, 0)));
  for (int m = 0; m < modules; ++m) paths.push_back("layers." + std::to_string(m));
  std::vector<float> out = {1.f, 2.f, 3.f, 4.f};
  int64_t shape[2] = {1, 4};
  std::vector<double> perCall;
  {
    dlrr::RecordSession s(cfg);
    dlrr::DigestResult r;
    for (int step = 0; step < steps; ++step) {
      s.stepBegin(step, 0, static_cast<uint64_t>(step), 0);
      Mark t0 = mark();
      for (int m = 0; m < modules; ++m) {
        out[0] = static_cast<float>(step + m);
        s.digest(0, paths[static_cast<size_t>(m)].c_str(), 0, 0, "float32", 2, shape, out.data(), out.size() * 4, true,
                 r);
      }
      Mark t1 = mark();
      s.stepEnd(step, 1.0);
      if (step >= steps / 10) perCall.push_back((t1.cpu - t0.cpu) / modules);
    }
    s.onExit(true, 0);
  }
  std::filesystem::remove_all(dir);
  std::sort(perCall.begin(), perCall.end());
  std::printf(
      "RecordSession::digest of a 4-float module output (kept in the failure ring), %d modules: CPU ns per call "
      "min %.0f, median %.0f, p90 %.0f\n",
      modules, perCall.front() * 1e9, perCall[perCall.size() / 2] * 1e9, perCall[perCall.size() * 9 / 10] * 1e9);
}

// The lm shape's module outputs (bench/shape_job.py: batch 16x32, width 64, 4x MLP, vocab 256),
// in call order, each digested and kept in the failure ring: the per-tensor part of its step.
void benchLmOutputs(int steps, int ringSteps, bool borrowed) {
  const int64_t B = 16, T = 32, C = 64, H = 256, V = 256;
  std::mt19937 rng(3);
  std::vector<Tensor> outputs;
  outputs.push_back(tensor("embed", {B, T, C}, "weights", rng));
  for (const char* b : {"blocks.0", "blocks.1"}) {
    (void)b;
    outputs.push_back(tensor("ln1", {B, T, C}, "weights", rng));
    outputs.push_back(tensor("attn", {B, T, C}, "weights", rng));
    outputs.push_back(tensor("mlp.0", {B, T, H}, "weights", rng));
    outputs.push_back(tensor("mlp.1", {B, T, H}, "relu", rng));
    outputs.push_back(tensor("mlp.2", {B, T, C}, "weights", rng));
    outputs.push_back(tensor("mlp", {B, T, C}, "weights", rng));
    outputs.push_back(tensor("ln2", {B, T, C}, "weights", rng));
    outputs.push_back(tensor("block", {B, T, C}, "weights", rng));
  }
  outputs.push_back(tensor("ln", {B, T, C}, "weights", rng));
  outputs.push_back(tensor("head", {B, T, V}, "weights", rng));
  outputs.push_back(tensor("", {B, T, V}, "weights", rng));
  size_t bytes = 0;
  for (const auto& t : outputs) bytes += t.data.size() * 4;
  std::string dir =
      (std::filesystem::temp_directory_path() / ("dlrr-record-bench-" + std::to_string(::getpid()))).string();
  dlrr::Config cfg;
  cfg.mode = dlrr::Mode::Record;
  cfg.traceDir = dir + "/t";
  cfg.ringSteps = ringSteps;
  std::filesystem::create_directories(dir);
  std::vector<double> perStep;
  {
    dlrr::RecordSession s(cfg);
    dlrr::DigestResult r;
    for (int step = 0; step < steps; ++step) {
      for (auto& t : outputs) t.data[0] += 1.f;
      s.stepBegin(step, 0, static_cast<uint64_t>(step), 0);
      Mark t0 = mark();
      int64_t borrowedStep = -1, floor = 0;
      for (auto& t : outputs)
        if (borrowed)
          s.digestBorrowed(0, t.path, 0, 0, "float32", static_cast<int>(t.shape.size()), t.shape.data(), t.data.data(),
                           t.data.size() * 4, r, borrowedStep, floor);
        else
          s.digest(0, t.path, 0, 0, "float32", static_cast<int>(t.shape.size()), t.shape.data(), t.data.data(),
                   t.data.size() * 4, true, r);
      Mark t1 = mark();
      s.stepEnd(step, 1.0);
      if (step >= steps / 10) perStep.push_back(t1.cpu - t0.cpu);
    }
    s.onExit(true, 0);
  }
  std::filesystem::remove_all(dir);
  std::sort(perStep.begin(), perStep.end());
  std::printf(
      "lm shape's module outputs, %zu tensors, %.2f MB a step, ring %d steps: CPU us per step min %.1f, "
      "median %.1f, p90 %.1f\n",
      outputs.size(), static_cast<double>(bytes) / 1e6, ringSteps, perStep.front() * 1e6,
      perStep[perStep.size() / 2] * 1e6, perStep[perStep.size() * 9 / 10] * 1e6);
}

// argv[i] as a positive int, `fallback` when absent; 0 when it is not one.
int intArg(int argc, char** argv, int i, int fallback) {
  if (argc <= i) return fallback;
  int v = 0;
  auto [end, ec] = std::from_chars(argv[i], argv[i] + std::strlen(argv[i]), v);
  return ec == std::errc{} && *end == '\0' && v > 0 ? v : 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string what = argc > 2 ? argv[2] : "all";
  int steps = intArg(argc, argv, 1, 400);
  int third = intArg(argc, argv, 3, what == "modules" ? 64 : 2);
  if (steps == 0 || third == 0) {
    std::fprintf(stderr,
                 "usage: record_bench [STEPS [all|digest|session|lm-outputs|lm-outputs-borrowed|modules [N]]]\n");
    return 2;
  }
  if (steps < 10) steps = 10;
  if (what == "all" || what == "digest") benchDigest();
  if (what == "all" || what == "session") benchSession(steps, intArg(argc, argv, 3, 2));
  if (what == "lm-outputs" || what == "lm-outputs-borrowed")
    benchLmOutputs(steps, third, what == "lm-outputs-borrowed");
  if (what == "all" || what == "modules") benchModuleCalls(steps, intArg(argc, argv, 3, 64));
  return 0;
}

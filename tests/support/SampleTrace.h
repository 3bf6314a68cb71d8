#pragma once
// Writes small but complete traces through the real writer, for tests, fuzz seeds and
// benchmarks: a launcher stream and one process stream with `steps` training steps.
#include <cstdint>
#include <string>
#include <vector>

#include "format/StreamWriter.h"

namespace dlrr::testing {

struct SampleOptions {
  int steps = 5;
  int nanAtStep = -1;        // record a non-finite failure at this step
  int raiseAtStep = -1;      // record a RuntimeError raised in this step (after nanAtStep's NaN)
  bool closeCleanly = true;  // write footer + trailer
  size_t batchFloats = 256;
  // Adds the other event kinds (runtime info, notes, recorder status, CUDA launches, full
  // tensors at the failure, a failure traceback) and a nested dict batch, for the tools.
  bool rich = false;
  std::vector<std::string> env = {"HOME=/root", "API_TOKEN=hunter2-secret-value", "PATH=/usr/bin"};
  WriterOptions writer;
};

struct SampleResult {
  std::string dir;
  std::string processStream;             // file name of the process stream inside dir
  std::vector<uint64_t> stepEndOffsets;  // file size right after each step's commit
};

SampleResult writeSampleTrace(const std::string& dir, const SampleOptions& opts = {});

// Fresh empty directory under $TMPDIR (or /tmp), removed by the caller with removeTree.
std::string makeTempDir(const std::string& tag);
void removeTree(const std::string& path);
std::vector<uint8_t> readFile(const std::string& path);
void writeFile(const std::string& path, const std::vector<uint8_t>& bytes);

}  // namespace dlrr::testing

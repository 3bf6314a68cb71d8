// dlrr_make_sample_trace: writes a small sample trace through the real writer, for the CLI
// integration tests and for making fuzz seeds by hand.
//   dlrr_make_sample_trace DIR [--steps N] [--nan-at S] [--crash] [--rich] [--floats N]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "format/TraceError.h"
#include "support/SampleTrace.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: dlrr_make_sample_trace DIR [--steps N] [--nan-at S] [--crash] [--rich] [--floats N]\n");
    return 2;
  }
  dlrr::testing::SampleOptions o;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> long {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "dlrr_make_sample_trace: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return std::strtol(argv[++i], nullptr, 10);
    };
    if (a == "--steps") {
      o.steps = static_cast<int>(next());
    } else if (a == "--nan-at") {
      o.nanAtStep = static_cast<int>(next());
    } else if (a == "--crash") {
      o.closeCleanly = false;
    } else if (a == "--rich") {
      o.rich = true;
    } else if (a == "--floats") {
      o.batchFloats = static_cast<size_t>(next());
    } else {
      std::fprintf(stderr, "dlrr_make_sample_trace: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  try {
    auto r = dlrr::testing::writeSampleTrace(argv[1], o);
    std::printf("%s/%s\n", r.dir.c_str(), r.processStream.c_str());
  } catch (const dlrr::TraceError& e) {
    std::fprintf(stderr, "dlrr_make_sample_trace: %s\n", e.what());
    return 1;
  }
  return 0;
}

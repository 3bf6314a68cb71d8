#pragma once
// The values of dltrace's options that need more than Args::value/intValue: event kinds, RNG
// and tensor kinds, batch paths, and dump's combination of options. Apart from the commands,
// so that tests/fuzz/fuzz_cli.cc drives exactly what the commands run, without a trace.
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "schema/dlrr.capnp.h"
#include "tools/dltrace/Cli.h"

namespace dlrr::tools {

// events --kind K[,K...]: UsageError naming the kinds when one is unknown.
std::set<schema::Event::Which> parseEventKinds(const std::string& spec);

// dump: what is checked before the trace is opened (--step N, exactly one of --batch, --rng,
// --tensor, -o FILE, --tensor-kind/--call/--output only with --tensor). UsageError otherwise.
struct DumpOptions {
  int64_t step = 0;
  std::string outFile;
};
DumpOptions checkDumpOptions(const Args& args);

// dump --rng KIND[:DEVICE] (case, '-' and '_' ignored in KIND): UsageError for a bad device
// or an unknown kind.
struct RngSpec {
  schema::RngState::Kind kind;
  std::string kindText;       // as given, without ":DEVICE"
  std::optional<int> device;  // nullopt: any device
};
RngSpec parseRngSpec(const std::string& spec);

// dump --tensor-kind K: UsageError for an unknown kind.
schema::TensorDigest::Kind parseTensorKind(const std::string& name);

// dump --batch PATH: follows a dotted path ("inputs.0") from `root`; dict keys may themselves
// contain dots (the longest match wins). nullopt when there is no such field.
std::optional<schema::Value::Reader> resolveBatchPath(schema::Value::Reader root, std::string_view path);

}  // namespace dlrr::tools

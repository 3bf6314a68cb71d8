// libFuzzer target: the tools' parsers of user input. The first byte picks a parser, the rest
// is an argv split on NUL bytes (a real argv holds none):
//   0 dltrace: COMMAND, then Args over the command's options and every value the command
//     parses before it opens the trace (--step, --kind, dump's options, --rng, --tensor-kind,
//     --batch PATH against a fixed batch)
//   1 dlrecord's options (tools/dlrecord/RecordOptions)   2 dlreplay's (tools/dlreplay/ReplayOptions)
//   3 dlreplay --until TARGET (replayer/ReplayTarget), each argument
//   4 the value parsers directly, argument i to parser i % 6: --redact lists, --until, --kind,
//     --rng, --tensor-kind, --batch PATH
// A parser may reject its input with a UsageError (or parseReplayTarget's error text); any other
// exception, a crash, a sanitizer report, a leak, a 10 s input or a broken invariant (abort) is
// a finding.
#include <capnp/message.h>
#include <capnp/schema.h>

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "format/Redact.h"
#include "replayer/ReplayTarget.h"
#include "tools/common/UsageError.h"
#include "tools/dlpreflight/PreflightOptions.h"
#include "tools/dlpreflight/PreflightReport.h"
#include "tools/dlrecord/RecordOptions.h"
#include "tools/dlreplay/ReplayOptions.h"
#include "tools/dltrace/Cli.h"
#include "tools/dltrace/Commands.h"
#include "tools/dltrace/OptionValues.h"

namespace {

using dlrr::schema::Value;
using dlrr::tools::UsageError;

// Values parsed one by one (modes 3 and 4) are independent: more of them in one input find
// nothing new and slow every execution down.
constexpr size_t kMaxValues = 24;

void check(bool ok) {
  if (!ok) std::abort();
}

bool isOneOf(const std::string& s, std::initializer_list<const char*> set) {
  for (const char* x : set)
    if (s == x) return true;
  return false;
}

// A batch with lists, tuples, nested dicts and a key holding a dot, for dump --batch PATH.
class SampleBatch {
 public:
  SampleBatch() {
    auto root = message_.initRoot<Value>();
    auto dict = root.initDict(4);
    dict[0].setKey("inputs");
    auto inputs = dict[0].initValue().initList(2);
    inputs[0].setInt(1);
    auto pair = inputs[1].initTuple(2);
    pair[0].setInt(2);
    pair[1].setFloat(3.0);
    dict[1].setKey("x");
    auto x = dict[1].initValue().initDict(1);
    x[0].setKey("y");
    x[0].initValue().setInt(4);
    dict[2].setKey("x.y");
    dict[2].initValue().setInt(5);
    dict[3].setKey("");
    dict[3].initValue().setText("empty key");
  }
  Value::Reader root() { return message_.getRoot<Value>().asReader(); }

 private:
  capnp::MallocMessageBuilder message_;
};

Value::Reader sampleBatch() {
  static SampleBatch* batch = new SampleBatch;  // built once; never freed (no leak report)
  return batch->root();
}

// dltrace's messages reach the terminal through oneLine(): one line, no control characters.
void checkOneLine(const std::string& msg) {
  for (char c : dlrr::tools::oneLine(msg)) check(c == '\t' || static_cast<unsigned char>(c) >= 0x20);
}

void rngSpec(const std::string& s) {
  auto r = dlrr::tools::parseRngSpec(s);
  check(r.kindText.find(':') == std::string::npos && s.rfind(r.kindText, 0) == 0);
  check(static_cast<unsigned>(r.kind) < capnp::Schema::from<dlrr::schema::RngState::Kind>().getEnumerants().size());
}

void tensorKind(const std::string& s) {
  auto k = dlrr::tools::parseTensorKind(s);
  check(static_cast<unsigned>(k) < capnp::Schema::from<dlrr::schema::TensorDigest::Kind>().getEnumerants().size());
}

void eventKinds(const std::string& s) {
  auto kinds = dlrr::tools::parseEventKinds(s);
  size_t commas = 0;
  for (char c : s) commas += c == ',';
  check(!kinds.empty() && kinds.size() <= commas + 1);
}

void batchPath(const std::string& s) {
  auto v = dlrr::tools::resolveBatchPath(sampleBatch(), s);
  if (s.empty()) check(v && v->isDict());  // no path: the whole batch
}

void redact(const std::string& s) {
  // The user's list adds to the defaults (with or without a leading '+'): the defaults come
  // first and whole, and what follows is made of the spec's own characters.
  auto patterns = dlrr::parseRedactPatterns(s);
  const auto defaults = dlrr::defaultRedactPatterns();
  check(patterns.size() >= defaults.size());
  size_t added = 0;
  for (size_t i = 0; i < patterns.size(); ++i) {
    const auto& p = patterns[i];
    check(!p.empty());
    for (char c : p) check(!std::isspace(static_cast<unsigned char>(c)));
    check(dlrr::isSecretName(p, patterns));
    if (i < defaults.size()) {
      check(p == defaults[i]);
    } else {
      added += p.size();
    }
  }
  check(added <= s.size());
}

// --until: step=N is non-negative and round-trips through describe(); the words are themselves.
void untilTarget(const std::string& s) {
  std::string err;
  auto t = dlrr::parseReplayTarget(s, err);
  if (!t) {
    check(!err.empty());
    return;
  }
  if (t->kind == dlrr::ReplayTarget::Kind::Step) {
    check(t->step >= 0 && s.rfind("step=", 0) == 0);
    std::string err2;
    auto again = dlrr::parseReplayTarget(t->describe(), err2);
    check(again && again->kind == t->kind && again->step == t->step);
  } else {
    check(t->describe() == s);
  }
}

// Runs f; a UsageError is a rejection (and for dltrace must print as one line).
template <typename F>
void allowUsageError(F&& f) {
  try {
    f();
  } catch (const UsageError& e) {
    checkOneLine(e.what());
  }
}

void dltrace(const std::vector<std::string>& argv) {
  static const std::vector<dlrr::tools::CommandDef>* commands = new std::vector<dlrr::tools::CommandDef>{
      dlrr::tools::infoCommand(), dlrr::tools::stepsCommand(),  dlrr::tools::eventsCommand(),
      dlrr::tools::dumpCommand(), dlrr::tools::verifyCommand(), dlrr::tools::triageCommand(),
      dlrr::tools::envCommand(),  dlrr::tools::envDiffCommand()};
  if (argv.empty()) return;
  const dlrr::tools::CommandDef* cmd = nullptr;
  for (const auto& c : *commands)
    if (c.name == argv[0]) cmd = &c;
  if (!cmd) return;
  std::vector<std::string> rest(argv.begin() + 1, argv.end());
  for (const auto& a : rest) {  // as main: --help before "--" shows the help instead
    if (a == "--") break;
    if (a == "--help" || a == "-h") return;
  }
  allowUsageError([&] {
    dlrr::tools::Args args(rest, cmd->options);
    for (const auto& spec : cmd->options) {
      auto v = args.value(spec.name);
      if (spec.type == dlrr::tools::OptSpec::Type::Flag) check(!v);
      if (spec.type == dlrr::tools::OptSpec::Type::Value) check(args.has(spec.name) == v.has_value());
      if (!args.has(spec.name)) check(!v);
    }
    (void)args.trace();
    if (cmd->name == "events") {
      (void)args.intValue("--step");
      if (auto k = args.value("--kind")) eventKinds(*k);
    } else if (cmd->name == "dump") {
      auto d = dlrr::tools::checkDumpOptions(args);
      check(args.intValue("--step") == d.step && args.value("-o") == d.outFile);
      if (auto path = args.value("--batch")) batchPath(*path);
      if (auto rng = args.value("--rng")) rngSpec(*rng);
      if (args.has("--tensor")) {
        if (auto k = args.value("--tensor-kind")) tensorKind(*k);
        (void)args.intValue("--call");
        (void)args.intValue("--output");
      }
    }
  });
}

bool isSuffix(const std::vector<std::string>& tail, const std::vector<std::string>& all) {
  return tail.size() <= all.size() &&
         std::equal(tail.begin(), tail.end(), all.end() - static_cast<ptrdiff_t>(tail.size()));
}

void dlrecord(const std::vector<std::string>& argv) {
  try {
    auto o = dlrr::parseRecordOptions(argv);
    if (o.action != dlrr::RecordOptions::Action::Record) return;
    check(!o.command.empty() && isSuffix(o.command, argv));
    check(isOneOf(o.capture, {"minimal", "default", "full"}) && isOneOf(o.collectives, {"digest", "full"}));
    check(o.ringSteps >= 0 && o.ringSteps <= 64);
    for (const auto& p : o.redact) check(!p.empty());
  } catch (const UsageError& e) {
    check(*e.what() != '\0');
  }
}

void dlreplay(const std::vector<std::string>& argv) {
  try {
    auto o = dlrr::parseReplayOptions(argv);
    if (o.action != dlrr::ReplayOptions::Action::Replay) return;
    // A bare "-" is an operand (tools/common/Args: the POSIX convention), opened as a file of
    // that name; anything else starting with '-' is an option, never the trace.
    check(!o.trace.empty() && (o.trace == "-" || o.trace[0] != '-'));
    check(isSuffix(o.command, argv));
    check(o.debug.empty() || isOneOf(o.debug, {"pdb", "gdb", "wait"}));
    check(!o.rank || (*o.rank >= 0 && *o.rank <= (1 << 24)));
    check(!(o.rank && o.allRanks) && !(o.check && (!o.until.empty() || !o.debug.empty() || o.allRanks)));
    if (!o.until.empty()) {
      std::string err;
      check(dlrr::parseReplayTarget(o.until, err).has_value());
      untilTarget(o.until);
    }
  } catch (const UsageError& e) {
    check(*e.what() != '\0');
  }
}

void dlpreflight(const std::vector<std::string>& argv) {
  try {
    auto o = dlrr::parsePreflightOptions(argv);
    if (o.action != dlrr::PreflightOptions::Action::Run) return;
    check(!o.command.empty() && isSuffix(o.command, argv));
    check(o.batches >= 1 && o.batches <= 1000000);
  } catch (const UsageError& e) {
    check(*e.what() != '\0');
  }
}

// The preflight facts a trace carries are untrusted text: arguments in pairs as
// `preflight.<key>` = value, parsed and rendered; the JSON report stays one line.
void preflightFacts(const std::vector<std::string>& argv) {
  std::map<std::string, std::string> runtime;
  for (size_t i = 0; i + 1 < argv.size() && i < 2 * kMaxValues; i += 2) runtime["preflight." + argv[i]] = argv[i + 1];
  auto f = dlrr::preflight::parseFacts(runtime);
  dlrr::triage::TriageInput in;
  dlrr::triage::TriageResult t;
  auto r = dlrr::preflight::judge(f, in, t, argv.size() % 3 == 0 ? 0 : 1);
  check(r.passed == (r.exitCode == 0));
  (void)dlrr::preflight::renderText(f, r, in, t, "trace", 1.0);
  std::string json = dlrr::preflight::renderJson(f, r, in, t, "trace", 1.0);
  check(json.find('\n') == json.size() - 1);
}

// Argument i goes to value parser i % 6: every parser gets its own arguments, and an input
// does not pay for all six on every argument (that made the target four times slower).
void valueParser(size_t i, const std::string& s) {
  switch (i % 6) {
    case 0:
      redact(s);
      break;
    case 1:
      untilTarget(s);
      break;
    case 2:
      allowUsageError([&] { eventKinds(s); });
      break;
    case 3:
      allowUsageError([&] { rngSpec(s); });
      break;
    case 4:
      allowUsageError([&] { tensorKind(s); });
      break;
    default:
      batchPath(s);
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t which = data[0] % 5;
  std::vector<std::string> argv;
  if (size > 1) {
    std::string arg;
    for (size_t i = 1; i < size; ++i) {
      if (data[i] == 0) {
        argv.push_back(std::move(arg));
        arg.clear();
      } else {
        arg += static_cast<char>(data[i]);
      }
    }
    argv.push_back(std::move(arg));
  }
  switch (which) {
    case 0:
      dltrace(argv);
      break;
    case 1:
      dlrecord(argv);
      dlpreflight(argv);
      break;
    case 2:
      dlreplay(argv);
      break;
    case 3:
      for (size_t i = 0; i < argv.size() && i < kMaxValues; ++i) untilTarget(argv[i]);
      break;
    default:
      for (size_t i = 0; i < argv.size() && i < kMaxValues; ++i) valueParser(i, argv[i]);
      preflightFacts(argv);
      break;
  }
  return 0;
}

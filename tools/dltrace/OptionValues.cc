#include "tools/dltrace/OptionValues.h"

#include <capnp/schema.h>

#include <cctype>
#include <charconv>

#include "tools/dltrace/EventText.h"

namespace dlrr::tools {
namespace {

std::string normalize(std::string_view s) {
  std::string out;
  for (char c : s)
    if (c != '-' && c != '_') out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::optional<schema::RngState::Kind> parseRngKind(std::string_view s) {
  for (auto e : capnp::Schema::from<schema::RngState::Kind>().getEnumerants())
    if (normalize(e.getProto().getName().cStr()) == normalize(s))
      return static_cast<schema::RngState::Kind>(e.getOrdinal());
  return std::nullopt;
}

}  // namespace

std::set<schema::Event::Which> parseEventKinds(const std::string& spec) {
  std::set<schema::Event::Which> out;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t comma = spec.find(',', start);
    if (comma == std::string::npos) comma = spec.size();
    std::string name = spec.substr(start, comma - start);
    auto k = parseEventKind(name);
    if (!k) {
      std::string all;
      for (const auto& n : eventKindNames()) all += (all.empty() ? "" : ", ") + n;
      throw UsageError("unknown event kind '" + name + "' (kinds: " + all + ")");
    }
    out.insert(*k);
    start = comma + 1;
  }
  return out;
}

DumpOptions checkDumpOptions(const Args& args) {
  auto step = args.intValue("--step");
  if (!step) throw UsageError("missing --step N");
  if (*step < 0) throw UsageError("--step must be a step number, 0 or more (got " + std::to_string(*step) + ")");
  int modes = args.has("--batch") + args.has("--rng") + args.has("--tensor");
  if (modes != 1) throw UsageError("give exactly one of --batch [PATH], --rng KIND, --tensor PATH");
  auto outFile = args.value("-o");
  if (!outFile) throw UsageError("missing -o FILE.npy");
  if (!args.has("--tensor") && (args.has("--tensor-kind") || args.has("--call") || args.has("--output")))
    throw UsageError("--tensor-kind, --call and --output go with --tensor");
  return {*step, *outFile};
}

RngSpec parseRngSpec(const std::string& rng) {
  std::string spec = rng;
  std::optional<int> device;
  if (auto colon = spec.find(':'); colon != std::string::npos) {
    std::string d = spec.substr(colon + 1);
    int n = -1;
    auto [end, ec] = std::from_chars(d.data(), d.data() + d.size(), n);
    if (ec != std::errc() || end != d.data() + d.size() || n < 0)
      throw UsageError("bad device in --rng " + spec + " (expected KIND[:DEVICE])");
    device = n;
    spec.resize(colon);
  }
  auto kind = parseRngKind(spec);
  if (!kind) throw UsageError("unknown RNG kind '" + spec + "' (kinds: torchCpu, torchCuda, numpy, python)");
  return {*kind, spec, device};
}

schema::TensorDigest::Kind parseTensorKind(const std::string& name) {
  for (auto e : capnp::Schema::from<schema::TensorDigest::Kind>().getEnumerants())
    if (normalize(e.getProto().getName().cStr()) == normalize(name))
      return static_cast<schema::TensorDigest::Kind>(e.getOrdinal());
  throw UsageError("unknown tensor kind '" + name + "'");
}

std::optional<schema::Value::Reader> resolveBatchPath(schema::Value::Reader v, std::string_view path) {
  while (!path.empty()) {
    auto indexed = [&](capnp::List<schema::Value>::Reader list) -> std::optional<schema::Value::Reader> {
      size_t dot = path.find('.');
      std::string_view part = path.substr(0, dot);
      if (part.empty() || part.size() > 9 || part.find_first_not_of("0123456789") != std::string_view::npos)
        return std::nullopt;
      unsigned long i = std::stoul(std::string(part));
      if (i >= list.size()) return std::nullopt;
      path = dot == std::string_view::npos ? std::string_view() : path.substr(dot + 1);
      return list[static_cast<unsigned>(i)];
    };
    std::optional<schema::Value::Reader> next;
    switch (v.which()) {
      case schema::Value::LIST:
        next = indexed(v.getList());
        break;
      case schema::Value::TUPLE:
        next = indexed(v.getTuple());
        break;
      case schema::Value::DICT: {
        size_t best = 0;
        for (auto e : v.getDict()) {
          std::string_view k(e.getKey().begin(), e.getKey().size());
          if (k.size() >= best && path.substr(0, k.size()) == k && (path.size() == k.size() || path[k.size()] == '.')) {
            best = k.size();
            next = e.getValue();
          }
        }
        if (next) path = best == path.size() ? std::string_view() : path.substr(best + 1);
        break;
      }
      default:
        return std::nullopt;
    }
    if (!next) return std::nullopt;
    v = *next;
  }
  return v;
}

}  // namespace dlrr::tools

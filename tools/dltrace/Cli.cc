#include "tools/dltrace/Cli.h"

#include <cerrno>
#include <charconv>
#include <cstring>

namespace dlrr::tools {

int exitCodeFor(ErrorKind kind) noexcept {
  switch (kind) {
    case ErrorKind::Io:
      return kExitIo;
    case ErrorKind::NotATrace:
      return kExitNotATrace;
    case ErrorKind::FutureVersion:
      return kExitFutureVersion;
    case ErrorKind::Corrupt:
      return kExitCorrupt;
    case ErrorKind::Usage:
      return kExitUsage;
    case ErrorKind::NotFound:
      return kExitNotFound;
  }
  return kExitInternal;
}

Args::Args(const std::vector<std::string>& argv, const std::vector<OptSpec>& specs) {
  bool optionsDone = false;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (optionsDone || a.empty() || a[0] != '-' || a == "-") {
      positional_.push_back(a);
      continue;
    }
    if (a == "--") {
      optionsDone = true;
      continue;
    }
    std::string name = a;
    std::optional<std::string> inlineValue;
    if (auto eq = a.find('='); eq != std::string::npos && a.rfind("--", 0) == 0) {
      name = a.substr(0, eq);
      inlineValue = a.substr(eq + 1);
    }
    const OptSpec* spec = nullptr;
    for (const auto& s : specs)
      if (s.name == name) spec = &s;
    if (!spec) throw UsageError("unknown option " + name);
    for (const auto& s : seen_)
      if (s.name == name) throw UsageError("option " + name + " given twice");
    Seen seen{name, std::nullopt};
    switch (spec->type) {
      case OptSpec::Type::Flag:
        if (inlineValue) throw UsageError("option " + name + " takes no value");
        break;
      case OptSpec::Type::Value:
        if (inlineValue) {
          seen.value = inlineValue;
        } else {
          if (i + 1 >= argv.size()) throw UsageError("option " + name + " needs a value");
          seen.value = argv[++i];
        }
        break;
      case OptSpec::Type::OptionalValue:
        if (inlineValue) {
          seen.value = inlineValue;
        } else if (i + 1 < argv.size() && !argv[i + 1].empty() && argv[i + 1][0] != '-') {
          seen.value = argv[++i];
        }
        break;
    }
    seen_.push_back(std::move(seen));
  }
}

bool Args::has(const std::string& name) const {
  for (const auto& s : seen_)
    if (s.name == name) return true;
  return false;
}

std::optional<std::string> Args::value(const std::string& name) const {
  for (const auto& s : seen_)
    if (s.name == name) return s.value;
  return std::nullopt;
}

std::optional<int64_t> Args::intValue(const std::string& name) const {
  auto v = value(name);
  if (!v) return std::nullopt;
  int64_t n = 0;
  auto r = std::from_chars(v->data(), v->data() + v->size(), n);
  if (v->empty() || r.ec != std::errc() || r.ptr != v->data() + v->size())
    throw UsageError("option " + name + " needs an integer, got '" + *v + "'");
  return n;
}

const std::string& Args::trace() const {
  if (positional_.empty()) throw UsageError("missing TRACE argument");
  if (positional_.size() > 1) throw UsageError("unexpected argument '" + positional_[1] + "'");
  return positional_[0];
}

void Output::write(const std::string& s) {
  if (!s.empty()) std::fwrite(s.data(), 1, s.size(), f_);
}

void Output::flush() {
  if (std::fflush(f_) != 0 || std::ferror(f_)) {
    int err = errno;
    throw TraceError(ErrorKind::Io, std::string("cannot write output: ") + std::strerror(err ? err : EIO));
  }
}

std::string oneLine(const std::string& msg) {
  std::string out;
  out.reserve(msg.size());
  for (char c : msg) {
    if (c == '\n')
      out += "; ";
    else if (static_cast<unsigned char>(c) < 0x20 && c != '\t')
      out += '?';
    else
      out += c;
  }
  return out;
}

void warn(const std::string& msg) { std::fprintf(stderr, "dltrace: warning: %s\n", oneLine(msg).c_str()); }

}  // namespace dlrr::tools

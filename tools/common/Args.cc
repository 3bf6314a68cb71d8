#include "tools/common/Args.h"

#include <charconv>

namespace dlrr::tools {

Args::Args(const std::vector<std::string>& argv, const std::vector<OptSpec>& specs, Layout layout) {
  bool optionsDone = false;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (optionsDone || a.empty() || a[0] != '-' || a == "-") {
      positional_.push_back(a);
      continue;
    }
    if (a == "--") {
      if (layout == Layout::Command) {
        sawDashDash_ = true;
        command_.assign(argv.begin() + static_cast<std::ptrdiff_t>(i) + 1, argv.end());
        return;
      }
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
      if (s.name == name || (!s.alias.empty() && s.alias == name)) spec = &s;
    if (!spec) throw UsageError("unknown option '" + name + "'");
    for (const auto& s : seen_)
      if (s.name == spec->name) throw UsageError("option " + name + " given twice");
    Seen seen{spec->name, std::nullopt};
    switch (spec->type) {
      case OptSpec::Type::Flag:
      case OptSpec::Type::Final:
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
    if (spec->type == OptSpec::Type::Final) {
      final_ = spec->name;
      return;
    }
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

std::optional<int64_t> Args::intValue(const std::string& name, int64_t lo, int64_t hi) const {
  auto v = value(name);
  if (!v) return std::nullopt;
  int64_t n = 0;
  auto r = std::from_chars(v->data(), v->data() + v->size(), n);
  if (v->empty() || r.ec != std::errc() || r.ptr != v->data() + v->size() || n < lo || n > hi)
    throw UsageError(name + " must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi) + " (got '" +
                     *v + "')");
  return n;
}

const std::string& Args::trace() const {
  if (positional_.empty()) throw UsageError("missing TRACE argument");
  if (positional_.size() > 1) throw UsageError("unexpected argument '" + positional_[1] + "'");
  return positional_[0];
}

}  // namespace dlrr::tools

#include "format/Redact.h"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace dlrr {

std::vector<std::string> defaultRedactPatterns() {
  return {"TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL", "AUTH", "COOKIE", "SESSION", "WEBHOOK"};
}

std::vector<std::string> parseRedactPatterns(std::string_view spec) {
  std::vector<std::string> out = defaultRedactPatterns();
  if (!spec.empty() && spec.front() == '+') spec.remove_prefix(1);
  size_t start = 0;
  while (start <= spec.size()) {
    size_t comma = spec.find(',', start);
    if (comma == std::string_view::npos) comma = spec.size();
    std::string part(spec.substr(start, comma - start));
    part.erase(std::remove_if(part.begin(), part.end(), [](unsigned char c) { return std::isspace(c); }), part.end());
    if (!part.empty()) out.push_back(part);
    start = comma + 1;
  }
  return out;
}

bool isSecretName(std::string_view name, const std::vector<std::string>& patterns) {
  std::string upper(name);
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
  for (const auto& p : patterns) {
    std::string up(p);
    std::transform(up.begin(), up.end(), up.begin(), [](unsigned char c) { return std::toupper(c); });
    if (!up.empty() && upper.find(up) != std::string::npos) return true;
  }
  return false;
}

namespace {

bool tokenChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '+' || c == '=' || c == '.';
}

bool startsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

double entropyBits(std::string_view s) {
  int count[256] = {};
  for (unsigned char c : s) ++count[c];
  double h = 0;
  for (int n : count)
    if (n) {
      double p = static_cast<double>(n) / static_cast<double>(s.size());
      h -= p * std::log2(p);
    }
  return h;
}

}  // namespace

bool isSecretValue(std::string_view v) {
  static constexpr std::string_view kPrefixes[] = {
      "ghp_",  "gho_",  "ghu_",  "ghs_",  "ghr_",  "github_pat_", "hf_",  "sk-",  "sk_live_", "rk_live_",
      "xoxb-", "xoxp-", "xoxa-", "xoxr-", "xoxs-", "glpat-",      "AKIA", "ASIA", "AIza",     "ya29."};
  for (auto p : kPrefixes)
    if (startsWith(v, p) && v.size() >= p.size() + 12 &&
        std::all_of(v.begin() + static_cast<std::ptrdiff_t>(p.size()), v.end(), tokenChar))
      return true;
  if (v.size() < 32 || !std::all_of(v.begin(), v.end(), tokenChar)) return false;
  bool upper = std::any_of(v.begin(), v.end(), [](unsigned char c) { return std::isupper(c); });
  bool lower = std::any_of(v.begin(), v.end(), [](unsigned char c) { return std::islower(c); });
  bool digit = std::any_of(v.begin(), v.end(), [](unsigned char c) { return std::isdigit(c); });
  return upper && lower && digit && entropyBits(v) >= 4.2;
}

std::string redactValue(std::string_view v, bool& changed) {
  std::string out;
  changed = false;
  size_t i = 0;
  while (i < v.size()) {
    // scheme://user:password@host: the user-info goes.
    if (v.compare(i, 3, "://") == 0) {
      out += "://";
      i += 3;
      size_t end = i;
      while (end < v.size() && v[end] != '/' && v[end] != '?' && v[end] != '#' &&
             !std::isspace(static_cast<unsigned char>(v[end])))
        ++end;
      size_t at = v.substr(i, end - i).rfind('@');
      if (at != std::string_view::npos) {
        out += kRedacted;
        i += at;  // from the '@'
        changed = true;
      }
      continue;
    }
    if (tokenChar(v[i])) {
      size_t end = i;
      while (end < v.size() && tokenChar(v[end])) ++end;
      std::string_view word = v.substr(i, end - i);
      // KEY=VALUE inside a value (an argument --token=...): the value is judged alone.
      size_t eq = word.find('=');
      if (eq != std::string_view::npos && eq + 1 < word.size() && isSecretValue(word.substr(eq + 1))) {
        out.append(word.substr(0, eq + 1));
        out += kRedacted;
        changed = true;
      } else if (isSecretValue(word)) {
        out += kRedacted;
        changed = true;
      } else {
        out.append(word);
      }
      i = end;
      continue;
    }
    out.push_back(v[i++]);
  }
  return out;
}

bool isCredentialPath(std::string_view abs) {
  static constexpr std::string_view kDirs[] = {"/.aws/",   "/.ssh/",   "/.config/gcloud/", "/.kaggle/",
                                               "/.gnupg/", "/.azure/", "/.config/gh/"};
  static constexpr std::string_view kFiles[] = {"/.netrc",
                                                "/_netrc",
                                                "/.git-credentials",
                                                "/.docker/config.json",
                                                "/.cache/huggingface/token",
                                                "/.huggingface/token",
                                                "/.pgpass",
                                                "/.npmrc",
                                                "/.pypirc",
                                                "/.config/gcloud"};
  for (auto d : kDirs)
    if (abs.find(d) != std::string_view::npos) return true;
  for (auto f : kFiles)
    if (abs.size() >= f.size() && abs.substr(abs.size() - f.size()) == f) return true;
  std::string_view name = abs.substr(abs.rfind('/') + 1);
  auto ends = [&](std::string_view e) { return name.size() > e.size() && name.substr(name.size() - e.size()) == e; };
  return startsWith(name, ".env") || ends(".pem") || ends(".key") || ends(".p12") || ends(".pfx");
}

}  // namespace dlrr

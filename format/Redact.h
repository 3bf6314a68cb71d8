#pragma once
// Secret-looking environment variables never reach trace bytes: their values are replaced
// before anything is serialised.
#include <string>
#include <string_view>
#include <vector>

namespace dlrr {

inline constexpr const char* kRedacted = "<redacted>";

// Default name fragments (case-insensitive substring match on the variable name).
std::vector<std::string> defaultRedactPatterns();
// Parses a comma-separated list ("TOKEN,SECRET"), added to the defaults (a leading '+', as
// before, changes nothing): a list never drops a default.
std::vector<std::string> parseRedactPatterns(std::string_view spec);
bool isSecretName(std::string_view name, const std::vector<std::string>& patterns);

// A value that is a credential by its shape: a known token prefix (ghp_, github_pat_, hf_,
// sk-, AKIA/ASIA..., xox?-, glpat-, ...) or a long random-looking string (32+ characters of
// letters, digits, '_', '-', '+', '=' mixing upper case, lower case and digits, with high
// entropy: not a hex digest, a UUID or a path).
bool isSecretValue(std::string_view v);
// `v` with the user-info of every URL in it (scheme://USER:PASSWORD@host) and every
// token-shaped word in it replaced by kRedacted; `changed` says whether anything was.
std::string redactValue(std::string_view v, bool& changed);

// A file whose contents are credentials (~/.netrc, ~/.aws/, ~/.ssh/, ~/.config/gcloud/,
// ~/.docker/config.json, ~/.git-credentials, ~/.kaggle/, ~/.cache/huggingface/token, .env*,
// *.pem, *.key, ...), wherever it is: the recorder keeps only its stat, replay never serves it.
bool isCredentialPath(std::string_view abs);

}  // namespace dlrr

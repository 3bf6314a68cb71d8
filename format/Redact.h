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
// Parses a comma-separated list ("TOKEN,SECRET"); a leading '+' adds to the defaults.
std::vector<std::string> parseRedactPatterns(std::string_view spec);
bool isSecretName(std::string_view name, const std::vector<std::string>& patterns);

}  // namespace dlrr

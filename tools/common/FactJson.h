#pragma once
// A recorded fact ("torch.num_threads" = "4", "cudnn.enabled" = "1", ...) as a JSON value: the
// trace keeps every fact as text; --json readers get the flags the hook records as "0"/"1" as
// booleans and the counts as numbers. A value that is not what its key promises (a failed
// query's "<error: ...>", "<unset>") and every other fact stay strings.
#include <string>
#include <string_view>

#include "tools/common/Json.h"

namespace dlrr::tools {

void writeFactValue(JsonWriter& j, std::string_view key, const std::string& value);

}  // namespace dlrr::tools

#pragma once
// How dltrace shows events: one human-readable line each (failures add indented stack lines),
// or one JSON object that mirrors the Cap'n Proto schema field by field. Both walk readers
// over untrusted bytes: they may throw kj::Exception, which StreamReader::forEachEvent turns
// into TraceError(Corrupt).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "schema/dlrr.capnp.h"
#include "tools/common/Json.h"

namespace dlrr::tools {

// Event kind names are the schema's union member names: "batch", "stepEnd", "rngState", ...
std::string eventKindName(schema::Event::Reader e);
std::vector<std::string> eventKindNames();
// Case-insensitive, '-' and '_' ignored ("step-end" = "stepEnd"); nullopt when unknown.
std::optional<schema::Event::Which> parseEventKind(std::string_view name);

// Name of an enumerant of a schema enum ("torchCpu"), or its number when unknown.
template <typename E>
std::string enumName(E v);

// Kernel names interned by InternedString events (id -> name).
using InternTable = std::unordered_map<uint32_t, std::string>;

// The event's kind-specific part as one line (no stream, step or time prefix).
std::string describeEvent(schema::Event::Reader e, const InternTable& names);
// Extra lines (already indented) for events that carry stacks: failures.
std::vector<std::string> eventDetailLines(schema::Event::Reader e);
// A structured value in brief: "(tensor float32[2,128] cpu 1.0 KiB, 3)".
std::string describeValue(schema::Value::Reader v);
// "float32[2,128]"
std::string describeTensor(schema::TensorRef::Reader t);

// Writes the whole event as a JSON object (field names as in schema/dlrr.capnp).
void eventJson(JsonWriter& j, schema::Event::Reader e);

}  // namespace dlrr::tools

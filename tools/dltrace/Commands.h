#pragma once
// The dltrace subcommands: each file defines one family and returns its definition here.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "format/Trace.h"
#include "tools/dltrace/Cli.h"

namespace dlrr::tools {

struct CommandDef {
  std::string name;
  std::string summary;  // one line for `dltrace --help`
  std::string usage;    // "dltrace info TRACE [--json]"
  std::string help;     // the rest of `dltrace CMD --help`
  std::vector<OptSpec> options;
  int (*run)(const Args& args, Output& out) = nullptr;
};

CommandDef infoCommand();
CommandDef stepsCommand();
CommandDef eventsCommand();
CommandDef dumpCommand();
CommandDef verifyCommand();
CommandDef triageCommand();   // TriageCommand.cc
CommandDef envCommand();      // EnvCommand.cc
CommandDef envDiffCommand();  // EnvCommand.cc
CommandDef reportCommand();   // ReportCommand.cc
CommandDef exportCommand();   // ExportCommand.cc

// Opens a trace for the commands: streams that cannot be opened are skipped with a warning
// (verify and info report them instead, with warnBroken = false).
std::unique_ptr<Trace> openTraceForTool(const std::string& path, bool warnBroken = true);
// The stream named by --stream, else the main (training) stream. TraceError(NotFound) lists
// the streams there are.
StreamReader& selectStream(Trace& trace, const std::optional<std::string>& name);
// Warns once on stderr when `s` could only be read up to a damaged or torn frame.
void warnIfDamaged(StreamReader& s);

}  // namespace dlrr::tools

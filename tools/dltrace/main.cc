// dltrace: inspect dlrr traces. Dispatches to one subcommand; every failure ends as a one-line
// message on stderr and a documented exit code (docs/cli.md), never a crash.
#include <kj/exception.h>

#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "format/Frame.h"
#include "format/TraceError.h"
#include "format/Version.h"
#include "tools/dltrace/Cli.h"
#include "tools/dltrace/Commands.h"

namespace dlrr::tools {
namespace {

std::vector<CommandDef> allCommands() {
  return {infoCommand(),   stepsCommand(), eventsCommand(),  dumpCommand(),   verifyCommand(),
          triageCommand(), envCommand(),   envDiffCommand(), reportCommand(), exportCommand()};
}

void printMainHelp(std::FILE* f) {
  std::fprintf(f,
               "usage: dltrace COMMAND TRACE [options]\n"
               "       dltrace COMMAND --help | --help | --version\n"
               "\n"
               "Inspect a dlrr trace (a directory written by dlrecord).\n"
               "\n"
               "commands:\n");
  for (const auto& c : allCommands()) std::fprintf(f, "  %-8s %s\n", c.name.c_str(), c.summary.c_str());
  std::fprintf(f,
               "\n"
               "exit codes: 0 ok, 1 damage found / negative result, 2 usage error, 3 I/O error,\n"
               "4 not a trace, 5 needs a newer dlrr, 6 corrupt beyond recovery, 7 not found,\n"
               "8 internal error (see docs/cli.md)\n");
}

int usageError(const std::string& msg, const CommandDef* cmd) {
  std::fprintf(stderr, "dltrace: %s\n", oneLine(msg).c_str());
  if (cmd)
    std::fprintf(stderr, "usage: %s  (see 'dltrace %s --help')\n", cmd->usage.c_str(), cmd->name.c_str());
  else
    std::fprintf(stderr, "usage: dltrace COMMAND TRACE [options]  (see 'dltrace --help')\n");
  return kExitUsage;
}

int fail(int code, const std::string& msg) {
  std::fprintf(stderr, "dltrace: %s\n", oneLine(msg).c_str());
  return code;
}

int dispatch(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return usageError("missing command", nullptr);
  const std::string& first = args[0];
  if (first == "--help" || first == "-h" || first == "help") {
    if (first == "help" && args.size() > 1) {
      for (const auto& c : allCommands())
        if (c.name == args[1]) {
          std::printf("usage: %s\n\n%s", c.usage.c_str(), c.help.c_str());
          return kExitOk;
        }
      return usageError("unknown command '" + args[1] + "'", nullptr);
    }
    printMainHelp(stdout);
    return kExitOk;
  }
  if (first == "--version" || first == "-V") {
    std::printf("dltrace (dlrr) %s, trace format %u.%u\n", kDlrrVersion, kFormatMajor, kFormatMinor);
    return kExitOk;
  }
  std::vector<CommandDef> commands = allCommands();
  const CommandDef* cmd = nullptr;
  for (const auto& c : commands)
    if (c.name == first) cmd = &c;
  if (!cmd) {
    if (!first.empty() && first[0] == '-')
      return usageError("unknown option " + first + " (options go after the command)", nullptr);
    return usageError("unknown command '" + first + "'", nullptr);
  }
  std::vector<std::string> rest(args.begin() + 1, args.end());
  for (const auto& a : rest) {
    if (a == "--") break;
    if (a == "--help" || a == "-h") {
      std::printf("usage: %s\n\n%s", cmd->usage.c_str(), cmd->help.c_str());
      return kExitOk;
    }
  }
  Output out;
  try {
    Args parsed(rest, cmd->options);
    int rc = cmd->run(parsed, out);
    out.flush();
    return rc;
  } catch (const UsageError& e) {
    return usageError(e.what(), cmd);
  } catch (const TraceError& e) {
    std::fflush(stdout);  // what was printed before the error stays (a damaged stream's prefix)
    if (e.kind() == ErrorKind::Usage) return usageError(e.what(), cmd);
    return fail(exitCodeFor(e.kind()), e.what());
  } catch (const kj::Exception& e) {
    std::fflush(stdout);
    return fail(kExitCorrupt, std::string("trace data does not parse: ") + e.getDescription().cStr());
  } catch (const std::bad_alloc&) {
    return fail(kExitCorrupt, "out of memory reading the trace");
  }
}

}  // namespace
}  // namespace dlrr::tools

int main(int argc, char** argv) {
  try {
    return dlrr::tools::dispatch(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dltrace: internal error: %s\n", dlrr::tools::oneLine(e.what()).c_str());
    return dlrr::kExitInternal;
  } catch (...) {
    std::fprintf(stderr, "dltrace: internal error\n");
    return dlrr::kExitInternal;
  }
}

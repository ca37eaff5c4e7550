#include "cli/exit_codes.h"

#include <cstdio>

#include "core/text.h"

namespace blz::cli {

int ExitCodeFor(Code code) {
  switch (code) {
    case Code::kOk: return kExitOk;
    case Code::kInvalidArgument: return kExitUsage;
    case Code::kUnsupported: return kExitUsage;
    case Code::kNotFound: return kExitNotFound;
    case Code::kCorruption: return kExitCorrupt;
    case Code::kDigestMismatch: return kExitCorrupt;
    case Code::kTooLarge: return kExitCorrupt;
    case Code::kUnauthorized: return kExitUnauthorized;
    case Code::kUnavailable: return kExitUnavailable;
    case Code::kAlreadyExists: return kExitAlreadyExists;
    case Code::kIOError: return kExitIOError;
    case Code::kInternal: return kExitInternal;
  }
  return kExitInternal;
}

std::string ExitCodeHelp() {
  return "Exit codes:\n"
         "  0  ok\n"
         "  1  the check found a difference: diff (A and B differ; --structure-only: the\n"
         "     structures differ), --fail-on-nan (a tensor holds NaN/Inf); else an\n"
         "     internal error\n"
         "  2  usage error, invalid argument or unsupported input\n"
         "  3  not found (file, tag, blob, version)\n"
         "  4  corrupt data (corruption, digest mismatch, length over its cap)\n"
         "  5  unauthorized (missing or rejected token)\n"
         "  6  unavailable: registry unreachable, untrusted (TLS certificate), timed out\n"
         "     or 5xx; serve: the data directory is in use by another server\n"
         "  7  already exists (refusing to overwrite)\n"
         "  8  I/O error\n";
}

int ReportError(const Status& status) {
  // Messages carry untrusted names (paths, tensor names, a server's words): one line, and
  // nothing a terminal would obey.
  std::fprintf(stderr, "blz: error: %s\n", EscapeForTerminal(status.ToString()).c_str());
  std::fflush(stderr);
  return ExitCodeFor(status.code());
}

}  // namespace blz::cli

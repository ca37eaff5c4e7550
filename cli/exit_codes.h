// Process exit codes of the `blz` binary: the ONE place where Status codes become exit codes.
//
//   0 ok
//   1 the check found a difference: `blz diff` (A and B differ; --structure-only: their
//     structures differ) and the gates (`inspect --stats --fail-on-nan`, `push --fail-on-nan`:
//     a tensor holds NaN/Inf), as cmp and `git diff --exit-code` do; otherwise an internal
//     error (a bug) or anything unclassified
//   2 usage: bad command line, invalid argument, unsupported input
//   3 not found (file, tag, blob, version)
//   4 corrupt data: corruption, digest mismatch, a length over its cap
//   5 unauthorized (missing or rejected token)
//   6 unavailable: registry unreachable, untrusted (its TLS certificate does not verify), timed
//     out, or answered 5xx; `blz serve`: its data
//     directory is locked by another server
//   7 already exists (refusing to overwrite an output)
//   8 I/O error (disk or connection failure mid-transfer)
#ifndef BLZ_CLI_EXIT_CODES_H_
#define BLZ_CLI_EXIT_CODES_H_

#include <string>

#include "core/status.h"

namespace blz::cli {

enum ExitCode : int {
  kExitOk = 0,
  kExitInternal = 1,
  kExitDiffers = 1,  // a check found a difference (diff, --fail-on-nan): not an error
  kExitUsage = 2,
  kExitNotFound = 3,
  kExitCorrupt = 4,
  kExitUnauthorized = 5,
  kExitUnavailable = 6,
  kExitAlreadyExists = 7,
  kExitIOError = 8,
};

int ExitCodeFor(Code code);

// The exit-code table for `blz --help`.
std::string ExitCodeHelp();

// Prints "blz: error: <status>" on stderr as one line, control characters escaped
// (core/text.h EscapeForTerminal); returns ExitCodeFor(status.code()).
// REQUIRES: !status.ok().
int ReportError(const Status& status);

}  // namespace blz::cli

#endif  // BLZ_CLI_EXIT_CODES_H_

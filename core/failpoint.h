// Failpoints: named places where a test can make the process die exactly as `kill -9` would,
// to prove that a multi-step operation (a garbage collection, a re-base, a publish) survives a
// crash between two of its steps. Timed kills from outside cannot aim at a window of a few
// microseconds; a failpoint can.
//
// Set BLZ_FAILPOINT to a comma-separated list of names (read once, at the first call). When
// FailPoint(name) is reached with `name` in that list, the process writes one line
// "failpoint NAME: killing the process" to stderr and sends itself SIGKILL: no destructor,
// atexit handler or buffered write runs, as with a real crash. With BLZ_FAILPOINT unset (the
// only sane production setting) a call costs one load of a cached flag.
//
// Names in use (documented with the code that calls them; docs/storage.md "Crash safety"):
//   rebase-after-full-patch  registry/archive_chains.cc, a re-base with the new form computed
//                            and not yet recorded
//   gc-after-forget          registry/garbage_collector.cc, derived rows forgotten, no blob
//                            deleted yet
//   gc-after-first-delete    registry/garbage_collector.cc, one blob deleted, the sweep not done
#ifndef BLZ_CORE_FAILPOINT_H_
#define BLZ_CORE_FAILPOINT_H_

#include <string_view>

namespace blz {

void FailPoint(std::string_view name);

}  // namespace blz

#endif  // BLZ_CORE_FAILPOINT_H_

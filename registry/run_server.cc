// RunServer lives apart from Server so that only binaries that call it link the patcher
// (through PatcherPatchFunction and PatcherFullPatchFunctions).
#include <cstdio>
#include <iostream>
#include <string>

#include "registry/net.h"
#include "registry/server.h"

namespace blz::registry {

Status RunServer(const ServerOptions& options) {
  RegistryOptions ropts;
  ropts.private_mode = options.private_mode;
  ropts.public_url = options.public_url;
  ropts.create_patch = PatcherPatchFunction();
  // Archives are stored as verified full patches, compressed in the background after a push.
  ropts.full_patch = PatcherFullPatchFunctions();
  ropts.storage.cache_bytes = options.cache_bytes;
  ropts.storage.drop_raw_archives = !options.keep_raw_archives;
  ropts.storage.log = [](const std::string& line) {
    std::string l = line + "\n";
    std::fwrite(l.data(), 1, l.size(), stderr);  // one call: lines never interleave
  };
  if (options.verify_storage) {
    // Before the registry opens the directory: nothing is served or compressed meanwhile.
    BLZ_ASSIGN_OR_RETURN(StorageScrubReport scrub,
                         ScrubStorage(options.data_dir, ropts.storage.log));
    char mb[32];
    std::snprintf(mb, sizeof(mb), "%.2f MB", double(scrub.blobs.bytes) / 1e6);
    const std::string line =
        "verify-storage: " + std::to_string(scrub.blobs.blobs) + " blobs (" + mb +
        ") re-hashed, " + std::to_string(scrub.blobs.quarantined.size()) + " damaged (moved to " +
        options.data_dir + "/quarantine), " + std::to_string(scrub.blobs.errors.size()) +
        " unreadable; " + std::to_string(scrub.cache_checked) + " cached archives re-hashed, " +
        std::to_string(scrub.cache_removed.size()) + " damaged (deleted)\n";
    std::fwrite(line.data(), 1, line.size(), stderr);  // one call: lines never interleave
  }
  BLZ_ASSIGN_OR_RETURN(std::unique_ptr<Registry> registry,
                       Registry::Open(options.data_dir, std::move(ropts)));
  // Install the signal handlers before announcing the address, so a supervisor that signals us
  // as soon as it reads "listening on" is handled gracefully.
  net::io_context signals_ioc(1);
  net::signal_set signals(signals_ioc, SIGINT, SIGTERM);
  int received = 0;
  signals.async_wait([&](const beast::error_code& ec, int signo) {
    if (!ec) received = signo;
  });

  BLZ_ASSIGN_OR_RETURN(std::unique_ptr<Server> server,
                       Server::Start(registry.get(), options.listen, options.threads));
  // Created only once binding succeeded, so a failed start never consumes the one-time display.
  BLZ_ASSIGN_OR_RETURN(std::optional<std::string> token, registry->EnsureAdminToken());
  if (token.has_value()) {
    std::cout << "admin token: " << *token << std::endl;  // shown once; only its hash is kept
  }
  std::cout << "listening on " << server->url() << std::endl;

  signals_ioc.run();  // returns once a signal arrived
  std::fprintf(stderr, "signal %d: shutting down\n", received);
  server->Stop();
  return Status::Ok();
}

}  // namespace blz::registry

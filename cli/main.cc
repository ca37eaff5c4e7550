// The `blz` binary: parses the command line (CLI11), runs one command, maps its Status to an
// exit code (cli/exit_codes.h).
#include <csignal>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "core/text.h"

int main(int argc, char** argv) {
  using namespace blz::cli;
  // A peer closing a socket must be an error value, not a fatal signal.
  std::signal(SIGPIPE, SIG_IGN);

  CLI::App app{"blz: a content-addressed model registry and patch distributor for LLM weights",
               "blz"};
  app.set_version_flag("--version", "blz 0.1.0");
  app.require_subcommand(1);
  app.footer(ExitCodeHelp() +
             "\nEnvironment:\n"
             "  BLZ_REGISTRY     default registry for references without a host "
             "(NAME[:TAG])\n"
             "  BLZ_CA_BUNDLE    PEM file of CAs to trust for https:// registries (as "
             "--ca-cert;\n"
             "                   else the CA `blz login --ca-cert` remembered, else the "
             "system store)\n"
             "  BLZ_TOKEN        registry token, overrides `blz login`\n"
             "  BLZ_OFFLINE=1    pull from the local store only, never contact a registry\n"
             "  BLZ_CACHE_DIR    local store for pull/push (else $XDG_CACHE_HOME/blz, "
             "~/.cache/blz)\n"
             "  BLZ_CONFIG_DIR   where auth.json, client.json and certs.d/ live (else\n"
             "                   $XDG_CONFIG_HOME/blz, ~/.config/blz)\n"
             "  XDG_CACHE_HOME, XDG_CONFIG_HOME, HOME   the defaults above\n"
             "  HTTPS_PROXY, HTTP_PROXY, NO_PROXY (and lower case)   proxies, as curl\n"
             "  BLZ_NOW          (tests) the client's clock, Unix seconds\n"
             "\nErrors are printed as one line on stderr: 'blz: error: ...'.\n"
             "Run 'blz COMMAND --help' for a command's options.");

  std::vector<Command> commands;
  AddModelCommands(app, &commands);
  AddIdentityCommands(app, &commands);
  AddRegistryCommands(app, &commands);
  AddManageCommands(app, &commands);
  AddCacheCommands(app, &commands);
  AddTokenCommands(app, &commands);
  AddExportCommands(app, &commands);
  AddDeltaCommands(app, &commands);
  AddAdminCommands(app, &commands);

  // "--progress plain" is accepted as "--progress=plain" (see JoinProgressValues).
  std::vector<std::string> joined = JoinProgressValues(argc, argv);
  std::vector<char*> joined_argv;
  for (std::string& a : joined) joined_argv.push_back(a.data());
  try {
    app.parse(int(joined_argv.size()), joined_argv.data());
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
      return app.exit(e);  // --help, --version
    }
    std::string message = e.what();
    if (argc > 1 && argv[1][0] != '-') {
      bool known = false;
      for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
        known = known || sub->get_name() == argv[1];
      }
      if (!known) message = std::string("unknown command '") + argv[1] + "'";
    }
    std::fprintf(stderr, "blz: error: %s\nRun 'blz --help' for usage.\n",
                 blz::EscapeForTerminal(message).c_str());
    return kExitUsage;
  }

  for (const Command& command : commands) {
    if (!command.app->parsed()) continue;
    try {
      blz::Status status = command.run();
      if (!status.ok()) return ReportError(status);
      return command.exit_code ? *command.exit_code : kExitOk;
    } catch (const std::exception& e) {
      // Library exceptions are supposed to become Status where they enter; this is the net.
      return ReportError(blz::Internal(std::string("unexpected exception: ") + e.what()));
    }
  }
  return ReportError(blz::InvalidArgument("no command given"));
}

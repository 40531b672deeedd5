// The `attn` command-line tool.
//
//   attn walkthrough [SEED]   the seed documents replayed step by step
//   attn --help | --version
//
// Subcommands live in one table (kCommands below): a name, a usage line, a summary and a handler
// that receives the arguments after the subcommand name. New subcommands (train, generate,
// heatmap) are one handler and one table row each.
//
// Exit codes: 0 success, 1 an attn::Error (or any other failure) reported as "attn: error: ...",
// 2 a usage error (unknown command, option or argument). The tool never aborts: every exception
// is caught in cli_main.
//
// Every command also has a parse step that validates its arguments without running anything;
// check_command_line runs the whole command line through those (fuzz/fuzz_cli.cpp: nothing is
// trained, drawn or written).
//
// tests/cpp/test_walkthrough.cpp and fuzz/fuzz_cli.cpp compile this file with ATTN_CLI_NO_MAIN
// defined to call cli_main / check_command_line without a process.
#include <attn/attn.h>
#include <attn/distributed.h>

#include <cctype>
#include <csignal>
#include <exception>
#include <iostream>
#include <new>
#include <ostream>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "chat_cmd.h"
#include "heatmap.h"
#include "hf_cmd.h"
#include "plot_cmd.h"
#include "train.h"
#include "walkthrough.h"

namespace attn::tools {

// Keep in sync with project(attn VERSION ...) in CMakeLists.txt.
inline constexpr const char* kVersion = "0.1.0";

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;

// A mistake in the command line: reported with a hint to --help, exit code 2.
class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& what) : std::runtime_error(what) {}
};

using Args = std::span<const std::string>;

struct Command {
  const char* name;
  const char* usage;    // arguments, e.g. "[SEED]"
  const char* summary;  // one line for the command list
  const char* help;     // further lines for `attn NAME --help`
  int (*run)(Args args, std::ostream& out);
  // Parses and validates `args` as run would, without running anything; throws UsageError (or
  // attn::Error).
  void (*check)(Args args);
};

// A parser that throws FlagError (train.h) as a check entry of the table (UsageError instead).
template <void (*Parser)(Args)>
void check_flags(Args args) {
  try {
    Parser(args);
  } catch (const FlagError& e) {
    throw UsageError(e.what());
  }
}
void parse_train_only(Args args) { (void)parse_train_args(args); }
void parse_generate_only(Args args) { (void)parse_generate_args(args); }
void parse_heatmap_only(Args args) { (void)parse_heatmap_args(args); }
void parse_plot_only(Args args) { (void)parse_plot_args(args); }
void parse_export_only(Args args) { (void)parse_export_args(args); }
void parse_chat_only(Args args) { (void)parse_chat_args(args); }

// ---- attn walkthrough [SEED] --------------------------------------------------------------------

struct WalkthroughArgs {
  std::string seed;   // empty: all seeds
  std::string plots;  // --plots DIR, empty: none
};

WalkthroughArgs parse_walkthrough_args(Args args) {
  std::string seed, plots;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--plots" || arg.rfind("--plots=", 0) == 0) {
      if (arg == "--plots" && i + 1 >= args.size())
        throw UsageError("walkthrough: --plots needs a directory");
      plots = arg == "--plots" ? args[++i] : arg.substr(8);
      if (plots.empty()) throw UsageError("walkthrough: --plots needs a directory");
      continue;
    }
    if (arg.size() > 1 && arg[0] == '-')
      throw UsageError("walkthrough: unknown option '" + arg + "'");
    if (!seed.empty())
      throw UsageError("walkthrough: expected at most one SEED, got '" + seed + "' and '" + arg +
                       "'");
    bool known = false;
    for (const SeedInfo& s : walkthrough_seeds()) known = known || s.id == arg;
    if (!known) {
      std::string ids;
      for (const SeedInfo& s : walkthrough_seeds()) ids += " " + s.id;
      throw UsageError("walkthrough: unknown seed '" + arg + "' (expected one of" + ids + ")");
    }
    seed = arg;
  }
  return {seed, plots};
}

void parse_walkthrough_only(Args args) { (void)parse_walkthrough_args(args); }

int cmd_walkthrough(Args args, std::ostream& out) {
  const WalkthroughArgs a = parse_walkthrough_args(args);
  run_walkthrough(a.seed, out, a.plots);
  return kExitOk;
}

// ---- the command table --------------------------------------------------------------------------

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"walkthrough", "[SEED]", "replay the seed documents step by step, computed live by attn",
       "  SEED is one of 000 001 002 003 004; without it all five are printed in order.\n"
       "  Each step gives a one-line explanation and its result printed as PyTorch prints it.\n"
       "  --plots DIR also writes a heatmap PNG of every attention-weights matrix shown to DIR\n"
       "  (e.g. DIR/seed003_causal_weights.png); the printed text is unchanged.\n",
       cmd_walkthrough, parse_walkthrough_only},
      {"train", kTrainUsage, kTrainSummary, kTrainHelp, run_command<UsageError, train_command>,
       check_flags<parse_train_only>},
      {"generate", kGenerateUsage, kGenerateSummary, kGenerateHelp,
       run_command<UsageError, generate_command>, check_flags<parse_generate_only>},
      {"export", kExportUsage, kExportSummary, kExportHelp, run_command<UsageError, export_command>,
       check_flags<parse_export_only>},
      {"chat", kChatUsage, kChatSummary, kChatHelp, run_command<UsageError, chat_command>,
       check_flags<parse_chat_only>},
      {"heatmap", kHeatmapUsage, kHeatmapSummary, kHeatmapHelp,
       run_command<UsageError, heatmap_command>, check_flags<parse_heatmap_only>},
      {"plot", kPlotUsage, kPlotSummary, kPlotHelp, run_command<UsageError, plot_command>,
       check_flags<parse_plot_only>},
  };
  return table;
}

const Command* find_command(std::string_view name) {
  for (const Command& c : commands())
    if (name == c.name) return &c;
  return nullptr;
}

void print_usage(std::ostream& os) {
  os << "usage: attn <command> [arguments]\n"
        "       attn --help | --version\n"
        "\n"
        "attn is a C++ attention library; this tool shows it at work.\n"
        "\n"
        "commands:\n";
  for (const Command& c : commands()) {
    std::string left = std::string(c.name) + " " + c.usage;
    if (left.size() < 22)
      os << "  " << left << std::string(22 - left.size(), ' ') << c.summary << "\n";
    else  // a long usage line: the summary goes under it, in the summary column
      os << "  " << left << "\n" << std::string(24, ' ') << c.summary << "\n";
  }
  os << "\n"
        "options:\n"
        "  -h, --help            show this help (or `attn <command> --help`) and exit\n"
        "  --version             print the version and exit\n";
}

void print_command_help(const Command& c, std::ostream& os) {
  std::string summary = c.summary;
  if (!summary.empty()) summary[0] = char(std::toupper(static_cast<unsigned char>(summary[0])));
  os << "usage: attn " << c.name << " " << c.usage << "\n\n" << summary << ".\n" << c.help;
}

// Runs the command line, or with `check_only` parses the command's arguments without running it
// (help and version are printed either way).
int dispatch(Args args, std::ostream& out, bool check_only = false) {
  if (args.empty()) throw UsageError("no command given");
  const std::string& first = args[0];
  if (first == "-h" || first == "--help" || first == "help") {
    if (args.size() == 1) {
      print_usage(out);
      return kExitOk;
    }
    const Command* c = find_command(args[1]);
    if (!c || args.size() > 2) throw UsageError("help: unknown command '" + args[1] + "'");
    print_command_help(*c, out);
    return kExitOk;
  }
  if (first == "--version") {
    if (args.size() > 1) throw UsageError("--version takes no arguments");
    out << "attn " << kVersion << "\n";
    return kExitOk;
  }
  const Command* c = find_command(first);
  if (!c) {
    if (first.size() > 1 && first[0] == '-') throw UsageError("unknown option '" + first + "'");
    throw UsageError("unknown command '" + first + "'");
  }
  Args rest = args.subspan(1);
  for (const std::string& arg : rest) {
    if (arg == "-h" || arg == "--help") {
      print_command_help(*c, out);
      return kExitOk;
    }
  }
  if (check_only) {
    c->check(rest);
    return kExitOk;
  }
  return c->run(rest, out);
}

// The command line as cli_main would see it, parsed and validated down to the command's flags but
// not run. Returns 0 or throws UsageError (attn::Error for a failure that is not a usage mistake).
int check_command_line(Args args, std::ostream& out) { return dispatch(args, out, true); }

// Runs `body`, turning every exception into a message on `err` and an exit code.
template <typename F>
int guarded(F&& body, std::ostream& err) {
  try {
    return body();
  } catch (const UsageError& e) {
    err << "attn: " << e.what() << "\n"
        << "Try 'attn --help' for more information.\n";
    return kExitUsage;
  } catch (const Error& e) {
    err << "attn: error: " << e.what() << "\n";
    return kExitError;
  } catch (const std::bad_alloc& e) {  // an allocation outside attn's tensors and kernels
    err << "attn: error: out of memory (" << e.what() << ")\n";
    return kExitError;
  } catch (const std::exception& e) {
    err << "attn: error: " << e.what() << "\n";
    return kExitError;
  } catch (...) {
    err << "attn: error: unknown exception\n";
    return kExitError;
  }
}

// The whole tool: `args` are the arguments after the program name.
int cli_main(Args args, std::ostream& out, std::ostream& err) {
  int code = guarded([&] { return dispatch(args, out); }, err);
  // Under mpirun, a rank that failed ends every rank now: the others may be waiting for it in a
  // collective (they print that the launcher stopped them).
  if (code != kExitOk && distributed::is_initialized() && distributed::world_size() > 1) {
    err.flush();
    distributed::abort_job("stopping every rank after the error above", code);
  }
  out.flush();
  if (!out) {
    err << "attn: error: could not write the output\n";
    return kExitError;
  }
  return code;
}

}  // namespace attn::tools

#ifndef ATTN_CLI_NO_MAIN
int main(int argc, char** argv) {
  // A file size limit (ulimit -f) reached while writing must fail the write (EFBIG, reported with
  // the file's name, the old file kept) rather than kill the process with SIGXFSZ and a core.
  std::signal(SIGXFSZ, SIG_IGN);
  std::vector<std::string> args(argv + (argc > 0 ? 1 : 0), argv + argc);
  return attn::tools::cli_main(args, std::cout, std::cerr);
}
#endif

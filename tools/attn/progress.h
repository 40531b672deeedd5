// A progress bar for long loops (`attn train`).
//
// On a terminal it redraws one line in place ("\r", then the line, then "\x1b[K" to clear the
// rest):
//
//   [#########.....................] 600/2000  30% loss 2.3456 | 12.3k tok/s | ETA 1m23s
//
// at most about 10 times a second (the last step is always drawn). Elsewhere (a log file, a pipe)
// it prints a plain line every `log_every` steps and on the last step:
//
//   step 600/2000 loss 2.3456 | 12.3k tok/s | ETA 1m23s
//
// The ETA comes from a moving average of the step rate (time-weighted, a few seconds long). When
// the last step is reached the ETA is replaced by the total time: "| done in 4m10s".
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <utility>

namespace attn::tools {

// "45s", "1m23s", "2h05m" (rounded to whole seconds; "?" for a negative or non-finite value).
std::string format_duration(double seconds);
// Three significant digits with a k/M/G/T suffix: "950", "95.0", "9.50", "12.3k", "1.20M".
// "?" for a negative or non-finite value.
std::string format_rate(double per_s);
// True only for std::cout, std::cerr or std::clog when that file descriptor is a terminal.
bool is_tty(std::ostream& out);

class ProgressBar {
 public:
  // Seconds on a monotonic clock; the default reads std::chrono::steady_clock.
  using Clock = std::function<double()>;

  static constexpr int kBarWidth = 30;
  static constexpr double kMinRedrawSeconds = 0.1;

  // total >= 1 steps. log_every <= 0 picks max(1, total / 20). Throws attn::Error on a bad total.
  ProgressBar(int64_t total, std::ostream& out, bool tty, int64_t log_every = 0, Clock clock = {});
  ~ProgressBar();  // finish()
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // Reports that `step` (0..total) steps are done; `fields` is shown after the counts, e.g.
  // "loss 2.3456 | 12.3k tok/s". Throws attn::Error for a step outside 0..total.
  void update(int64_t step, const std::string& fields = "");
  // Prints a whole line without corrupting the bar: on a terminal the bar is cleared, the line
  // printed and the bar drawn again below it.
  void message(const std::string& line);
  // Ends the bar's line (on a terminal: draws the latest state if a redraw was throttled, then a
  // newline). Idempotent; a later update() starts a new bar line.
  void finish();

  // The text update() would show now, without "\r" or escape codes (for tests and logs).
  std::string line() const;
  // The moving step rate in steps per second (0 until it is known).
  double rate() const { return rate_; }

 private:
  void draw();

  int64_t total_;
  std::ostream& out_;
  bool tty_;
  int64_t log_every_;
  Clock clock_;
  double start_ = 0;
  int64_t step_ = 0;
  std::string fields_;
  // Rate estimate.
  double rate_ = 0;
  bool have_rate_ = false;
  double last_t_ = 0;
  int64_t last_step_ = 0;
  double now_ = 0;  // time of the latest update
  // Terminal state.
  bool bar_open_ = false;  // a bar line is on screen (no newline after it yet)
  bool dirty_ = false;     // the latest state has not been drawn
  double last_draw_ = -1e300;
  int64_t last_logged_ = -1;
};

}  // namespace attn::tools

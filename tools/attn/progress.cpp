// The progress bar of `attn train`; see progress.h.
#include "progress.h"

#include <attn/common.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>

namespace attn::tools {

namespace {

// Time constant of the moving step rate, in seconds.
constexpr double kRateTau = 5.0;

double steady_seconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0 || seconds >= 9e15) return "?";
  const long long t = std::llround(seconds);
  char buf[64];
  if (t < 60)
    std::snprintf(buf, sizeof buf, "%llds", t);
  else if (t < 3600)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", t / 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", t / 3600, (t % 3600) / 60);
  return buf;
}

std::string format_rate(double per_s) {
  if (!std::isfinite(per_s) || per_s < 0) return "?";
  if (per_s == 0) return "0";
  static constexpr const char* kSuffix[] = {"", "k", "M", "G", "T", "P"};
  char buf[64];
  double x = per_s;
  for (int u = 0; u < 6; ++u, x /= 1000) {
    // Thresholds are where rounding to 3 significant digits carries into the next width.
    if (x < 9.995)
      std::snprintf(buf, sizeof buf, "%.2f%s", x, kSuffix[u]);
    else if (x < 99.95)
      std::snprintf(buf, sizeof buf, "%.1f%s", x, kSuffix[u]);
    else if (x < 999.5 || u == 5)
      std::snprintf(buf, sizeof buf, "%.0f%s", x, kSuffix[u]);
    else
      continue;
    return buf;
  }
  return "?";  // unreachable
}

bool is_tty(std::ostream& out) {
  if (&out == &std::cout) return ::isatty(STDOUT_FILENO) == 1;
  if (&out == &std::cerr || &out == &std::clog) return ::isatty(STDERR_FILENO) == 1;
  return false;
}

ProgressBar::ProgressBar(int64_t total, std::ostream& out, bool tty, int64_t log_every, Clock clock)
    : total_(total), out_(out), tty_(tty), clock_(std::move(clock)) {
  if (total < 1)
    throw Error("[ProgressBar] total must be at least 1, got " + std::to_string(total));
  log_every_ = log_every > 0 ? log_every : std::max<int64_t>(1, total / 20);
  if (!clock_) clock_ = steady_seconds;
  start_ = clock_();
  last_t_ = start_;
  now_ = start_;
}

ProgressBar::~ProgressBar() {
  try {
    finish();
  } catch (...) {
  }
}

void ProgressBar::update(int64_t step, const std::string& fields) {
  if (step < 0 || step > total_)
    throw Error("[ProgressBar::update] step " + std::to_string(step) + " is outside 0.." +
                std::to_string(total_));
  const double now = clock_();
  now_ = now;
  const double dt = now - last_t_;
  if (step < last_step_) {  // restarted: measure from here
    last_step_ = step;
    last_t_ = now;
  } else if (dt > 0) {
    const double inst = double(step - last_step_) / dt;
    if (!have_rate_) {
      rate_ = inst;
      have_rate_ = true;
    } else {
      rate_ += (1 - std::exp(-dt / kRateTau)) * (inst - rate_);
    }
    last_step_ = step;
    last_t_ = now;
  }  // dt <= 0: the steps are counted at the next update with a later time
  step_ = step;
  fields_ = fields;
  if (tty_) {
    dirty_ = true;
    if (!bar_open_ || step == total_ || now - last_draw_ >= kMinRedrawSeconds) draw();
  } else if (step > 0 && step != last_logged_ && (step % log_every_ == 0 || step == total_)) {
    out_ << line() << '\n' << std::flush;
    last_logged_ = step;
  }
}

std::string ProgressBar::line() const {
  std::ostringstream os;
  if (tty_) {
    const int64_t filled = step_ * kBarWidth / total_;
    os << '[' << std::string(std::size_t(filled), '#')
       << std::string(std::size_t(kBarWidth - filled), '.') << "] ";
    char pct[16];
    std::snprintf(pct, sizeof pct, "%3d%%", int(step_ * 100 / total_));
    os << step_ << '/' << total_ << ' ' << pct;
  } else {
    os << "step " << step_ << '/' << total_;
  }
  if (!fields_.empty()) os << ' ' << fields_;
  if (step_ >= total_)
    os << " | done in " << format_duration(now_ - start_);
  else if (have_rate_ && rate_ > 0)
    os << " | ETA " << format_duration(double(total_ - step_) / rate_);
  else
    os << " | ETA ?";
  return os.str();
}

void ProgressBar::draw() {
  out_ << '\r' << line() << "\x1b[K" << std::flush;
  bar_open_ = true;
  dirty_ = false;
  last_draw_ = now_;
}

void ProgressBar::message(const std::string& text) {
  if (tty_ && bar_open_) {
    out_ << "\r\x1b[K" << text << '\n';
    draw();
  } else {
    out_ << text << '\n' << std::flush;
  }
}

void ProgressBar::finish() {
  if (tty_) {
    if (!bar_open_) return;
    if (dirty_) draw();
    out_ << '\n' << std::flush;
    bar_open_ = false;
  } else if (step_ > 0 && step_ != last_logged_) {
    out_ << line() << '\n' << std::flush;
    last_logged_ = step_;
  }
}

}  // namespace attn::tools

// Tests for the `attn train` progress bar (tools/attn/progress.h): exact output in terminal and log
// modes with an injected clock, the ETA's moving rate, throttling, message(), and the formatters.
#include <attn/common.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>

#include "../../tools/attn/progress.h"

namespace attn::tools {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

struct FakeClock {
  double t = 0;
  ProgressBar::Clock fn() {
    return [this] { return t; };
  }
};

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) ++n;
  return n;
}

std::string bar(int filled) {
  return "[" + std::string(std::size_t(filled), '#') + std::string(std::size_t(30 - filled), '.') +
         "]";
}

TEST(ProgressFormat, Duration) {
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(0.4), "0s");
  EXPECT_EQ(format_duration(45), "45s");
  EXPECT_EQ(format_duration(59.4), "59s");
  EXPECT_EQ(format_duration(59.6), "1m00s");
  EXPECT_EQ(format_duration(83), "1m23s");
  EXPECT_EQ(format_duration(3599), "59m59s");
  EXPECT_EQ(format_duration(3600), "1h00m");
  EXPECT_EQ(format_duration(7500), "2h05m");
  EXPECT_EQ(format_duration(100 * 3600 + 59), "100h00m");
  EXPECT_EQ(format_duration(-1), "?");
  EXPECT_EQ(format_duration(kNaN), "?");
  EXPECT_EQ(format_duration(kInf), "?");
  EXPECT_EQ(format_duration(1e300), "?");
}

TEST(ProgressFormat, Rate) {
  EXPECT_EQ(format_rate(0), "0");
  EXPECT_EQ(format_rate(0.5), "0.50");
  EXPECT_EQ(format_rate(9.994), "9.99");
  EXPECT_EQ(format_rate(9.996), "10.0");
  EXPECT_EQ(format_rate(95), "95.0");
  EXPECT_EQ(format_rate(950), "950");
  EXPECT_EQ(format_rate(999.4), "999");
  EXPECT_EQ(format_rate(999.6), "1.00k");
  EXPECT_EQ(format_rate(12345), "12.3k");
  EXPECT_EQ(format_rate(123456), "123k");
  EXPECT_EQ(format_rate(1.2e6), "1.20M");
  EXPECT_EQ(format_rate(3.5e9), "3.50G");
  EXPECT_EQ(format_rate(5e18), "5000P");
  EXPECT_EQ(format_rate(-1), "?");
  EXPECT_EQ(format_rate(kNaN), "?");
  EXPECT_EQ(format_rate(kInf), "?");
}

TEST(ProgressBar, IsTtyOnlyForStandardStreams) {
  std::ostringstream os;
  EXPECT_FALSE(is_tty(os));
  // std::cout / std::cerr follow isatty(); under ctest they are pipes, but only assert consistency.
  EXPECT_EQ(is_tty(std::cout), ::isatty(1) == 1);
  EXPECT_EQ(is_tty(std::cerr), ::isatty(2) == 1);
}

TEST(ProgressBar, TerminalLineAndThrottle) {
  FakeClock clk;
  std::ostringstream os;
  ProgressBar pb(100, os, true, 0, clk.fn());
  clk.t = 1.0;
  pb.update(10, "loss 2.3456 | 12.3k tok/s");  // 10 steps/s -> 90 steps left = 9s
  EXPECT_EQ(os.str(), "\r" + bar(3) + " 10/100  10% loss 2.3456 | 12.3k tok/s | ETA 9s\x1b[K");
  EXPECT_EQ(pb.line(), bar(3) + " 10/100  10% loss 2.3456 | 12.3k tok/s | ETA 9s");
  // Within 0.1 s of the last redraw: nothing drawn.
  os.str("");
  clk.t = 1.05;
  pb.update(11, "loss 2.3");
  EXPECT_EQ(os.str(), "");
  clk.t = 1.09;
  pb.update(12, "loss 2.2");
  EXPECT_EQ(os.str(), "");
  // 0.1 s after the last redraw: drawn, with the latest fields.
  clk.t = 1.1;
  pb.update(13, "loss 2.1");
  EXPECT_EQ(count(os.str(), "\r"), 1u);
  EXPECT_NE(os.str().find(" 13/100  13% loss 2.1 | ETA "), std::string::npos) << os.str();
  EXPECT_EQ(os.str().substr(os.str().size() - 3), "\x1b[K");
  // The last step is drawn even right after a redraw, with the total time instead of an ETA.
  os.str("");
  clk.t = 1.11;
  pb.update(100, "loss 1.0");
  EXPECT_EQ(os.str(), "\r" + bar(30) + " 100/100 100% loss 1.0 | done in 1s\x1b[K");
  os.str("");
  pb.finish();
  EXPECT_EQ(os.str(), "\n");
  pb.finish();  // idempotent
  EXPECT_EQ(os.str(), "\n");
}

TEST(ProgressBar, RedrawRateIsBounded) {
  FakeClock clk;
  std::ostringstream os;
  ProgressBar pb(100000, os, true, 0, clk.fn());
  for (int i = 1; i <= 10000; ++i) {  // 10000 steps over 10 s
    clk.t = i * 0.001;
    pb.update(i);
  }
  const std::size_t draws = count(os.str(), "\r");
  EXPECT_GE(draws, 95u);
  EXPECT_LE(draws, 101u);
}

TEST(ProgressBar, FinishDrawsAThrottledState) {
  FakeClock clk;
  std::ostringstream os;
  ProgressBar pb(50, os, true, 0, clk.fn());
  clk.t = 1;
  pb.update(5);
  clk.t = 1.01;
  pb.update(6, "x");
  os.str("");
  pb.finish();
  EXPECT_EQ(os.str(), "\r" + bar(3) + " 6/50  12% x | ETA " +
                          pb.line().substr(pb.line().rfind("ETA ") + 4) + "\x1b[K\n");
  // A new update after finish() starts a new bar line.
  os.str("");
  clk.t = 2;
  pb.update(7);
  EXPECT_EQ(os.str().substr(0, 1), "\r");
}

TEST(ProgressBar, EtaFollowsAMovingRate) {
  FakeClock clk;
  std::ostringstream os;
  ProgressBar pb(10000, os, true, 0, clk.fn());
  // A steady 100 steps/s: the ETA is exact.
  for (int i = 1; i <= 50; ++i) {
    clk.t = i * 0.2;
    pb.update(i * 20);
  }
  EXPECT_NEAR(pb.rate(), 100.0, 1e-9);
  EXPECT_NE(pb.line().find("| ETA 1m30s"), std::string::npos) << pb.line();  // 9000 / 100
  // The rate doubles: the estimate moves towards 200 steps/s gradually, not at once.
  int64_t step = 1000;
  double prev = pb.rate();
  for (int i = 1; i <= 5; ++i) {
    clk.t += 0.2;
    step += 40;
    pb.update(step);
    EXPECT_GT(pb.rate(), prev);
    EXPECT_LT(pb.rate(), 200.0);
    prev = pb.rate();
  }
  for (int i = 0; i < 190; ++i) {  // 38 s later it has converged
    clk.t += 0.2;
    step += 40;
    pb.update(step);
  }
  EXPECT_NEAR(pb.rate(), 200.0, 0.5);
  // Updates at the same instant do not divide by zero; the steps count at the next update.
  const double r = pb.rate();
  pb.update(step + 10);
  EXPECT_EQ(pb.rate(), r);
  EXPECT_TRUE(std::isfinite(pb.rate()));
}

TEST(ProgressBar, EtaUnknownBeforeTimePasses) {
  FakeClock clk;
  std::ostringstream os;
  ProgressBar pb(10, os, false, 1, clk.fn());
  pb.update(1, "a");  // no time has passed
  EXPECT_EQ(os.str(), "step 1/10 a | ETA ?\n");
}

TEST(ProgressBar, MessageKeepsTheBarIntact) {
  FakeClock clk;
  std::ostringstream os;
  ProgressBar pb(20, os, true, 0, clk.fn());
  pb.message("before any bar");
  EXPECT_EQ(os.str(), "before any bar\n");
  os.str("");
  clk.t = 2;
  pb.update(4, "loss 3.0");  // 2 steps/s, 16 left = 8s
  const std::string drawn = "\r" + bar(6) + " 4/20  20% loss 3.0 | ETA 8s\x1b[K";
  EXPECT_EQ(os.str(), drawn);
  os.str("");
  pb.message("step 4: val loss 3.1");
  EXPECT_EQ(os.str(), "\r\x1b[Kstep 4: val loss 3.1\n" + drawn);
  pb.finish();
  os.str("");
  pb.message("after");
  EXPECT_EQ(os.str(), "after\n");
}

TEST(ProgressBar, LogModeLines) {
  FakeClock clk;
  std::ostringstream os;
  ProgressBar pb(100, os, false, 0, clk.fn());  // log_every = 100 / 20 = 5
  for (int i = 1; i <= 100; ++i) {
    clk.t = i * 0.2;  // 5 steps/s
    pb.update(i, "loss " + std::to_string(i));
  }
  const std::string out = os.str();
  EXPECT_EQ(count(out, "\n"), 20u);
  EXPECT_EQ(count(out, "\r"), 0u);
  EXPECT_EQ(count(out, "\x1b"), 0u);
  EXPECT_EQ(out.substr(0, out.find('\n') + 1), "step 5/100 loss 5 | ETA 19s\n");
  EXPECT_NE(out.find("step 50/100 loss 50 | ETA 10s\n"), std::string::npos) << out;
  EXPECT_EQ(out.substr(out.rfind("step ")), "step 100/100 loss 100 | done in 20s\n");
  pb.message("saved checkpoint");
  EXPECT_EQ(os.str().substr(out.size()), "saved checkpoint\n");
  os.str("");
  pb.finish();  // the last step was already logged
  EXPECT_EQ(os.str(), "");
}

TEST(ProgressBar, LogModeCustomIntervalAndEarlyStop) {
  FakeClock clk;
  std::ostringstream os;
  ProgressBar pb(1000, os, false, 300, clk.fn());
  for (int i = 1; i <= 700; ++i) {
    clk.t = i * 0.01;
    pb.update(i);
  }
  EXPECT_EQ(count(os.str(), "\n"), 2u);  // 300, 600
  EXPECT_EQ(os.str().substr(0, 13), "step 300/1000");
  os.str("");
  pb.finish();  // stopped early: the final state is logged once
  EXPECT_EQ(os.str(), "step 700/1000 | ETA 3s\n");
  pb.finish();
  EXPECT_EQ(os.str(), "step 700/1000 | ETA 3s\n");
  // A tiny total: every step is logged.
  std::ostringstream small;
  ProgressBar one(3, small, false, 0, clk.fn());
  one.update(1);
  one.update(2);
  one.update(3);
  EXPECT_EQ(count(small.str(), "\n"), 3u);
}

TEST(ProgressBar, Errors) {
  std::ostringstream os;
  EXPECT_THROW(ProgressBar(0, os, true), Error);
  EXPECT_THROW(ProgressBar(-5, os, false), Error);
  ProgressBar pb(10, os, false);
  EXPECT_THROW(pb.update(-1), Error);
  EXPECT_THROW(pb.update(11), Error);
  try {
    pb.update(12);
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "[ProgressBar::update] step 12 is outside 0..10");
  }
  EXPECT_NO_THROW(pb.update(10));  // the default clock works
}

}  // namespace
}  // namespace attn::tools

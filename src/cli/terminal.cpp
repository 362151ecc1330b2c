// The real process behind Deps: standard streams, environment, termios prompts without
// echo, the Beast transport, the monotonic clock and random idempotency keys.
#include <signal.h>
#include <termios.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "cli/app.h"

namespace gpucloud::cli {

namespace {

struct termios g_saved_termios;
volatile sig_atomic_t g_echo_off = 0;
volatile sig_atomic_t g_interrupted = 0;

void note_interrupt(int) { g_interrupted = 1; }

// SA_RESTART: a request in flight when Ctrl-C comes finishes; the view then ends.
void trap_sigint() {
  struct sigaction handler {};
  handler.sa_handler = note_interrupt;
  sigemptyset(&handler.sa_mask);
  handler.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &handler, nullptr);
}

void restore_echo_and_reraise(int sig) {
  if (g_echo_off) ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &g_saved_termios);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

std::optional<std::string> terminal_prompt(const std::string& prompt, bool secret) {
  std::cerr << prompt << std::flush;
  bool echo_off = false;
  struct sigaction old_int {}, old_term {}, handler {};
  if (secret && ::isatty(STDIN_FILENO) && ::tcgetattr(STDIN_FILENO, &g_saved_termios) == 0) {
    handler.sa_handler = restore_echo_and_reraise;
    sigemptyset(&handler.sa_mask);
    ::sigaction(SIGINT, &handler, &old_int);
    ::sigaction(SIGTERM, &handler, &old_term);
    struct termios quiet = g_saved_termios;
    quiet.c_lflag &= ~static_cast<tcflag_t>(ECHO);
    quiet.c_lflag |= ECHONL;
    g_echo_off = 1;
    echo_off = ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet) == 0;
  }
  std::string line;
  bool got = static_cast<bool>(std::getline(std::cin, line));
  if (echo_off || g_echo_off) {
    ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &g_saved_termios);
    g_echo_off = 0;
    ::sigaction(SIGINT, &old_int, nullptr);
    ::sigaction(SIGTERM, &old_term, nullptr);
  }
  if (!got) {
    std::cerr << "\n";
    return std::nullopt;
  }
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

std::string random_hex(std::size_t bytes) {
  std::string raw(bytes, '\0');
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  if (!urandom.read(raw.data(), static_cast<std::streamsize>(bytes))) {
    std::random_device rd;
    for (auto& c : raw) c = static_cast<char>(rd());
  }
  std::string out;
  for (unsigned char c : raw) out += fmt::format("{:02x}", c);
  return out;
}

std::chrono::milliseconds request_timeout() {
  if (const char* v = std::getenv("GPUCLOUD_TIMEOUT"); v != nullptr && *v != '\0') {
    char* end = nullptr;
    long seconds = std::strtol(v, &end, 10);
    if (end != nullptr && *end == '\0' && seconds > 0 && seconds <= 86400) {
      return std::chrono::seconds(seconds);
    }
  }
  return std::chrono::seconds(60);
}

}  // namespace

Deps system_deps() {
  Deps deps;
  deps.in = &std::cin;
  deps.out = &std::cout;
  deps.err = &std::cerr;
  deps.env = [](std::string_view name) -> std::optional<std::string> {
    const char* v = std::getenv(std::string(name).c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
  deps.connect = [](const Endpoint& endpoint) {
    return make_http_transport(endpoint, request_timeout());
  };
  deps.stdin_is_tty = [] { return ::isatty(STDIN_FILENO) == 1; };
  deps.stderr_is_tty = [] { return ::isatty(STDERR_FILENO) == 1; };
  deps.stdout_is_tty = [] { return ::isatty(STDOUT_FILENO) == 1; };
  deps.trap_interrupt = trap_sigint;
  deps.interrupted = [] { return g_interrupted != 0; };
  deps.prompt = terminal_prompt;
  deps.sleep = [](std::chrono::milliseconds d) { std::this_thread::sleep_for(d); };
  deps.now = [] { return std::chrono::steady_clock::now(); };
  deps.random_key = [] { return random_hex(16); };
  return deps;
}

}  // namespace gpucloud::cli

// `attn chat` (see chat_cmd.h).
#include "chat_cmd.h"

#include <attn/attn.h>
#include <attn/chat_template.h>
#include <attn/hf_decoder.h>
#include <attn/io.h>
#include <attn/tokenizer.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <limits>
#include <set>

#include "flags.h"
#include "hf_cmd.h"
#include "train.h"

namespace attn::tools {

namespace {

namespace fs = std::filesystem;
constexpr double kInf = std::numeric_limits<double>::infinity();

data::ChatTemplate::Config load_template(const fs::path& dir) {
  std::error_code ec;
  const fs::path config = dir / "tokenizer_config.json", jinja = dir / "chat_template.jinja";
  if (fs::exists(jinja, ec)) {
    data::ChatTemplate::Config c{data::ChatTemplate(io::read_file(jinja.string()), jinja.string()),
                                 "", ""};
    if (fs::exists(config, ec)) {  // the special tokens still come from tokenizer_config.json
      try {
        const auto t = data::ChatTemplate::from_tokenizer_config(config.string());
        c.bos_token = t.bos_token, c.eos_token = t.eos_token;
      } catch (const Error&) {
      }
    }
    return c;
  }
  if (!fs::exists(config, ec))
    throw Error("[chat] '" + dir.string() +
                "' has neither tokenizer_config.json nor chat_template.jinja (no chat template)");
  return data::ChatTemplate::from_tokenizer_config(config.string());
}

}  // namespace

ChatArgs parse_chat_args(std::span<const std::string> args) {
  Flags f("chat", args,
          {"ckpt", "system", "max-new-tokens", "temperature", "top-k", "top-p", "min-p",
           "repetition-penalty", "stop", "seed", "threads", "dtype"},
          {});
  if (!f.has("ckpt")) throw FlagError("chat: --ckpt DIR is required");
  ChatArgs a;
  a.ckpt = f.str("ckpt", "");
  if (a.ckpt.empty()) f.bad("ckpt", "", "a Hugging Face model directory");
  a.system = f.str("system", "");
  a.options.max_new_tokens = f.integer("max-new-tokens", 512, 1);
  a.options.temperature = f.number("temperature", 0.7, 0.0, false, kInf, false);
  a.options.top_k = f.integer("top-k", 0, 0);
  a.options.top_p = f.number("top-p", 1.0, 0.0, true, 1.0, false);
  a.options.min_p = f.number("min-p", 0.0, 0.0, false, 1.0, false);
  a.options.repetition_penalty = f.number("repetition-penalty", 1.0, 0.0, true, kInf, false);
  a.stop = f.str("stop", "");
  a.seed = f.seed("seed", 1337);
  a.threads = f.integer("threads", 0, 0, 4096);
  a.dtype = parse_model_dtype(f);
  return a;
}

int chat_session(const ChatArgs& a, std::istream& in, std::ostream& out, std::ostream& err) {
  const fs::path dir(a.ckpt);
  std::error_code ec;
  if (!fs::exists(dir / "tokenizer.json", ec))
    throw Error("[chat] '" + dir.string() + "' has no tokenizer.json");
  const data::Tokenizer tok = data::Tokenizer::from_file((dir / "tokenizer.json").string());
  const data::ChatTemplate::Config tmpl = load_template(dir);
  const std::shared_ptr<nn::Decoder> model = nn::load_hf_decoder(a.ckpt, a.dtype);
  const nn::DecoderConfig& config = model->config();
  std::set<int64_t> stops = hf_eos_token_ids(dir, "chat");
  if (!tmpl.eos_token.empty())
    if (auto id = tok.token_to_id(tmpl.eos_token)) stops.insert(*id);
  ThreadsGuard threads_guard(a.threads);
  Generator gen(a.seed);
  const bool interactive = &in == &std::cin && ::isatty(0);

  std::vector<data::ChatMessage> messages;
  if (!a.system.empty()) messages.push_back({"system", a.system});
  nn::DecoderCache cache;
  std::vector<int64_t> cached;  // the tokens whose keys and values the cache holds
  std::string line;
  while (true) {
    if (interactive) out << "> " << std::flush;
    if (!std::getline(in, line)) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      messages.resize(a.system.empty() ? 0 : 1);
      cache = nn::DecoderCache{};
      cached.clear();
      out << "(the conversation starts over)\n" << std::flush;
      continue;
    }
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    messages.push_back({"user", line});
    const std::string prompt =
        tmpl.chat_template.apply(messages, true, tmpl.bos_token, tmpl.eos_token);
    std::vector<int64_t> ids = tok.encode(prompt, false);  // the template holds the specials
    if (int64_t(ids.size()) + 1 > config.max_position_embeddings)
      throw Error("[chat] the conversation is " + std::to_string(ids.size()) +
                  " tokens, the model's max_position_embeddings " +
                  std::to_string(config.max_position_embeddings) + ": /reset to start over");
    // Keep the cache where the new rendering extends what it holds; feed the rest.
    std::size_t common = 0;
    while (common < cached.size() && common < ids.size() && cached[common] == ids[common]) ++common;
    if (common == ids.size()) --common;  // at least one token to feed
    cache.length = int64_t(common);
    cached.assign(ids.begin(), ids.begin() + std::ptrdiff_t(common));
    std::vector<int64_t> feed(ids.begin() + std::ptrdiff_t(common), ids.end());
    std::vector<int64_t> history = ids, reply;
    std::string printed;
    const auto t0 = std::chrono::steady_clock::now();
    bool stopped_by_text = false;
    for (int64_t step = 0; step < a.options.max_new_tokens; ++step) {
      if (int64_t(cached.size() + feed.size()) > config.max_position_embeddings) break;
      Tensor x = empty({1, int64_t(feed.size())}, Dtype::Int64);
      std::copy(feed.begin(), feed.end(), x.data_ptr<int64_t>());
      Tensor logits = model->forward_cached(x, cache);
      cached.insert(cached.end(), feed.begin(), feed.end());
      logits = logits.select(1, logits.size(1) - 1).contiguous();
      const int64_t next = nn::sample_next_token(logits.data_ptr<float>(), config.vocab_size,
                                                 a.options, history, gen);
      if (stops.count(next)) break;
      history.push_back(next);
      reply.push_back(next);
      feed.assign(1, next);
      std::string text = tok.decode(reply, true);
      if (!a.stop.empty()) {
        const std::size_t at = text.find(a.stop);
        if (at != std::string::npos) {
          text.resize(at);
          stopped_by_text = true;
        }
      }
      if (text.compare(0, printed.size(), printed) == 0 &&
          !text.ends_with("\xEF\xBF\xBD")) {  // settled: print what is new
        out << text.substr(printed.size()) << std::flush;
        printed = text;
      }
      if (stopped_by_text) break;
    }
    out << "\n" << std::flush;
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    char stat[160];
    std::snprintf(stat, sizeof stat,
                  "chat: tokens=%zu ms=%.2f tokens_per_s=%.1f prompt=%zu cached=%zu", reply.size(),
                  ms, ms > 0 ? double(reply.size()) * 1000.0 / ms : 0.0, ids.size(), common);
    err << stat << "\n" << std::flush;
    messages.push_back({"assistant", printed});
  }
  return 0;
}

int chat_command(std::span<const std::string> args, std::ostream& out, std::ostream& err) {
  const ChatArgs a = parse_chat_args(args);
  return chat_session(a, std::cin, out, err);
}

}  // namespace attn::tools

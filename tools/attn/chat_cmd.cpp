// `attn chat` (see chat_cmd.h).
#include "chat_cmd.h"

#include <attn/attn.h>
#include <attn/chat_template.h>
#include <attn/hf_decoder.h>
#include <attn/io.h>
#include <attn/tokenizer.h>
#include <unistd.h>

#include <algorithm>
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
           "repetition-penalty", "stop", "seed", "threads", "dtype", "context", "sink-tokens"},
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
  a.context = f.integer("context", 0, 1);
  a.sink_tokens = f.integer("sink-tokens", 4, 0);
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

  const int64_t context = a.context > 0 ? a.context : config.max_position_embeddings;
  if (context > config.max_position_embeddings)
    throw Error("[chat] --context " + std::to_string(context) +
                " exceeds the model's max_position_embeddings " +
                std::to_string(config.max_position_embeddings));
  if (a.sink_tokens + 2 > context)
    throw Error("[chat] --sink-tokens " + std::to_string(a.sink_tokens) +
                " must leave room for 2 tokens in the context of " + std::to_string(context));
  // Room a turn's rendering leaves for the reply before older exchanges are dropped.
  const int64_t reply_room = std::max<int64_t>(1, std::min(a.options.max_new_tokens, context / 4));

  std::vector<data::ChatMessage> messages;
  const std::size_t kept_first = a.system.empty() ? 0 : 1;  // the system message is never dropped
  if (!a.system.empty()) messages.push_back({"system", a.system});
  nn::DecoderCache cache;
  std::vector<int64_t> cached;  // the tokens whose keys and values the cache holds, in order
  std::string line;
  while (true) {
    if (interactive) out << "> " << std::flush;
    if (!std::getline(in, line)) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      messages.resize(kept_first);
      cache = nn::DecoderCache{};
      cached.clear();
      out << "(the conversation starts over)\n" << std::flush;
      continue;
    }
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    // The conversation with this turn; too long, the oldest exchange (a user message and the
    // reply after it) goes, until the rendering leaves room for a reply or only this turn is left.
    // Nothing is dropped for a message that does not fit alone.
    std::vector<data::ChatMessage> next = messages;
    next.push_back({"user", line});
    const auto render = [&] {
      return tok.encode(tmpl.chat_template.apply(next, true, tmpl.bos_token, tmpl.eos_token),
                        false);  // the template holds the specials
    };
    std::vector<int64_t> ids = render();
    int64_t dropped = 0;
    while (int64_t(ids.size()) + reply_room > context && next.size() > kept_first + 1) {
      std::size_t end = kept_first + 1;  // past the oldest user message and what answered it
      while (end < next.size() - 1 && next[end].role != "user") ++end;
      next.erase(next.begin() + std::ptrdiff_t(kept_first), next.begin() + std::ptrdiff_t(end));
      ++dropped;
      ids = render();
    }
    if (int64_t(ids.size()) + 1 > context) {
      err << "chat: this message renders to " << ids.size()
          << " tokens even without the earlier exchanges, more than the context of " << context
          << " holds with a reply: not sent (shorten it, or raise --context)\n"
          << std::flush;
      continue;
    }
    messages = std::move(next);
    if (dropped > 0)
      err << "chat: dropped the oldest " << dropped << (dropped == 1 ? " exchange" : " exchanges")
          << " to fit the context of " << context << " tokens\n"
          << std::flush;
    // Keep the cache where the new rendering extends what it holds; feed the rest.
    std::size_t common = 0;
    while (common < cached.size() && common < ids.size() && cached[common] == ids[common]) ++common;
    if (common == ids.size()) --common;  // at least one token to feed
    cache.length = int64_t(common);
    cached.resize(common);
    std::vector<int64_t> feed(ids.begin() + std::ptrdiff_t(common), ids.end());
    std::vector<int64_t> history = ids, reply;
    std::string printed;
    const auto t0 = std::chrono::steady_clock::now();
    bool stopped_by_text = false;
    int64_t shifts = 0;
    for (int64_t step = 0; step < a.options.max_new_tokens; ++step) {
      // context shift, as generate's window_length: keep the sinks, drop half of the rest
      if (const int64_t count =
              model->make_room(cache, int64_t(feed.size()), context, a.sink_tokens)) {
        const auto first = cached.begin() + std::ptrdiff_t(a.sink_tokens);
        cached.erase(first, first + std::ptrdiff_t(count));
        ++shifts;
      }
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
    char stat[192];
    std::snprintf(stat, sizeof stat,
                  "chat: tokens=%zu ms=%.2f tokens_per_s=%.1f prompt=%zu cached=%zu shifts=%lld",
                  reply.size(), ms, ms > 0 ? double(reply.size()) * 1000.0 / ms : 0.0, ids.size(),
                  common, static_cast<long long>(shifts));
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

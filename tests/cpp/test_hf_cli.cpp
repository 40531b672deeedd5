// `attn export` and `attn generate` on Hugging Face GPT-2 directories, in-process through
// cli_main: an exported checkpoint generates exactly the text of the original; a GPT-2 directory
// with vocab.json and merges.txt generates the tokens that GPT::generate draws for the BPE ids of
// the prompt; the bad-input paths (usage errors, a directory without a tokenizer, exporting over
// the checkpoint itself) exit with a clear message.
#include <attn/attn.h>
#include <attn/bpe.h>
#include <attn/hf_gpt2.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bpe_util.h"
#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using attn::testing::contains;
using attn::testing::run_cli;
using attn::testing::slurp;
using attn::testing::spit;
using attn::testing::TempDir;
using json = nlohmann::json;

std::string corpus() {
  std::string text;
  for (int i = 0; i < 30; ++i) text += "the cat sat on the mat; λ→é\nthe dog ran to the fog.\n";
  return text;
}

TEST(HfCli, ExportedCheckpointGeneratesTheSameText) {
  TempDir dir;
  const std::string data = dir.write("corpus.txt", corpus());
  const std::string out = dir.file("run"), hf = dir.file("hf");
  auto r = run_cli(attn::testing::tiny_train_args(data, out, 20, 10, 2));
  ASSERT_EQ(r.code, 0) << r.err;
  r = run_cli({"export", "--ckpt", out, "--out", hf});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "exported '" + out + "/model.safetensors' to '" + hf + "'")) << r.out;
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(hf)) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files,
            (std::vector<std::string>{"attn_tokenizer.json", "config.json", "model.safetensors"}));
  EXPECT_EQ(json::parse(slurp(fs::path(hf) / "config.json"))["n_embd"], 16);
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--prompt", "the c"}, std::vector<std::string>{}}) {
    std::vector<std::string> a = {"generate", "--max-new-tokens", "40", "--seed",
                                  "3",        "--threads",        "1"};
    a.insert(a.end(), extra.begin(), extra.end());
    auto with_ckpt = [&](const std::string& ckpt) {
      std::vector<std::string> b = a;
      b.insert(b.end(), {"--ckpt", ckpt});
      return run_cli(b);
    };
    const auto original = with_ckpt(out), exported = with_ckpt(hf);
    ASSERT_EQ(original.code, 0) << original.err;
    ASSERT_EQ(exported.code, 0) << exported.err;
    EXPECT_EQ(exported.out, original.out);
    EXPECT_GT(original.out.size(), 40u);
  }
  // A Hugging Face directory's model.safetensors stands for its directory.
  const auto by_file = run_cli({"generate", "--ckpt", hf + "/model.safetensors", "--seed", "3",
                                "--max-new-tokens", "40", "--threads", "1"});
  const auto by_dir = run_cli(
      {"generate", "--ckpt", hf, "--seed", "3", "--max-new-tokens", "40", "--threads", "1"});
  EXPECT_EQ(by_file.code, 0) << by_file.err;
  EXPECT_EQ(by_file.out, by_dir.out);
  // The file form of --ckpt, and --out=DIR.
  r = run_cli({"export", "--ckpt=" + out + "/ckpt.safetensors", "--out=" + dir.file("hf2")});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(slurp(dir.file("hf2") + "/model.safetensors"),
            slurp(fs::path(hf) / "model.safetensors"));
}

// A GPT-2 directory: a random model over a byte-level vocabulary (256 bytes, a few merges,
// <|endoftext|>) with its vocab.json and merges.txt.
struct Gpt2Dir {
  TempDir dir;
  std::shared_ptr<attn::nn::GPT> model;
  Gpt2Dir() {
    json vocab = json::object();
    for (const std::string& s : attn::testing::byte_symbols()) vocab[s] = int64_t(vocab.size());
    std::string merges = "#version: 0.2\n";
    for (auto [a, b] : std::vector<std::pair<std::string, std::string>>{
             {" ", "t"}, {"h", "e"}, {" t", "he"}, {"r", "e"}}) {
      const std::string sa = attn::testing::to_symbols(a), sb = attn::testing::to_symbols(b);
      merges += sa + " " + sb + "\n";
      vocab[sa + sb] = int64_t(vocab.size());
    }
    vocab["<|endoftext|>"] = int64_t(vocab.size());
    attn::nn::GPTConfig c;
    c.vocab_size = int64_t(vocab.size());
    c.block_size = 16;
    c.n_layer = 1;
    c.n_head = 2;
    c.n_embd = 16;
    c.gelu_approximate = "tanh";
    attn::Generator g(9);
    model = std::make_shared<attn::nn::GPT>(c, &g);
    model->eval();
    attn::nn::save_hf_gpt2(*model, dir.path());
    spit(dir.file("vocab.json"), vocab.dump());
    spit(dir.file("merges.txt"), merges);
  }
};

TEST(HfCli, GenerateRunsAGpt2DirectoryWithItsBpe) {
  Gpt2Dir d;
  const auto tok =
      attn::data::BpeTokenizer::from_files(d.dir.file("vocab.json"), d.dir.file("merges.txt"));
  for (const std::string prompt : {"where there are more of them there, here and there", ""}) {
    std::vector<std::string> args = {"generate", "--ckpt",        d.dir.path(), "--max-new-tokens",
                                     "20",       "--seed",        "5",          "--top-k",
                                     "0",        "--temperature", "1"};
    if (!prompt.empty()) args.insert(args.end(), {"--prompt", prompt});
    const auto r = run_cli(args);
    ASSERT_EQ(r.code, 0) << r.err;
    // The same draw through the library: the prompt's BPE ids (the last block_size of them), or
    // <|endoftext|>; each new token decoded to its bytes.
    std::vector<int64_t> ids =
        prompt.empty() ? std::vector<int64_t>{tok.eot_id()} : tok.encode(prompt);
    if (!prompt.empty()) ASSERT_GT(ids.size(), 16u);  // longer than the context: cropped
    if (ids.size() > 16) ids.erase(ids.begin(), ids.end() - 16);
    attn::Tensor idx = attn::empty({1, int64_t(ids.size())}, attn::Dtype::Int64);
    std::copy(ids.begin(), ids.end(), idx.data_ptr<int64_t>());
    attn::nn::GPT::GenerateOptions o;
    o.max_new_tokens = 20;
    o.temperature = 1.0;
    o.top_k = 0;
    attn::Generator g(5);
    attn::Tensor all = d.model->generate(idx, o, &g).contiguous();
    std::vector<int64_t> fresh(all.data_ptr<int64_t>() + ids.size(),
                               all.data_ptr<int64_t>() + all.numel());
    std::string want = prompt + tok.decode(fresh);
    if (want.empty() || want.back() != '\n') want += "\n";
    EXPECT_EQ(r.out, want);
  }
}

TEST(HfCli, BadInputIsReported) {
  Gpt2Dir d;
  fs::remove(d.dir.file("merges.txt"));
  auto r = run_cli({"generate", "--ckpt", d.dir.path()});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "has vocab.json but no merges.txt")) << r.err;
  fs::remove(d.dir.file("vocab.json"));
  r = run_cli({"generate", "--ckpt", d.dir.path()});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "has config.json but no tokenizer")) << r.err;
  spit(d.dir.file("vocab.json"), "{\"a\": 0,");
  spit(d.dir.file("merges.txt"), "");
  r = run_cli({"generate", "--ckpt", d.dir.path()});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "[BpeTokenizer] '" + d.dir.file("vocab.json") + "': not valid JSON"))
      << r.err;

  for (const std::vector<std::string>& args : {std::vector<std::string>{"export"},
                                               {"export", "--ckpt", "x"},
                                               {"export", "--out", "y"},
                                               {"export", "--ckpt", "x", "--out"},
                                               {"export", "--ckpt=", "--out", "y"},
                                               {"export", "--ckpt", "x", "--out", "y", "--bogus"},
                                               {"export", "stray"}}) {
    r = run_cli(args);
    EXPECT_EQ(r.code, 2) << args.size();
    EXPECT_TRUE(contains(r.err, "attn: export: ")) << r.err;
  }
  TempDir dir;
  r = run_cli({"export", "--ckpt", dir.path(), "--out", dir.file("o")});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "[export] no checkpoint")) << r.err;
  // Exporting into the checkpoint's own directory would replace its model.safetensors.
  const std::string data = dir.write("corpus.txt", corpus());
  ASSERT_EQ(run_cli(attn::testing::tiny_train_args(data, dir.file("run"), 2, 2, 1)).code, 0);
  const std::string before = slurp(dir.file("run") + "/model.safetensors");
  r = run_cli({"export", "--ckpt", dir.file("run"), "--out", dir.file("run") + "/."});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "is the checkpoint's own directory")) << r.err;
  EXPECT_EQ(slurp(dir.file("run") + "/model.safetensors"), before);
  // A broken checkpoint names export, not generate.
  spit(dir.file("bad.safetensors"), "nonsense");
  r = run_cli({"export", "--ckpt", dir.file("bad.safetensors"), "--out", dir.file("o")});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.err, "'" + dir.file("bad.safetensors") + "'")) << r.err;
  EXPECT_FALSE(contains(r.err, "[generate]")) << r.err;

  r = run_cli({"--help"});
  EXPECT_TRUE(contains(r.out, "export --ckpt DIR|FILE --out DIR")) << r.out;
  r = run_cli({"export", "--help"});
  EXPECT_TRUE(contains(r.out, "Hugging Face GPT-2")) << r.out;
}

}  // namespace

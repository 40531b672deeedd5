"""The transformers side of tests/python/test_hf_gpt2.py, run by the interpreter of .venv-test
(scripts/setup.sh --test), which has transformers and tokenizers on top of Debian's torch.

    hf_reference.py model DIR CONFIG_JSON SEED [--half] [--no-prefix] [--buffers]
                    [--logits IDS_JSON OUT_NPY]
        a random GPT2LMHeadModel of GPT2Config(**CONFIG) (1-D weights moved off their 1 and 0) saved with save_pretrained(DIR,
        safe_serialization=True) (--no-prefix: its GPT2Model without the "transformer." prefix;
        --buffers: plus the attn.bias / attn.masked_bias buffers older versions saved; --logits:
        the model's float32 logits of the ids, saved as .npy)
    hf_reference.py logits DIR IDS_JSON OUT_NPY
        GPT2LMHeadModel.from_pretrained(DIR).eval() logits of the ids, saved as .npy
    hf_reference.py train-bpe CORPUS OUT_DIR VOCAB_SIZE
        a byte-level BPE trained by tokenizers' ByteLevelBPETokenizer (special token
        <|endoftext|>), saved as OUT_DIR/vocab.json and OUT_DIR/merges.txt
    hf_reference.py encode DIR TEXTS_JSON OUT_JSON
        {"slow": [...], "fast": [...], "decoded": [...]}: GPT2Tokenizer and GPT2TokenizerFast ids
        of each text (and the slow tokenizer's decode of its ids, without clean-up)
"""
import json
import sys

import numpy as np
import torch


def model(out_dir, config_json, seed, *flags):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(int(seed))
    m = GPT2LMHeadModel(GPT2Config(**json.loads(config_json))).eval()
    # LayerNorm weights and biases start at 1 and 0: move them, so that a misplaced one shows.
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.3)
    if "--logits" in flags:
        i = flags.index("--logits")
        ids = torch.tensor(json.loads(flags[i + 1]), dtype=torch.long)
        with torch.no_grad():
            np.save(flags[i + 2], m(ids).logits.numpy())
    if "--half" in flags:
        m = m.half()
    if "--no-prefix" in flags:
        m.transformer.save_pretrained(out_dir, safe_serialization=True)
    else:
        m.save_pretrained(out_dir, safe_serialization=True)
    if "--buffers" in flags:
        from safetensors.torch import load_file, save_file
        path = out_dir + "/model.safetensors"
        sd = load_file(path)
        n = m.config.n_positions
        for i in range(m.config.n_layer):
            sd["transformer.h.%d.attn.bias" % i] = torch.tril(torch.ones(n, n)).view(1, 1, n, n)
            sd["transformer.h.%d.attn.masked_bias" % i] = torch.tensor(-1e4)
        save_file(sd, path, metadata={"format": "pt"})


def logits(model_dir, ids_json, out_npy):
    from transformers import GPT2LMHeadModel
    m = GPT2LMHeadModel.from_pretrained(model_dir).eval()
    ids = torch.tensor(json.loads(ids_json), dtype=torch.long)
    with torch.no_grad():
        out = m(ids).logits
    np.save(out_npy, out.numpy())


def train_bpe(corpus, out_dir, vocab_size):
    from tokenizers import ByteLevelBPETokenizer
    tok = ByteLevelBPETokenizer()
    tok.train([corpus], vocab_size=int(vocab_size), min_frequency=2,
              special_tokens=["<|endoftext|>"], show_progress=False)
    tok.save_model(out_dir)


def encode(tok_dir, texts_json, out_json):
    from transformers import GPT2Tokenizer, GPT2TokenizerFast
    with open(texts_json, encoding="utf-8") as f:
        texts = json.load(f)
    slow = GPT2Tokenizer(tok_dir + "/vocab.json", tok_dir + "/merges.txt")
    slow.model_max_length = 1 << 40
    fast = GPT2TokenizerFast(tok_dir + "/vocab.json", tok_dir + "/merges.txt")
    fast.model_max_length = 1 << 40
    result = {"slow": [], "fast": [], "decoded": []}
    for t in texts:
        ids = slow.encode(t)
        result["slow"].append(ids)
        result["fast"].append(fast.encode(t))
        result["decoded"].append(slow.decode(ids, clean_up_tokenization_spaces=False))
    with open(out_json, "w", encoding="utf-8") as f:
        json.dump(result, f)


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"model": model, "logits": logits, "train-bpe": train_bpe, "encode": encode}[cmd](*args)

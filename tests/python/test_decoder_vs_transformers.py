"""attn.nn.Decoder.from_pretrained against Hugging Face transformers (PyPI 4.44, in .venv-test
over Debian's torch 1.13) on checkpoints that transformers writes in the test with random weights
(tests/python/decoder_reference.py): Llama 3 (GQA, llama3 RoPE scaling, tied and untied), Qwen2
(q/k/v biases), Gemma (x * (1 + w) norms, scaled embeddings, GELU-tanh), Gemma 2 (sliding and
global layers, attention and final softcaps, sandwich norms, query_pre_attn_scalar), Mixtral and
Qwen2-MoE (mixtures of experts; Qwen2-MoE's shared expert and dense layers).

Logits: attn's float32 error against transformers' model run in float64 is at most 4x
transformers' own float32 error (plus a few ulps of the logits' scale). Greedy generations equal
transformers' greedy choice (argmax of its full forward at every step, generate(do_sample=False)'s
rule) token for token, attn decoding through its key/value cache. Also: sharded checkpoints, bf16 weights
(widened), and every refusal of config.json and the weights naming the field or tensor.
Qwen3 and Gemma 3 need a newer transformers than the test environment's: they are checked against
transformers 5 in test_decoder_vs_transformers5.py (the torch 2.x pass)."""
import json
import os
import subprocess

import numpy as np
import pytest

import attn
from test_hf_gpt2 import HF_MISSING, VENV_PYTHON

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(HERE, "decoder_reference.py")
pytestmark = pytest.mark.skipif(HF_MISSING is not None, reason=str(HF_MISSING))

SMALL = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
             num_attention_heads=4, num_key_value_heads=2, initializer_range=0.2,
             max_position_embeddings=256)
CONFIGS = {
    "llama3": ("llama", dict(SMALL, rope_theta=500000.0, rope_scaling=dict(
        rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
        original_max_position_embeddings=16))),
    "llama_tied_mha": ("llama", dict(SMALL, num_key_value_heads=4, tie_word_embeddings=True,
                                     attention_bias=True, mlp_bias=True)),
    "qwen2": ("qwen2", dict(SMALL, rope_theta=1000000.0)),
    "gemma": ("gemma", dict(SMALL, head_dim=24, num_key_value_heads=1)),
    "gemma2": ("gemma2", dict(SMALL, head_dim=16, num_hidden_layers=4, sliding_window=8,
                              query_pre_attn_scalar=20, attn_logit_softcapping=5.0,
                              final_logit_softcapping=3.0)),
    # Mixtral (block_sparse_moe.experts.E.w1/w2/w3 in the file): 5 experts, 2 per token.
    "mixtral": ("mixtral", dict(SMALL, intermediate_size=40, num_local_experts=5,
                                num_experts_per_tok=2, sliding_window=None)),
    # Qwen2-MoE: 6 routed experts (top 3), a gated shared expert, layer 1 dense.
    "qwen2_moe": ("qwen2_moe", dict(SMALL, moe_intermediate_size=24,
                                    shared_expert_intermediate_size=40, num_experts=6,
                                    num_experts_per_tok=3, mlp_only_layers=[1])),
}
IDS = [[1, 5, 9, 33, 2, 7, 70, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20],
       [96, 0, 44, 44, 44, 12, 3, 3, 81, 60, 59, 58, 2, 1, 0, 9, 9, 9, 9, 9, 30, 31, 32, 33, 34]]


def run(*args):
    r = subprocess.run([VENV_PYTHON, REFERENCE, *map(str, args)], capture_output=True, text=True,
                       env=dict(os.environ, TRANSFORMERS_OFFLINE="1", HF_HUB_OFFLINE="1"))
    assert r.returncode == 0, r.stderr


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    d = tmp_path_factory.mktemp("decoders")
    out = {}
    for name, (kind, cfg) in CONFIGS.items():
        out[name] = d / name
        run("model", kind, json.dumps(cfg), out[name], 0)
    return out


def reference_logits(path, tmp_path, ids=IDS, bf16=False):
    """transformers' logits in float32 and float64, and with bf16 in bfloat16 (None where torch
    1.13 cannot run bfloat16 products: without AVX-512)."""
    f = tmp_path / "logits.npz"
    run("logits", path, json.dumps(ids), f, *(["--bf16"] if bf16 else []))
    r = np.load(f)
    return r["f32"], r["f64"], r["bf16"] if "bf16" in r else None


def assert_logits_close(ours, ref32, ref64, what):
    ours = ours.numpy().astype(np.float64)
    assert ours.shape == ref64.shape
    err, err_torch = np.abs(ours - ref64).max(), np.abs(ref32 - ref64).max()
    floor = 8 * np.finfo(np.float32).eps * max(1.0, np.abs(ref64).max())
    assert err <= 4 * err_torch + floor, "{}: attn error {:.3g}, transformers float32 {:.3g}".format(
        what, err, err_torch)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_logits_match_transformers(checkpoints, name, tmp_path):
    model = attn.nn.Decoder.from_pretrained(checkpoints[name])
    ref32, ref64, _ = reference_logits(checkpoints[name], tmp_path)
    assert_logits_close(model(attn.tensor(IDS)), ref32, ref64, name)


@pytest.mark.parametrize("name", ["llama3", "gemma2"])
def test_logits_to_keep_gives_the_last_positions(checkpoints, name, tmp_path):
    # transformers' logits_to_keep: the logits of the last n positions only (the output product
    # of the others is skipped); 0 keeps all, n beyond T keeps T.
    model = attn.nn.Decoder.from_pretrained(checkpoints[name])
    ref32, ref64, _ = reference_logits(checkpoints[name], tmp_path)
    T = len(IDS[0])
    for n in (1, 3, T, T + 5):
        ours = model(attn.tensor(IDS), logits_to_keep=n)
        assert list(ours.shape) == [2, min(n, T), 97]
        assert_logits_close(ours, ref32[:, -n:], ref64[:, -n:], "{} keep {}".format(name, n))
    assert list(model(attn.tensor(IDS), logits_to_keep=0).shape) == [2, T, 97]
    with pytest.raises(ValueError, match="logits_to_keep must be >= 0, got -1"):
        model(attn.tensor(IDS), logits_to_keep=-1)
    with pytest.raises(TypeError, match="logits_to_keep must be an int"):
        model(attn.tensor(IDS), logits_to_keep=1.0)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_greedy_generation_matches_transformers(checkpoints, name, tmp_path):
    model = attn.nn.Decoder.from_pretrained(checkpoints[name])
    prompt = [row[:7] for row in IDS]
    out = tmp_path / "gen.json"
    run("generate", checkpoints[name], json.dumps(prompt), 20, out)
    ref = json.loads(out.read_text())
    ours = model.generate(attn.tensor(prompt), max_new_tokens=20).tolist()
    assert ours == ref


@pytest.mark.parametrize("name", list(CONFIGS))
def test_save_pretrained_is_read_by_transformers_4_as_the_same_model(checkpoints, name, tmp_path):
    # The suite's transformers 4.44 reads attn's directory (rope_scaling, not rope_parameters;
    # Gemma 2 without layer_types) as the model it read from its own: the same logits, bit for bit.
    model = attn.nn.Decoder.from_pretrained(checkpoints[name])
    model.save_pretrained(tmp_path / "saved")
    ref32, ref64, _ = reference_logits(checkpoints[name], tmp_path)
    got32, got64, _ = reference_logits(tmp_path / "saved", tmp_path)
    assert np.array_equal(got32, ref32) and np.array_equal(got64, ref64)


def test_sharded_and_bf16_checkpoints(tmp_path):
    kind, cfg = CONFIGS["llama3"]
    for flags in (["--shard"], ["--bf16"]):
        d = tmp_path / "_".join(f.strip("-") for f in flags)
        run("model", kind, json.dumps(cfg), d, 1, *flags)
        if flags == ["--shard"]:
            assert (d / "model.safetensors.index.json").exists()
        model = attn.nn.Decoder.from_pretrained(d)
        ref32, ref64, _ = reference_logits(d, tmp_path)
        assert_logits_close(model(attn.tensor(IDS)), ref32, ref64, str(flags))


@pytest.mark.parametrize("name", ["llama3", "qwen2", "gemma2"])
def test_bf16_models_are_as_close_as_transformers_bf16(name, tmp_path):
    # The checkpoint stored in bfloat16, loaded in bfloat16 (weights mapped from the file, every
    # op in bfloat16 with float32 accumulation): attn's logits are within twice the error of
    # transformers' own bfloat16 model (both against the float64 model), and greedy decoding
    # through the cache gives what attn's full bfloat16 forward picks.
    kind, cfg = CONFIGS[name]
    d = tmp_path / "bf16"
    run("model", kind, json.dumps(cfg), d, 2, "--bf16")
    model = attn.nn.Decoder.from_pretrained(d, torch_dtype=attn.bfloat16)
    assert all(p.dtype is attn.bfloat16 for p in model.parameters())
    _, ref64, ref16 = reference_logits(d, tmp_path, bf16=True)
    ours = model(attn.tensor(IDS))
    assert ours.dtype is attn.float32  # transformers' logits.float()
    err = np.abs(ours.numpy() - ref64).max()
    if ref16 is not None:
        err_torch = np.abs(ref16 - ref64).max()
        assert err <= 2 * err_torch + 1e-3, "{}: attn bf16 error {:.3g}, transformers bf16 " \
            "{:.3g}".format(name, err, err_torch)
    else:  # torch 1.13 multiplies bfloat16 only with AVX-512 (oneDNN): the float64 model alone.
        # transformers' bfloat16 error on these models, where it runs: 3-6% of the largest logit.
        assert err <= 0.1 * np.abs(ref64).max(), "{}: attn bf16 error {:.3g}".format(name, err)
    prompt = attn.tensor([row[:5] for row in IDS])
    out = model.generate(prompt, max_new_tokens=6)
    ids = prompt
    for _ in range(6):
        ids = attn.cat([ids, model(ids)[:, -1].argmax(-1, keepdim=True)], 1)
    assert out.tolist() == ids.tolist()
    # "auto" takes config.json's torch_dtype; float32 widens the same file.
    assert attn.nn.Decoder.from_pretrained(d, torch_dtype="auto").model.embed_tokens.weight.dtype \
        is attn.bfloat16
    m32 = attn.nn.Decoder.from_pretrained(d)
    assert m32.bfloat16() is m32 and m32.model.norm.weight.dtype is attn.bfloat16


def write(d, config, weights_from=None):
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(config))
    if weights_from is not None:
        (d / "model.safetensors").write_bytes((weights_from / "model.safetensors").read_bytes())
    return d


@pytest.mark.parametrize("edit, words", [
    (lambda c: c.update(model_type="deepseek_v3"), ["model_type 'deepseek_v3'"]),
    (lambda c: c.update(sliding_window=4), ["sliding_window"]),  # a field llama does not have
    (lambda c: c.update(hidden_act="relu"), ["hidden_act 'relu'"]),
    (lambda c: c.update(rope_scaling=dict(rope_type="yarn", factor=4.0)), ["yarn"]),
    (lambda c: c.update(num_key_value_heads=3), ["num_key_value_heads 3"]),
    (lambda c: c.update(hidden_size=65), ["hidden_size 65"]),
    (lambda c: c.update(num_hidden_layers=4), ["model.layers.3"]),  # weights missing
    (lambda c: c.update(intermediate_size=95), ["gate_proj", "[95, 64]", "[96, 64]"]),
])
def test_bad_configs_and_weights_are_refused(checkpoints, tmp_path, edit, words):
    config = json.loads((checkpoints["llama3"] / "config.json").read_text())
    edit(config)
    d = write(tmp_path / "bad", config, checkpoints["llama3"])
    with pytest.raises(ValueError) as e:
        attn.nn.Decoder.from_pretrained(d)
    for w in words:
        assert w in str(e.value), str(e.value)


def test_missing_files_are_named(tmp_path, checkpoints):
    with pytest.raises(ValueError, match="has no config.json"):
        attn.nn.Decoder.from_pretrained(tmp_path)
    config = json.loads((checkpoints["llama3"] / "config.json").read_text())
    d = write(tmp_path / "noweights", config)
    with pytest.raises(ValueError, match="neither model.safetensors nor"):
        attn.nn.Decoder.from_pretrained(d)
    (d / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"model.norm.weight": "model-00001.safetensors"}}))
    with pytest.raises(ValueError, match="model-00001.safetensors', which is missing"):
        attn.nn.Decoder.from_pretrained(d)
    data = (checkpoints["llama3"] / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[: len(data) // 2])  # truncated
    with pytest.raises(ValueError):
        attn.nn.Decoder.from_pretrained(d)


def test_attn_generate_streams_a_llama_directory_with_its_tokenizer(tmp_path):
    from test_hf_gpt2 import ATTN_CLI, CORPUS
    if not os.path.exists(ATTN_CLI):
        pytest.skip("%s is not built" % ATTN_CLI)
    corpus = tmp_path / "corpus.txt"
    with open(CORPUS, encoding="utf-8") as f:
        corpus.write_text(f.read()[:100000], encoding="utf-8")
    tok_json = tmp_path / "tokenizer.json"
    r = subprocess.run([VENV_PYTHON, os.path.join(HERE, "tokenizer_reference.py"), "build",
                        "llama3", str(corpus), str(tok_json)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    tok = attn.data.Tokenizer.from_file(tok_json)
    d = tmp_path / "llama"
    run("model", "llama", json.dumps(dict(SMALL, vocab_size=tok.get_vocab_size(),
                                          eos_token_id=None, bos_token_id=None)), d, 2)
    (d / "tokenizer.json").write_bytes(tok_json.read_bytes())
    model = attn.nn.Decoder.from_pretrained(d)
    prompt = tok.encode("ROMEO:").ids  # with <|begin_of_text|>
    greedy = model.generate(attn.tensor([prompt]), max_new_tokens=12).tolist()[0]

    def cli(*extra):
        r = subprocess.run([ATTN_CLI, "generate", "--ckpt", str(d), "--prompt", "ROMEO:",
                            "--max-new-tokens", "12", "--top-k", "1", *extra],
                           capture_output=True)
        assert r.returncode == 0, r.stderr.decode()
        return r.stdout.decode("utf-8"), r.stderr.decode()

    out, err = cli()
    assert out == "ROMEO:" + tok.decode(greedy)[len(tok.decode(prompt)):] + "\n"
    assert "generate: tokens=12 " in err
    # StreamingLLM: a cache of 10 tokens (2 sinks) evicts during the 12 tokens, as generate does.
    streamed = model.generate(attn.tensor([prompt]), max_new_tokens=12, window_length=10,
                              sink_tokens=2).tolist()[0]
    out, err = cli("--window-length", "10", "--sink-tokens", "2")
    assert out == "ROMEO:" + tok.decode(streamed)[len(tok.decode(prompt)):] + "\n"
    # An end-of-text id in config.json stops the stream there (and is not printed).
    config = json.loads((d / "config.json").read_text())
    config["eos_token_id"] = greedy[len(prompt) + 3]
    (d / "config.json").write_text(json.dumps(config))
    out, err = cli()
    assert out == "ROMEO:" + tok.decode(greedy[:len(prompt) + 3])[len(tok.decode(prompt)):] + "\n"
    assert "generate: tokens=4 " in err


def test_sampling_distributions_match_transformers_processors(tmp_path):
    rng = np.random.default_rng(3)
    options = [dict(temperature=0.7, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.0),
               dict(temperature=1.3, top_k=7, top_p=1.0, min_p=0.0, repetition_penalty=1.0),
               dict(temperature=1.0, top_k=0, top_p=0.8, min_p=0.0, repetition_penalty=1.0),
               dict(temperature=0.9, top_k=0, top_p=1.0, min_p=0.1, repetition_penalty=1.0),
               dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repetition_penalty=1.3),
               dict(temperature=0.8, top_k=20, top_p=0.9, min_p=0.05, repetition_penalty=1.15)]
    cases = []
    for o in options:
        for _ in range(4):
            logits = (rng.standard_normal(60) * 3).astype(np.float32)
            history = rng.integers(0, 60, size=15).tolist()
            cases.append(dict(logits=logits.astype(np.float64).tolist(), history=history,
                              options=o))
    out = tmp_path / "probs.json"
    run("processors", json.dumps(cases), out)
    ref = json.loads(out.read_text())
    for case, want in zip(cases, ref):
        got = attn._C.decoder.next_token_probabilities(
            attn.tensor(case["logits"], dtype=attn.float32), case["history"], **case["options"])
        got, want = np.array(got), np.array(want)
        assert ((got > 0) == (want > 0)).all(), case["options"]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-12, err_msg=str(case["options"]))


CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + "
                 "'<|end_header_id|>\\n\\n' + m['content'] | trim + '<|eot_id|>' }}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>"
                 "\\n\\n' }}{% endif %}")


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    """A small Llama directory with a byte-level BPE trained on tinyshakespeare and a Llama 3
    style chat template: (directory, tokenizer, model, template, <|eot_id|>'s id)."""
    from test_hf_gpt2 import ATTN_CLI, CORPUS
    if not os.path.exists(ATTN_CLI):
        pytest.skip("%s is not built" % ATTN_CLI)
    tmp_path = tmp_path_factory.mktemp("chat")
    corpus = tmp_path / "corpus.txt"
    with open(CORPUS, encoding="utf-8") as f:
        corpus.write_text(f.read()[:100000], encoding="utf-8")
    d = tmp_path / "llama"
    r = subprocess.run([VENV_PYTHON, os.path.join(HERE, "tokenizer_reference.py"), "build",
                        "llama3", str(corpus), str(tmp_path / "tokenizer.json")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    tok = attn.data.Tokenizer.from_file(tmp_path / "tokenizer.json")
    eot = tok.token_to_id("<|eot_id|>")
    run("model", "llama", json.dumps(dict(SMALL, vocab_size=tok.get_vocab_size(),
                                          eos_token_id=None, bos_token_id=None)), d, 4)
    (d / "tokenizer.json").write_bytes((tmp_path / "tokenizer.json").read_bytes())
    (d / "tokenizer_config.json").write_text(json.dumps(dict(
        chat_template=CHAT_TEMPLATE, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")))
    model = attn.nn.Decoder.from_pretrained(d)
    template = attn.data.ChatTemplate.from_tokenizer_config(d / "tokenizer_config.json")
    return d, tok, model, template, eot


def chat_prompt(chat_model, messages):
    d, tok, model, template, eot = chat_model
    return tok.encode(template.render(messages=messages, add_generation_prompt=True),
                      add_special_tokens=False).ids


def greedy_chat_reply(chat_model, messages, n=10, **window):
    """The reply `attn chat --temperature 0` should give: greedy decoding of the rendered
    conversation through Decoder.generate (window: its StreamingLLM options), up to <|eot_id|>."""
    d, tok, model, template, eot = chat_model
    ids = chat_prompt(chat_model, messages)
    out = model.generate(attn.tensor([ids]), max_new_tokens=n, eos_token_id=eot,
                         **window).tolist()[0]
    new = out[len(ids):]
    if eot in new:
        new = new[:new.index(eot)]
    return tok.decode(new)


def test_attn_chat_replies_as_greedy_decoding_of_the_rendered_conversation(chat_model):
    from test_hf_gpt2 import ATTN_CLI
    d = chat_model[0]

    def greedy_reply(messages):
        return greedy_chat_reply(chat_model, messages)

    turns = ["Good morrow, cousin.", "What news from Rome?"]
    r = subprocess.run([ATTN_CLI, "chat", "--ckpt", str(d), "--temperature", "0",
                        "--max-new-tokens", "10"], input="\n".join(turns) + "\n",
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    replies = r.stdout.split("\n")[:2]
    messages = [dict(role="user", content=turns[0])]
    assert replies[0] == greedy_reply(messages)
    messages += [dict(role="assistant", content=replies[0]), dict(role="user", content=turns[1])]
    assert replies[1] == greedy_reply(messages)  # the cache kept from turn 1 changes nothing
    stats = [l for l in r.stderr.splitlines() if l.startswith("chat: ")]
    assert len(stats) == 2 and " cached=0" in stats[0] and " cached=0" not in stats[1]


def test_attn_chat_keeps_the_conversation_within_its_context(chat_model):
    """--context 64: a reply that fills it shifts the cache (Decoder.generate's window_length);
    a turn that would not fit drops the oldest exchange; a message too long alone is refused and
    the conversation goes on without it."""
    from test_hf_gpt2 import ATTN_CLI
    d = chat_model[0]
    C, n, S = 64, 12, 4
    room = min(n, C // 4)
    words = "now is the winter of our discontent made glorious summer by this sun of york".split()
    long_turn = ""
    for w in words * 4:  # a first message whose rendering leaves less room than the reply needs
        if len(chat_prompt(chat_model, [dict(role="user", content=long_turn + w)])) > C - 4:
            break
        long_turn += w + " "
    long_turn = long_turn.strip()
    first = len(chat_prompt(chat_model, [dict(role="user", content=long_turn)]))
    assert C - n < first < C
    turns = [long_turn, "What news?", " ".join(words * 6), "Speak again."]
    r = subprocess.run([ATTN_CLI, "chat", "--ckpt", str(d), "--temperature", "0",
                        "--max-new-tokens", str(n), "--context", str(C), "--sink-tokens", str(S)],
                       input="\n".join(turns) + "\n", capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    replies = r.stdout.split("\n")[:3]  # the third turn is refused: it prints no reply
    stats = [l for l in r.stderr.splitlines() if l.startswith("chat: tokens=")]
    assert len(stats) == 3, r.stderr

    def fit(messages):  # the policy of `attn chat --help`, written again
        while len(chat_prompt(chat_model, messages)) + room > C and len(messages) > 1:
            messages = messages[2:]
        return messages

    # Turn 1 shifts the cache: Decoder.generate with the same window gives the same reply.
    messages = [dict(role="user", content=turns[0])]
    assert replies[0] == greedy_chat_reply(chat_model, messages, n, window_length=C,
                                           sink_tokens=S)
    assert " shifts=0" not in stats[0], stats[0]
    # Turn 2: the first exchange no longer fits with room for a reply, and is dropped.
    messages += [dict(role="assistant", content=replies[0]), dict(role="user", content=turns[1])]
    kept = fit(messages)
    assert len(kept) == 1
    assert "chat: dropped the oldest 1 exchange to fit the context of 64 tokens" in r.stderr
    assert replies[1] == greedy_chat_reply(chat_model, kept, n, window_length=C, sink_tokens=S)
    # Turn 3 alone exceeds the context: refused, named, and the conversation goes on without it.
    assert "more than the context of 64 holds with a reply: not sent" in r.stderr
    messages = fit(kept + [dict(role="assistant", content=replies[1]),
                           dict(role="user", content=turns[3])])
    assert len(messages) == 3
    assert replies[2] == greedy_chat_reply(chat_model, messages, n, window_length=C,
                                           sink_tokens=S)
    assert " cached=0" not in stats[2]  # the cache of turn 2 was kept

    def fails(*flags):
        r = subprocess.run([ATTN_CLI, "chat", "--ckpt", str(d), *flags], input="hi\n",
                           capture_output=True, text=True)
        assert r.returncode != 0
        return r.stderr

    assert "--context 257 exceeds the model's max_position_embeddings 256" in fails(
        "--context", "257")
    assert "--sink-tokens 63 must leave room for 2 tokens in the context of 64" in fails(
        "--context", "64", "--sink-tokens", "63")

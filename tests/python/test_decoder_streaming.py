"""attn.nn.Decoder.generate(window_length=, sink_tokens=): StreamingLLM with llama.cpp's context
shift. A one-layer model's keys and values depend only on the tokens and their positions, so each
greedy token must be the argmax of a plain forward over the tokens the cache holds at that step;
a simulation of the eviction rule here says which those are. The model has 16 positions and
generates 40 tokens past them. Also the CLI's flags and the refusals."""
import os
import subprocess

import pytest

import attn

CONFIG = dict(model_type="llama", vocab_size=53, hidden_size=32, intermediate_size=48,
              num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=16, rope_theta=10000.0)


def model():
    m = attn.nn.Decoder(generator=attn.Generator().manual_seed(5), **CONFIG)
    with attn.no_grad():  # logits far apart: no near-ties for the argmax to break differently
        for p in m.parameters():
            p.mul_(15.0)
    return m.eval()


def simulate(m, prompt, new, window, sinks):
    cached, pending, out = [], list(prompt), list(prompt)
    for _ in range(new):
        if len(cached) + len(pending) > window:
            drop = max(len(cached) + len(pending) - window, (len(cached) - sinks) // 2)
            cached = cached[:sinks] + cached[sinks + drop:]
        cached += pending
        logits = m(attn.tensor([cached]))
        token = int(logits[0, -1].argmax())
        out.append(token)
        pending = [token]
    return out


def test_streaming_generation_is_the_forward_of_the_kept_tokens_past_the_context():
    m = model()
    prompt = [3, 17, 52, 0, 9]
    got = m.generate(attn.tensor([prompt]), max_new_tokens=40, window_length=12,
                     sink_tokens=2).tolist()[0]
    assert len(got) == 45
    assert got == simulate(m, prompt, 40, 12, 2)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        m.generate(attn.tensor([prompt]), max_new_tokens=40)


def test_streaming_options_are_checked():
    m = model()
    ids = attn.tensor([[1, 2, 3]])
    with pytest.raises(ValueError, match="sink_tokens 2 .* window_length 3"):
        m.generate(ids, max_new_tokens=5, window_length=3, sink_tokens=2)
    with pytest.raises(ValueError, match="window_length 17 exceeds max_position_embeddings 16"):
        m.generate(ids, max_new_tokens=5, window_length=17)
    with pytest.raises(ValueError, match="window_length must be >= 0"):
        m.generate(ids, max_new_tokens=5, window_length=-1)


def test_attn_generate_window_length_flags(tmp_path):
    from test_hf_gpt2 import ATTN_CLI
    if not os.path.exists(ATTN_CLI):
        pytest.skip("%s is not built" % ATTN_CLI)

    def cli(*args):
        return subprocess.run([ATTN_CLI, "generate", *args], capture_output=True, text=True)

    r = cli("--ckpt", str(tmp_path), "--sink-tokens", "2")
    assert r.returncode != 0 and "--sink-tokens needs --window-length" in r.stderr
    r = cli("--ckpt", str(tmp_path), "--window-length", "3", "--sink-tokens", "2")
    assert r.returncode != 0 and "must leave room for 2 tokens" in r.stderr
    r = cli("--ckpt", str(tmp_path), "--window-length", "8", "--no-cache")
    assert r.returncode != 0 and "cannot be combined with --no-cache" in r.stderr

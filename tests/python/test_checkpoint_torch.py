"""`attn train`'s model.safetensors read the way a PyTorch user reads it: parsed from the
safetensors spec with json + numpy (the safetensors package is not in Debian 12), loaded into a
torch model, which computes the same logits as attn's GPT with those weights."""
import json
import os
import subprocess

import numpy as np
import torch

import attn
from conftest import read_safetensors
from test_gpt_vs_torch import TorchGPT

BUILD = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(attn.__file__))))
CLI = os.environ.get("ATTN_CLI", os.path.join(BUILD, "attn"))


def test_model_safetensors_loads_into_torch(tmp_path):
    corpus = tmp_path / "rhyme.txt"
    corpus.write_text("Twinkle, twinkle, little star, how I wonder what you are! " * 40)
    out = tmp_path / "out"
    r = subprocess.run([CLI, "train", "--data", str(corpus), "--out", str(out), "--n-layer", "2",
                        "--n-head", "2", "--n-embd", "16", "--block-size", "16", "--batch-size",
                        "4", "--max-iters", "6", "--eval-interval", "3", "--eval-iters", "2",
                        "--threads", "1", "--no-progress"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1].startswith("done: iters=6 ")
    tensors, meta = read_safetensors(out / "model.safetensors")
    cfg = json.loads(meta["config"])
    chars = json.loads(meta["tokenizer"])["chars"]
    assert cfg["n_layer"] == 2 and cfg["n_embd"] == 16 and cfg["vocab_size"] == len(chars)
    assert cfg["bias"] is False and "h.0.attn.in_proj_bias" not in tensors  # nanoGPT's default
    assert chars == sorted(set(corpus.read_text()))
    assert tensors["wte.weight"].shape == (len(chars), 16)

    ref = TorchGPT({k: torch.tensor(v) for k, v in tensors.items()}, 2, 2, False)
    model = attn.nn.GPT(vocab_size=len(chars), block_size=16, n_layer=2, n_head=2, n_embd=16,
                        bias=False)
    model.load_state_dict({k: attn.tensor(v.copy()) for k, v in tensors.items()})
    ids = [chars.index(c) for c in "twinkle, little "]
    x = torch.tensor([ids])
    logits_t, loss_t = ref(x, x)
    logits_a, loss_a = model(attn.tensor([ids]), attn.tensor([ids]))
    np.testing.assert_allclose(np.array(logits_a.tolist()), logits_t.detach().numpy(),
                               rtol=1e-4, atol=1e-5)
    assert abs(float(loss_a) - float(loss_t)) < 1e-5

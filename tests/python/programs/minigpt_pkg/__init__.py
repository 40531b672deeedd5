"""A package-style GPT (model, trainer, dataset) in the style of minGPT, written for attn's test
suite: it runs unchanged on PyTorch; the test runs it on attn with only the imports changed."""

"""What `import attn as torch` does with a torch name attn lacks.

Every public name (no leading underscore) that attn, attn.nn, attn.nn.functional or attn.Tensor
does not define raises UnsupportedError, which is both a NotImplementedError (what a torch
feature attn does not implement raises) and an AttributeError (so hasattr() probes such as
hasattr(torch.nn.functional, "scaled_dot_product_attention") answer False instead of raising).
Names with a leading underscore raise a plain AttributeError, so copy, pickle, NumPy and pytest
introspection behave as usual."""


class UnsupportedError(NotImplementedError, AttributeError):
    """A torch feature attn does not implement (see attn._unsupported)."""


class NoCudaError(AssertionError, ValueError):
    """A tensor or module sent to a CUDA device: the AssertionError torch built without CUDA
    raises ("Torch not compiled with CUDA enabled"), and a ValueError as attn's other argument
    errors."""


def version():
    import attn
    return attn.__version__


def unsupported(owner, name):
    """The error for owner.name: AttributeError for private names, UnsupportedError otherwise."""
    if name.startswith("_"):
        return AttributeError("{} has no attribute '{}'".format(owner, name))
    torch_owner = owner.replace("attn", "torch", 1)
    return UnsupportedError("{}.{} is not supported by attn {} ({} has no attribute '{}'); see "
                            "docs/torch_surface.md".format(torch_owner, name, version(), owner,
                                                            name))


def module_getattr(module_name):
    """A module-level __getattr__ for module_name (PEP 562)."""

    def __getattr__(name):
        raise unsupported("module '{}'".format(module_name) if name.startswith("_")
                          else module_name, name)

    return __getattr__

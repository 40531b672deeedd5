"""complex64 for rotary embeddings as Meta's reference Llama code writes them: torch.polar,
torch.view_as_complex, complex multiplication and torch.view_as_real.

attn's tensors are real, so a complex tensor here is a pair of float32 tensors (real and
imaginary parts) with the operations that code uses: shape, view / reshape, indexing, unsqueeze,
to(device), multiplication and addition by complex or real operands, conj, abs, angle. Gradients
flow through the float ops of both parts. Unlike torch, view_as_real returns a new tensor (the
parts stacked), not a view of the complex one's memory; and view_as_complex copies nothing but
the result is not a view either: writing into one does not change the other."""
from . import _C


class _ComplexDtype:
    """torch.complex64 (the only complex dtype attn has)."""
    is_complex = True
    is_floating_point = False
    itemsize = 8

    def __repr__(self):
        return "torch.complex64"

    __str__ = __repr__


complex64 = _ComplexDtype()
cfloat = complex64


class ComplexTensor:
    """A complex64 tensor: real and imaginary float32 parts of one shape."""

    dtype = complex64

    def __init__(self, real, imag):
        if tuple(real.shape) != tuple(imag.shape):
            raise RuntimeError("complex(): real {} and imag {} differ in shape".format(
                tuple(real.shape), tuple(imag.shape)))
        self.real, self.imag = real, imag

    def is_complex(self):
        return True

    @property
    def shape(self):
        return self.real.shape

    @property
    def ndim(self):
        return self.real.dim()

    @property
    def device(self):
        return self.real.device

    def dim(self):
        return self.real.dim()

    def size(self, dim=None):
        return self.real.size() if dim is None else self.real.size(dim)

    def numel(self):
        return self.real.numel()

    def view(self, *shape):
        return ComplexTensor(self.real.view(*shape), self.imag.view(*shape))

    def reshape(self, *shape):
        return ComplexTensor(self.real.reshape(*shape), self.imag.reshape(*shape))

    def unsqueeze(self, dim):
        return ComplexTensor(self.real.unsqueeze(dim), self.imag.unsqueeze(dim))

    def __getitem__(self, key):
        return ComplexTensor(self.real[key], self.imag[key])

    def to(self, *args, **kwargs):
        if any(a is complex64 for a in args) or kwargs.get("dtype") is complex64:
            return self
        return ComplexTensor(self.real.to(*args, **kwargs), self.imag.to(*args, **kwargs))

    def detach(self):
        return ComplexTensor(self.real.detach(), self.imag.detach())

    def conj(self):
        return ComplexTensor(self.real, -self.imag)

    def abs(self):
        return (self.real * self.real + self.imag * self.imag).sqrt()

    def __mul__(self, other):
        if isinstance(other, ComplexTensor):
            return ComplexTensor(self.real * other.real - self.imag * other.imag,
                                 self.real * other.imag + self.imag * other.real)
        return ComplexTensor(self.real * other, self.imag * other)

    __rmul__ = __mul__

    def __add__(self, other):
        if isinstance(other, ComplexTensor):
            return ComplexTensor(self.real + other.real, self.imag + other.imag)
        return ComplexTensor(self.real + other, self.imag + 0 * self.imag)

    __radd__ = __add__

    def __neg__(self):
        return ComplexTensor(-self.real, -self.imag)

    def __repr__(self):
        return "ComplexTensor(real={}, imag={})".format(self.real, self.imag)


def polar(abs, angle):  # noqa: A002  (torch's argument names)
    """torch.polar: abs * (cos(angle) + i sin(angle))."""
    return ComplexTensor(abs * _C.cos(angle), abs * _C.sin(angle))


def complex(real, imag):  # noqa: A001
    """torch.complex(real, imag)."""
    return ComplexTensor(real, imag)


def view_as_complex(input):
    """torch.view_as_complex: a float tensor whose last dim is 2 (real, imaginary)."""
    if isinstance(input, ComplexTensor) or input.dim() == 0 or input.shape[-1] != 2:
        raise RuntimeError("Tensor must have a last dimension of size 2")
    return ComplexTensor(input[..., 0], input[..., 1])


def view_as_real(input):
    """torch.view_as_real: the parts stacked in a last dim of 2 (a new tensor, see the module)."""
    if not isinstance(input, ComplexTensor):
        raise RuntimeError("view_as_real is only supported for complex tensors")
    return _C.stack([input.real, input.imag], -1)


def is_complex(input):
    return isinstance(input, ComplexTensor)


__all__ = ["ComplexTensor", "cfloat", "complex", "complex64", "is_complex", "polar",
           "view_as_complex", "view_as_real"]

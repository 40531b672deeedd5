"""complex64 for rotary embeddings as Meta's reference Llama code writes them: torch.polar,
torch.view_as_complex, complex multiplication and torch.view_as_real.

attn's tensors are real, so a complex tensor here holds one float32 tensor of (real, imaginary)
pairs in a last dim of 2: the layout of torch.view_as_real. view_as_complex wraps its argument and
view_as_real unwraps it, both without a copy, so as in torch the two share memory. A complex
tensor has the operations that code uses: shape, view / reshape, indexing, unsqueeze,
to(device), multiplication and addition by complex or real operands, conj, abs, and .real /
.imag (views). The product of two complex tensors is one pass of attn's complex_mul kernel, with
torch's rounding and complex gradients; the rest are float ops on the pairs. Gradients flow
through the pairs."""
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


def _shape_args(shape):
    """view(2, 3) and view((2, 3)) alike: the dims as a tuple."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return tuple(shape)


class ComplexTensor:
    """A complex64 tensor: float32 (real, imaginary) pairs in the last dim of `pairs`."""

    dtype = complex64

    def __init__(self, pairs):
        if pairs.dim() == 0 or pairs.shape[-1] != 2:
            raise RuntimeError("complex tensor: pairs must have a last dimension of size 2, got "
                               "shape {}".format(tuple(pairs.shape)))
        self.pairs = pairs

    @classmethod
    def from_parts(cls, real, imag):
        if tuple(real.shape) != tuple(imag.shape):
            raise RuntimeError("complex(): real {} and imag {} differ in shape".format(
                tuple(real.shape), tuple(imag.shape)))
        return cls(_C.stack([real, imag], -1))

    def is_complex(self):
        return True

    @property
    def real(self):
        return self.pairs[..., 0]

    @property
    def imag(self):
        return self.pairs[..., 1]

    @property
    def shape(self):
        return self.pairs.shape[:-1]

    @property
    def ndim(self):
        return self.pairs.dim() - 1

    @property
    def device(self):
        return self.pairs.device

    @property
    def requires_grad(self):
        return self.pairs.requires_grad

    def dim(self):
        return self.ndim

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def numel(self):
        return self.pairs.numel() // 2

    def view(self, *shape):
        return ComplexTensor(self.pairs.view(*_shape_args(shape), 2))

    def reshape(self, *shape):
        return ComplexTensor(self.pairs.reshape(*_shape_args(shape), 2))

    def flatten(self, start_dim=0, end_dim=-1):
        n = self.ndim
        if end_dim < 0:
            end_dim += n
        return ComplexTensor(self.pairs.flatten(start_dim + n if start_dim < 0 else start_dim,
                                                end_dim))

    def unsqueeze(self, dim):
        return ComplexTensor(self.pairs.unsqueeze(dim + self.ndim + 1 if dim < 0 else dim))

    def __getitem__(self, key):
        # The key indexes the complex dims; after an Ellipsis, the pair dim is kept whole.
        if not isinstance(key, tuple):
            key = (key,)
        if any(k is Ellipsis for k in key):
            key = key + (slice(None),)
        return ComplexTensor(self.pairs[key])

    def to(self, *args, **kwargs):
        if any(a is complex64 for a in args) or kwargs.get("dtype") is complex64:
            return self
        return ComplexTensor(self.pairs.to(*args, **kwargs))

    def detach(self):
        return ComplexTensor(self.pairs.detach())

    def clone(self):
        return ComplexTensor(self.pairs.clone())

    def contiguous(self):
        return ComplexTensor(self.pairs.contiguous())

    def conj(self):
        return ComplexTensor(self.pairs * _C.tensor([1.0, -1.0]))

    def abs(self):
        r, i = self.real, self.imag
        return (r * r + i * i).sqrt()

    def __mul__(self, other):
        if isinstance(other, ComplexTensor):
            return ComplexTensor(_C._complex_mul(self.pairs, other.pairs))
        if isinstance(other, _C.Tensor):
            # A real tensor scales both parts, broadcast against the complex dims.
            return ComplexTensor(self.pairs * other.unsqueeze(-1))
        return ComplexTensor(self.pairs * other)

    __rmul__ = __mul__

    def __add__(self, other):
        if isinstance(other, ComplexTensor):
            return ComplexTensor(self.pairs + other.pairs)
        # A real operand adds to the real part only.
        real = self.real + other
        return ComplexTensor.from_parts(real, self.imag.expand(real.shape))

    __radd__ = __add__

    def __sub__(self, other):
        return self + (-other)

    def __rsub__(self, other):
        return (-self) + other

    def __neg__(self):
        return ComplexTensor(-self.pairs)

    def __repr__(self):
        return "ComplexTensor(real={}, imag={})".format(self.real, self.imag)


def polar(abs, angle):  # noqa: A002  (torch's argument names)
    """torch.polar: abs * (cos(angle) + i sin(angle))."""
    return ComplexTensor.from_parts(abs * _C.cos(angle), abs * _C.sin(angle))


def complex(real, imag):  # noqa: A001
    """torch.complex(real, imag)."""
    return ComplexTensor.from_parts(real, imag)


def view_as_complex(input):
    """torch.view_as_complex: a float32 tensor whose last dim is 2 (real, imaginary), adjacent."""
    if isinstance(input, ComplexTensor) or input.dim() == 0 or input.shape[-1] != 2:
        raise RuntimeError("Tensor must have a last dimension of size 2")
    if input.dtype != _C.dtype.float32:
        raise RuntimeError("view_as_complex: attn has complex64 only (float32 pairs), got a "
                           "tensor of {}".format(input.dtype))
    if input.stride(-1) != 1:
        raise RuntimeError("Tensor must have a last dimension with stride 1")
    return ComplexTensor(input)


def view_as_real(input):
    """torch.view_as_real: the (real, imaginary) pairs in a last dim of 2, sharing memory."""
    if not isinstance(input, ComplexTensor):
        raise RuntimeError("view_as_real is only supported for complex tensors")
    return input.pairs


def is_complex(input):
    return isinstance(input, ComplexTensor)


__all__ = ["ComplexTensor", "cfloat", "complex", "complex64", "is_complex", "polar",
           "view_as_complex", "view_as_real"]

"""Elementwise math torch names composed of attn's ops: atan2 / arctan2, hypot, deg2rad, rad2deg,
sgn, sinc, heaviside, fmax, fmin, ldexp, copysign, logaddexp2, isneginf, isposinf, isreal and
absolute; the Tensor methods torch has for these and for the arc* aliases, greater / less /
not_equal / negative; and the in-place forms (floor_, exp2_, eq_, logical_and_, cumsum_, ...)
of ops attn has out of place.

atan2 takes the branch atan(y / x) where |y| <= |x| and pi/2 - atan(x / y) elsewhere, so it
agrees with torch's to a few ulps; IEEE's zero, inf and nan cases are torch's. hypot scales by
the larger magnitude (no overflow), a few ulps from torch's std::hypot. deg2rad, rad2deg, sgn,
heaviside, fmax, fmin, ldexp, copysign, logaddexp2 (torch's formula), isneginf, isposinf and
isreal give torch's bits. Gradients flow through the ops and match torch's, nan at atan2(0, 0)
and hypot(0, 0) as torch's; differences: copysign passes no gradient to `other` (torch: zeros),
heaviside's gradient reaches `values` (torch refuses to differentiate heaviside), and float16
inputs are computed in float32 and rounded back (torch 1.13's CPU atan2 and hypot refuse Half).

An in-place form computes the out-of-place result and copies it into self: torch's
RuntimeError for a leaf that requires grad, for a result dtype self can't hold (Float into
Long) and for a result shape other than self's. Bad input gets torch's exception types.
"""
import math as _math

from . import _C

Tensor = _C.Tensor

_PI = float.fromhex("0x1.921fb6p+1")  # pi rounded to float32, as torch's kernels use it


def _dt():
    from . import bool as b, float16 as h, float32 as f, int64 as i
    return b, i, h, f


def _rank(dtype):
    b, i, h, f = _dt()
    return {b: 0, i: 1, h: 2, f: 3}.get(dtype, 3)


def _cat(dtype):
    return min(_rank(dtype), 2)


def _dtype_name(dtype):
    b, i, h, f = _dt()
    return {b: "Bool", i: "Long", h: "Half", f: "Float"}.get(dtype, str(dtype))


def _need_tensor(fn, what, x, pos):
    if not isinstance(x, Tensor):
        raise TypeError("{}(): argument '{}' (position {}) must be Tensor, not {}".format(
            fn, what, pos, type(x).__name__))


def _promote(*ts):
    """torch's result dtype for tensors (0-dim ones give way to sized ones of their category)."""
    sized = [t.dtype for t in ts if t.dim() > 0]
    zero = [t.dtype for t in ts if t.dim() == 0]
    d = max(sized, key=_rank) if sized else None
    z = max(zero, key=_rank) if zero else None
    if d is None:
        return z
    if z is None or _cat(z) <= _cat(d):
        return d
    return z


def _float_dtype(dtype):
    b, i, h, f = _dt()
    return dtype if dtype in (h, f) else f


def _as(t, dtype):
    return t if t.dtype == dtype else t.to(dtype)


def _compute(*ts):
    """The float result dtype of ts, and ts as float32 (half is computed in float32, as torch's
    CPU kernels do, and the result rounded back)."""
    out = _float_dtype(_promote(*ts))
    f = _dt()[3]
    return out, [_as(t, f) for t in ts]


def _signbit(t):
    from . import signbit
    if t.dim() == 0:  # attn's signbit gives a 0-dim input shape (1,)
        return signbit(t.reshape(1)).reshape(())
    return signbit(t)


def _check_broadcast(a, b):
    from . import broadcast_shapes
    try:
        broadcast_shapes(tuple(a.shape), tuple(b.shape))
    except Exception:
        raise RuntimeError("The size of tensor a ({}) must match the size of tensor b ({}) at "
                           "non-singleton dimension".format(list(a.shape), list(b.shape)))


def _full_like(t, value):
    return _C.full((), value, dtype=t.dtype)


# ---- two-argument float functions --------------------------------------------------------------

def _binary_args(fn, input, other):
    """A two-tensor function's checks: both tensors, broadcastable shapes."""
    _need_tensor(fn, "input", input, 1)
    _need_tensor(fn, "other", other, 2)
    _check_broadcast(input, other)


def _float_only(fn, dt):
    """torch's error for a function without an integer kernel."""
    if _cat(dt) < 2:
        raise RuntimeError('"{}_cpu" not implemented for \'{}\''.format(fn, _dtype_name(dt)))


def atan2(input, other):
    _binary_args("atan2", input, other)
    from . import where, atan, isinf, abs as abs_
    out, (y, x) = _compute(input, other)
    one = _full_like(x, 1.0)
    pi = _full_like(x, _PI)
    first = abs_(y) <= abs_(x)  # nan: second branch, whose x / y is nan
    a = atan(y / where(first, x, one))  # at (0, 0): 0 / 0, nan in the gradient as torch's
    a = where(_signbit(x), a + copysign(pi, y), a)
    b = copysign(_full_like(x, _PI / 2), y) - atan(x / where(first, one, y))
    res = where(first, a, b)
    both_zero = (y == 0) & (x == 0)
    res = where(both_zero, where(_signbit(x), copysign(pi, y), y), res)
    corner = where(_signbit(x), _full_like(x, 3 * _PI / 4), _full_like(x, _PI / 4))
    res = where(isinf(x) & isinf(y), copysign(corner, y), res)
    return _as(res, out)


arctan2 = atan2


def hypot(input, other):
    _binary_args("hypot", input, other)
    _float_only("hypot", _promote(input, other))
    from . import where, isinf, isnan, sqrt, abs as abs_
    out, (a, b) = _compute(input, other)
    a, b = abs_(a), abs_(b)
    c = (a >= b) | isnan(a)  # a nan is the larger: nan out, but for an inf
    m, n = where(c, a, b), where(c, b, a)
    r = n / m  # 0 / 0 at (0, 0): nan in the gradient there, as torch's
    res = where(m == 0, m, m * sqrt(r * r + 1))
    res = where(isinf(a) | isinf(b), _full_like(a, _math.inf), res)
    return _as(res, out)


def fmax(input, other):
    """The larger, nan only where both are nan; ties give input (and its gradient, as torch)."""
    return _fmaxmin("fmax", input, other, True)


def fmin(input, other):
    return _fmaxmin("fmin", input, other, False)


def _fmaxmin(fn, input, other, is_max):
    _binary_args(fn, input, other)
    from . import where, isnan
    dt = _promote(input, other)
    a, b = _as(input, dt), _as(other, dt)
    keep = (a >= b) if is_max else (a <= b)
    if _cat(dt) == 2:
        keep = keep | isnan(b)
    return where(keep, a, b)


def ldexp(input, other):
    """input * 2 ** other (torch's composition: exact but for overflow and subnormals)."""
    _binary_args("ldexp", input, other)
    from . import exp2
    if other.dtype == _dt()[0]:
        other = _as(other, _dt()[3])
    return input * exp2(other)


def copysign(input, other):
    """|input| with the sign bit of other (a Tensor or a number)."""
    _need_tensor("copysign", "input", input, 1)
    from . import where, abs as abs_
    if isinstance(other, Tensor):
        _check_broadcast(input, other)
    else:
        if isinstance(other, complex) or not isinstance(other, (int, float)):
            raise TypeError("copysign(): argument 'other' (position 2) must be Tensor or "
                            "Number, not {}".format(type(other).__name__))
        neg = _math.copysign(1.0, other) < 0
        out = _float_dtype(input.dtype)
        mag = abs_(_as(input, out))
        return -mag if neg else mag
    out, (x, s) = _compute(input, other)
    mag = abs_(x)
    res = where(_signbit(s), -mag, mag)
    return _as(res, out)


def logaddexp2(input, other):
    """log2(2 ** input + 2 ** other) by torch's formula: max + log1p(exp2(-|a - b|)) / ln 2."""
    _binary_args("logaddexp2", input, other)
    _float_only("logaddexp2", _promote(input, other))
    from . import where, isinf, log1p, exp2
    out, (a, b) = _compute(input, other)
    c = a >= b
    hi, lo = where(c, a, b), where(c, b, a)
    inv_ln2 = float.fromhex((1.0 / _math.log(2.0)).hex())
    res = hi + log1p(exp2(lo - hi)) * _C.full((), inv_ln2, dtype=a.dtype)
    res = where(isinf(a) & (a == b), a, res)
    return _as(res, out)


def heaviside(input, values):
    _need_tensor("heaviside", "input", input, 1)
    _need_tensor("heaviside", "values", values, 2)
    _check_broadcast(input, values)
    if input.dtype != values.dtype:
        raise RuntimeError("heaviside is not yet implemented for tensors with different dtypes.")
    from . import where
    if input.dtype == _dt()[0]:
        from . import logical_or
        return logical_or(input, values)
    pos = _as(input > 0, input.dtype)
    return where(input == 0, values, pos)


# ---- one-argument functions --------------------------------------------------------------------

def deg2rad(input):
    _need_tensor("deg2rad", "input", input, 1)
    return _as(input, _float_dtype(input.dtype)) * float(_math.pi / 180)


def rad2deg(input):
    _need_tensor("rad2deg", "input", input, 1)
    return _as(input, _float_dtype(input.dtype)) * float(180 / _math.pi)


def sgn(input):
    """sign of a real tensor (attn has no complex math here)."""
    _need_tensor("sgn", "input", input, 1)
    from . import sign
    return sign(input)


def sinc(input):
    """sin(pi x) / (pi x), 1 at 0 (gradient 0 there, as torch's)."""
    _need_tensor("sinc", "input", input, 1)
    from . import where, sin
    out = _float_dtype(input.dtype)
    x = _as(input, _dt()[3])
    zero = x == 0
    p = where(zero, _full_like(x, 1.0), x) * _PI
    res = where(zero, _full_like(x, 1.0), sin(p) / p)
    return _as(res, out)


def _sign_inf(fn, input, negative):
    _need_tensor(fn, "input", input, 1)
    from . import isinf
    if _cat(input.dtype) < 2:
        return _C.zeros(list(input.shape), dtype=_dt()[0])
    return isinf(input) & ((input < 0) if negative else (input > 0))


def isneginf(input):
    return _sign_inf("isneginf", input, True)


def isposinf(input):
    return _sign_inf("isposinf", input, False)


def isreal(input):
    """True everywhere for a real tensor; for a complex one, where the imaginary part is 0."""
    _need_tensor("isreal", "input", input, 1)
    from . import is_complex
    if is_complex(input):
        from . import view_as_real
        return view_as_real(input)[..., 1] == 0
    return _C.ones(list(input.shape), dtype=_dt()[0])


def absolute(input):
    from . import abs as abs_
    return abs_(input)


# ---- in-place forms ----------------------------------------------------------------------------

def _source(self):
    """self, or a clone of it where autograd records: the op must not save the tensor that
    copy_ then overwrites (torch's in-place kernels have their own derivatives)."""
    from . import is_grad_enabled
    return self.clone() if self.requires_grad and is_grad_enabled() else self


def _into(fn, self, result):
    """Copies result into self as torch's in-place ops do, with torch's refusals."""
    if not isinstance(self, Tensor):
        raise TypeError("descriptor '{}' requires a 'Tensor' object but received a '{}'".format(
            fn, type(self).__name__))
    from . import is_grad_enabled
    if self.requires_grad and self.is_leaf and is_grad_enabled():
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place "
                           "operation.")
    if _cat(result.dtype) > _cat(self.dtype):
        raise RuntimeError("result type {} can't be cast to the desired output type {}".format(
            _dtype_name(result.dtype), _dtype_name(self.dtype)))
    if list(result.shape) != list(self.shape):
        raise RuntimeError("output with shape {} doesn't match the broadcast shape {}".format(
            list(self.shape), list(result.shape)))
    return self.copy_(result)


def _inplace(name, op):
    def method(self, *args, **kwargs):
        if not isinstance(self, Tensor):
            raise TypeError("descriptor '{}' requires a 'Tensor' object but received a "
                            "'{}'".format(name, type(self).__name__))
        src = _source(self)
        args = [src if a is self else a for a in args]  # x.atan2_(x): both read the clone
        return _into(name, self, op(src, *args, **kwargs))
    method.__name__ = name
    method.__qualname__ = "Tensor." + name
    method.__doc__ = "In-place {}: self.copy_({}(self, ...)), returns self.".format(
        name, name[:-1])
    return method


_FUNCTIONS = ("atan2 arctan2 hypot deg2rad rad2deg sgn sinc heaviside fmax fmin ldexp copysign "
              "logaddexp2 isneginf isposinf isreal absolute").split()

# Tensor methods that call attn.<name>(self, ...), and the in-place forms of those names.
_METHODS = _FUNCTIONS[:]
_METHODS.remove("isreal")
_METHODS += ["isreal", "arccos", "arcsin", "arctan", "arccosh", "arcsinh", "arctanh",
             "greater", "greater_equal", "less", "less_equal", "not_equal", "negative"]
_INPLACE = ("atan2 arctan2 hypot deg2rad rad2deg sgn sign sinc heaviside ldexp copysign "
            "absolute xlogy arccos arcsin arctan arccosh arcsinh arctanh greater greater_equal "
            "less less_equal not_equal negative floor ceil round trunc fix frac exp2 expm1 "
            "log10 log1p log2 erf erfc cosh sinh tan acos asin atan asinh acosh atanh logit "
            "clamp_min clamp_max cumsum cumprod eq ne ge gt le lt logical_and logical_or "
            "logical_xor logical_not reciprocal square nan_to_num").split()


def install(module):
    """Puts the functions above into `module` (attn) and the methods onto Tensor."""
    g = globals()
    for name in _FUNCTIONS:
        if name not in vars(module):
            setattr(module, name, g[name])
    ns = vars(module)

    def has(name):
        return any(name in vars(k) for k in Tensor.__mro__ if k is not object)

    def bound(name):
        fn = ns[name]

        def method(self, *args, **kwargs):
            return fn(self, *args, **kwargs)
        method.__name__ = name
        method.__qualname__ = "Tensor." + name
        method.__doc__ = fn.__doc__
        return method

    for name in _METHODS:
        if not has(name) and name in ns:
            setattr(Tensor, name, bound(name))
    for name in _INPLACE:
        if not has(name + "_") and name in ns:
            setattr(Tensor, name + "_", _inplace(name + "_", ns[name]))

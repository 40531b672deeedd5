"""attn.nn.functional's composed losses, activations and norms, and their modules, against torch
1.13: values and the gradients of every input that requires grad (float32, same inputs, same
upstream gradient), bad input refused with torch's exception type."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attn  # noqa: E402
import attn.nn as ann  # noqa: E402
import attn.nn.functional as AF  # noqa: E402
import torch.nn as tnn  # noqa: E402
import torch.nn.functional as TF  # noqa: E402

RTOL, ATOL = 2e-5, 2e-6
# KLDivLoss's default reduction warns on both sides, as torch's does
pytestmark = pytest.mark.filterwarnings("ignore:reduction. 'mean' divides")


def data(shape, seed, kind="f"):
    rs = np.random.RandomState(seed)
    if kind == "f":
        return (rs.standard_normal(shape) * 2).astype(np.float32)
    if kind == "p":  # probabilities away from 0 and 1
        return rs.uniform(0.05, 0.95, shape).astype(np.float32)
    if kind == "b":
        return (rs.uniform(size=shape) < 0.5).astype(np.float32)
    raise ValueError(kind)


def compare(fn_t, fn_a, arrays, grads=None, rtol=RTOL, atol=ATOL, extra_t=(), extra_a=()):
    """fn(*tensors, *extra) on torch and attn; the first len(grads) arrays require grad."""
    grads = range(len(arrays)) if grads is None else grads
    tt = [torch.tensor(a, requires_grad=i in grads) for i, a in enumerate(arrays)]
    at = [attn.tensor(a, requires_grad=i in grads) for i, a in enumerate(arrays)]
    ot, oa = fn_t(*tt, *extra_t), fn_a(*at, *extra_a)
    np.testing.assert_allclose(oa.detach().numpy(), ot.detach().numpy(), rtol=rtol, atol=atol)
    assert tuple(oa.shape) == tuple(ot.shape)
    if not ot.requires_grad:
        return
    r = data(tuple(ot.shape), 99)
    ot.backward(torch.tensor(r))
    oa.backward(attn.tensor(r))
    for i in grads:
        np.testing.assert_allclose(at[i].grad.numpy(), tt[i].grad.numpy(), rtol=rtol,
                                   atol=atol * 10, err_msg="gradient of input %d" % i)


SHAPE = (6, 5)


@pytest.mark.parametrize("name,kw", [
    ("mse_loss", {}), ("mse_loss", {"reduction": "sum"}), ("mse_loss", {"reduction": "none"}),
    ("l1_loss", {}), ("l1_loss", {"reduction": "none"}),
    ("smooth_l1_loss", {}), ("smooth_l1_loss", {"beta": 0.5, "reduction": "none"}),
    ("smooth_l1_loss", {"beta": 0.0}), ("huber_loss", {"delta": 1.5}),
    ("huber_loss", {"reduction": "none"}),
])
def test_regression_losses(name, kw):
    compare(lambda a, b: getattr(TF, name)(a, b, **kw), lambda a, b: getattr(AF, name)(a, b, **kw),
            [data(SHAPE, 1), data(SHAPE, 2)])


@pytest.mark.parametrize("kw", [{}, {"reduction": "sum"}, {"reduction": "none"},
                                {"ignore_index": 2}, {"weight": True}, {"weight": True,
                                                                        "ignore_index": 1}])
@pytest.mark.parametrize("shape", [(7, 4), (3, 4, 5), (4,)])
def test_nll_loss(kw, shape):
    x = data(shape, 3)
    tgt_shape = (shape[0],) + shape[2:] if len(shape) > 1 else ()
    t = np.random.RandomState(4).randint(0, shape[-1] if len(shape) == 1 else shape[1],
                                         tgt_shape).astype(np.int64)
    kw = dict(kw)
    wt = wa = None
    if kw.pop("weight", False):
        w = np.random.RandomState(5).uniform(0.5, 2, shape[1] if len(shape) > 1 else shape[0])
        wt, wa = torch.tensor(w.astype(np.float32)), attn.tensor(w.astype(np.float32))
    compare(lambda a: TF.nll_loss(a.log_softmax(1 if len(shape) > 1 else 0), torch.tensor(t),
                                  weight=wt, **kw),
            lambda a: AF.nll_loss(a.log_softmax(1 if len(shape) > 1 else 0), attn.tensor(t),
                                  weight=wa, **kw), [x])


def test_nll_loss_errors():
    for F, M in ((TF, torch), (AF, attn)):
        x = M.tensor(data((3, 4), 6))
        with pytest.raises(IndexError, match="out of bounds"):
            F.nll_loss(x, M.tensor([0, 4, 1]))
        with pytest.raises(ValueError, match="to match target batch_size"):
            F.nll_loss(x, M.tensor([0, 1]))


@pytest.mark.parametrize("kw", [{}, {"reduction": "none"}, {"weight": True}])
def test_binary_cross_entropy(kw):
    kw = dict(kw)
    w = data(SHAPE, 7, "p") if kw.pop("weight", False) else None
    compare(lambda a, b: TF.binary_cross_entropy(a, b, None if w is None else torch.tensor(w),
                                                 **kw),
            lambda a, b: AF.binary_cross_entropy(a, b, None if w is None else attn.tensor(w),
                                                 **kw),
            [data(SHAPE, 8, "p"), data(SHAPE, 9, "b")], grads=[0])
    for F, M in ((TF, torch), (AF, attn)):
        with pytest.raises(RuntimeError, match="between 0 and 1"):
            F.binary_cross_entropy(M.tensor([0.5, 1.5]), M.tensor([0.0, 1.0]))


@pytest.mark.parametrize("kw", [{}, {"reduction": "sum"}, {"pos_weight": True},
                                {"weight": True, "reduction": "none"}])
def test_binary_cross_entropy_with_logits(kw):
    kw = dict(kw)
    pw = data((SHAPE[1],), 10, "p") * 3 if kw.pop("pos_weight", False) else None
    w = data(SHAPE, 11, "p") if kw.pop("weight", False) else None
    x = data(SHAPE, 12) * 10  # large logits: the stable form matters
    compare(lambda a, b: TF.binary_cross_entropy_with_logits(
                a, b, None if w is None else torch.tensor(w),
                pos_weight=None if pw is None else torch.tensor(pw), **kw),
            lambda a, b: AF.binary_cross_entropy_with_logits(
                a, b, None if w is None else attn.tensor(w),
                pos_weight=None if pw is None else attn.tensor(pw), **kw),
            [x, data(SHAPE, 13, "p")])


@pytest.mark.parametrize("kw", [{"reduction": "batchmean"}, {"reduction": "sum"},
                                {"reduction": "none"}, {"reduction": "batchmean",
                                                        "log_target": True}])
def test_kl_div(kw):
    p = data(SHAPE, 14, "p")
    p[0, 0] = 0.0  # a zero target: 0 log 0 is 0
    tgt = np.log(p + 1e-3) if kw.get("log_target") else p
    compare(lambda a, b: TF.kl_div(a.log_softmax(1), b, **kw),
            lambda a, b: AF.kl_div(a.log_softmax(1), b, **kw), [data(SHAPE, 15), tgt])


ACTIVATIONS = [
    ("softplus", {}), ("softplus", {"beta": 2.0, "threshold": 5.0}), ("leaky_relu", {}),
    ("leaky_relu", {"negative_slope": 0.2}), ("elu", {}), ("elu", {"alpha": 0.5}), ("selu", {}),
    ("celu", {"alpha": 1.5}), ("glu", {"dim": 0}), ("logsigmoid", {}), ("hardtanh", {}),
    ("hardtanh", {"min_val": -0.5, "max_val": 2.0}), ("relu6", {}), ("softmin", {"dim": 1}),
    ("mish", {}), ("hardswish", {}), ("hardsigmoid", {}), ("softsign", {}),
]


@pytest.mark.parametrize("name,kw", ACTIVATIONS)
def test_activations(name, kw):
    x = data(SHAPE, 16) * 4  # beyond the thresholds of softplus, hardtanh, relu6, ...
    x[0, :3] = [40.0, -40.0, 100.0]  # exp overflows in the discarded branch: no nan
    compare(lambda a: getattr(TF, name)(a, **kw), lambda a: getattr(AF, name)(a, **kw), [x])


def test_threshold_and_glu_errors():
    compare(lambda a: TF.threshold(a, 0.5, -1.0), lambda a: AF.threshold(a, 0.5, -1.0),
            [data(SHAPE, 17)])
    for F, M in ((TF, torch), (AF, attn)):
        with pytest.raises(RuntimeError, match="Halving dimension must be even"):
            F.glu(M.ones(3, 5))


@pytest.mark.parametrize("p", [2, 1, 3, float("inf"), 0.5])
@pytest.mark.parametrize("dim,keepdim", [(None, False), (1, False), (0, True), ((0, 1), False)])
def test_norm(p, dim, keepdim):
    x = data(SHAPE, 18)
    x[2] = 0.0  # a zero row: gradient 0, not nan
    compare(lambda a: torch.norm(a, p, dim, keepdim), lambda a: attn.norm(a, p, dim, keepdim),
            [x], rtol=5e-5)
    compare(lambda a: a.norm(p, dim), lambda a: a.norm(p, dim), [x], rtol=5e-5)


@pytest.mark.parametrize("p,dim", [(2.0, 1), (1.0, 0), (2.0, -1)])
def test_normalize(p, dim):
    x = data((4, 6), 19)
    x[1] = 0.0
    compare(lambda a: TF.normalize(a, p, dim), lambda a: AF.normalize(a, p, dim), [x])


def test_cosine_similarity_and_pairwise_distance():
    a, b = data((5, 8), 20), data((5, 8), 21)
    compare(lambda x, y: TF.cosine_similarity(x, y), lambda x, y: AF.cosine_similarity(x, y),
            [a, b])
    compare(lambda x, y: TF.cosine_similarity(x, y, dim=0),
            lambda x, y: AF.cosine_similarity(x, y, dim=0), [a, b[:1]])  # broadcast
    compare(lambda x, y: TF.pairwise_distance(x, y), lambda x, y: AF.pairwise_distance(x, y),
            [a, b])
    compare(lambda x, y: TF.pairwise_distance(x, y, p=1.0, keepdim=True),
            lambda x, y: AF.pairwise_distance(x, y, p=1.0, keepdim=True), [a, b])


MODULES = [
    ("MSELoss", (), 2), ("L1Loss", (), 2), ("SmoothL1Loss", (), 2), ("HuberLoss", (), 2),
    ("KLDivLoss", (), 2), ("LeakyReLU", (0.1,), 1), ("ELU", (), 1), ("SELU", (), 1),
    ("CELU", (), 1), ("GLU", (), 1), ("Softplus", (), 1), ("LogSigmoid", (), 1),
    ("Hardtanh", (), 1), ("ReLU6", (), 1), ("Mish", (), 1), ("Hardswish", (), 1),
    ("Hardsigmoid", (), 1), ("Softsign", (), 1), ("Softmax", (1,), 1), ("LogSoftmax", (1,), 1),
    ("Softmin", (1,), 1), ("CosineSimilarity", (), 2), ("PairwiseDistance", (), 2),
    ("Flatten", (0,), 1), ("BCEWithLogitsLoss", (), 2),
]


@pytest.mark.parametrize("name,args,n", MODULES)
def test_modules(name, args, n):
    mt, ma = getattr(tnn, name)(*args), getattr(ann, name)(*args)
    assert repr(ma) == repr(mt)
    compare(lambda *xs: mt(*xs), lambda *xs: ma(*xs), [data((4, 6), 22 + i) for i in range(n)])


def test_loss_modules_with_weights_and_unflatten():
    t = np.random.RandomState(30).randint(0, 6, (4,)).astype(np.int64)
    w = data((6,), 31, "p")
    mt, ma = tnn.NLLLoss(torch.tensor(w)), ann.NLLLoss(attn.tensor(w))
    compare(lambda x: mt(x.log_softmax(1), torch.tensor(t)),
            lambda x: ma(x.log_softmax(1), attn.tensor(t)), [data((4, 6), 32)])
    bt, ba = tnn.BCELoss(), ann.BCELoss()
    compare(lambda x, y: bt(x, y), lambda x, y: ba(x, y), [data((4, 6), 33, "p"),
                                                          data((4, 6), 34, "b")], grads=[0])
    ut, ua = tnn.Unflatten(1, (2, 3)), ann.Unflatten(1, (2, 3))
    assert repr(ua) == repr(ut)
    compare(lambda x: ut(x), lambda x: ua(x), [data((4, 6), 35)])
    assert "weight" in dict(ma.named_buffers())


def parameter_containers(M):
    """ParameterList / ParameterDict in a module: repr, names, state_dict keys, gradients."""
    nn = M.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.ws = nn.ParameterList([nn.Parameter(M.ones(2, 3)), M.zeros(4)])
            self.ws.append(nn.Parameter(M.ones(1)))
            self.d = nn.ParameterDict({"a": nn.Parameter(M.ones(3)), "b": M.zeros(2)})
            self.d["c"] = nn.Parameter(M.full((2,), 2.0))

    net = Net()
    loss = sum(p.sum() for p in net.ws) + net.d["c"].sum() * 3
    loss.backward()
    return [repr(net), [(n, tuple(p.shape)) for n, p in net.named_parameters()],
            list(net.state_dict().keys()), len(net.ws), len(net.d), "a" in net.d,
            list(net.d.keys()), [None if p.grad is None else p.grad.tolist()
                                 for p in net.parameters()],
            [tuple(p.shape) for p in net.ws[1:]], isinstance(net.ws[1], nn.Parameter)]


def test_parameter_list_and_dict():
    assert parameter_containers(attn) == parameter_containers(torch)
    with pytest.raises(TypeError):
        attn.nn.ParameterList().extend(3)
    with pytest.raises(IndexError):
        attn.nn.ParameterList([attn.nn.Parameter(attn.ones(1))])[1]
    with pytest.raises(KeyError):
        attn.nn.ParameterDict()["missing"]

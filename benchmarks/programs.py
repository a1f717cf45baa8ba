"""The benchmark programs, each written once against a numpy-like namespace `m`.

A program body takes the namespace (numpy, jax.numpy, pytensor.tensor, verglas, cupy, each
completed with `softmax` and `logsumexp` in peers.py) and its inputs, and returns one output
or a list of them. `wrt` asks for the gradients of the first (scalar) output with respect to
those inputs; frameworks without autodiff (numpy, cupy) run the hand-written `reference`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

SEED = 20240509


@dataclass(frozen=True)
class Case:
    """One measured variant of a program: inputs, body, optional gradient."""

    program: str
    label: str
    names: tuple[str, ...]
    data: Callable[[np.random.Generator], list[np.ndarray]]
    body: Callable
    wrt: tuple[int, ...] = ()
    reference: Callable | None = None      # (m, *arrays) -> outputs, for numpy and cupy
    tags: tuple[str, ...] = ()             # "overhead": report per-call microseconds

    def make_inputs(self) -> list[np.ndarray]:
        """The inputs, generated with the fixed seed."""
        return self.data(np.random.default_rng(SEED))


def _size_label(n: int) -> str:
    """`10000000` -> `1e7` (exact powers of ten), else the integer."""
    exp = len(str(n)) - 1
    return f"1e{exp}" if n == 10**exp else str(n)


# --- bodies -----------------------------------------------------------------------------------

def ew_chain(m, x):
    """A fusible elementwise chain."""
    return m.exp(m.sin(x) * 2 + m.cos(x) ** 2) / (1 + m.abs(x))


def softmax(m, x):
    """Softmax along the last axis."""
    return m.softmax(x, axis=-1)


def logsumexp(m, x):
    """Log-sum-exp along axis 1."""
    return m.logsumexp(x, axis=1)


def full_sum(m, x):
    """A plain full reduction."""
    return m.sum(x)


def mse_loss(m, p, t):
    """A mean squared error as users write it: a whole-array reduction of a map."""
    return ((p - t) ** 2).mean()


def argmax_rows(m, x):
    """Each row's predicted class."""
    return x.argmax(axis=1)


def symmetrize(m, a):
    """The symmetric part of a matrix: an elementwise step reading a transposed view."""
    return 0.5 * (a + a.T)


def pairwise_dist(m, a, b):
    """Squared distances between every row of a and every row of b, through new axes: a
    reduction over the last axis of a map that broadcasts."""
    return ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)


def standardize(m, x):
    """Columns to zero mean and unit deviation: reductions over the first axis."""
    return (x - x.mean(axis=0)) / (x.std(axis=0) + 1e-5)


def add_one(m, x):
    """The smallest program: per-call overhead."""
    return x + 1


def twenty_kernels(m, x):
    """Ten (reduce, elementwise) pairs: twenty kernels when nothing fuses across reductions."""
    for _ in range(10):
        x = m.tanh(x) + m.max(x)
    return x


def big_graph(m, x, *a):
    """The sum of `len(a)` terms `a_i * sin(x + i)`: thousands of nodes."""
    acc = a[0] * m.sin(x)
    for i in range(1, len(a)):
        acc = acc + a[i] * m.sin(x + i)
    return acc


def big_graph_indexed(m, x, a, terms: int):
    """big_graph as many users write it: one coefficient vector, indexed per term."""
    acc = a[0] * m.sin(x)
    for i in range(1, terms):
        acc = acc + a[i] * m.sin(x + i)
    return acc


def mlp_loss(m, x, t, w1, b1, w2, b2, w3, b3):
    """Mean squared error of a tanh MLP with a linear output layer."""
    h1 = m.tanh(x @ w1 + b1)
    h2 = m.tanh(h1 @ w2 + b2)
    out = h2 @ w3 + b3
    return m.mean((out - t) ** 2)


def mlp_backprop(m, x, t, w1, b1, w2, b2, w3, b3):
    """Hand-written loss and gradients of `mlp_loss` (for numpy and cupy)."""
    h1 = m.tanh(x @ w1 + b1)
    h2 = m.tanh(h1 @ w2 + b2)
    diff = h2 @ w3 + b3 - t
    loss = m.mean(diff**2)
    d3 = diff * (2 / diff.size)
    d2 = (d3 @ w3.T) * (1 - h2 * h2)
    d1 = (d2 @ w2.T) * (1 - h1 * h1)
    return [loss, x.T @ d1, m.sum(d1, axis=0), h1.T @ d2, m.sum(d2, axis=0),
            h2.T @ d3, m.sum(d3, axis=0)]


def gelu_mlp(m, x, w1, w2):
    """A transformer's MLP: GELU (tanh form, with its cube) between two matmuls."""
    f = np.float32  # (typed constants: PyTensor makes float64 of float32 * a Python float)
    h = x @ w1
    g = f(0.5) * h * (f(1) + m.tanh(f(0.7978845608) * (h + f(0.044715) * h ** 3)))
    return g @ w2


def softmax3d(m, x):
    """Softmax along the last axis of a 3-d (batch, query, key) array: attention weights."""
    return m.softmax(x, axis=-1)


def layernorm(m, x, gamma, beta):
    """Layer normalization over the last axis of a 3-d (batch, token, feature) array."""
    mu = m.mean(x, axis=-1, keepdims=True)
    d = x - mu
    var = m.mean(d * d, axis=-1, keepdims=True)
    return d / m.sqrt(var + np.float32(1e-5)) * gamma + beta


def rmsnorm(m, x, gamma):
    """RMS normalization over the last axis of a 3-d array."""
    return x / m.sqrt(m.mean(x * x, axis=-1, keepdims=True) + np.float32(1e-6)) * gamma


def _gelu(m, h):
    f = np.float32
    return f(0.5) * h * (f(1) + m.tanh(f(0.7978845608) * (h + f(0.044715) * h ** 3)))


def attention(m, x, wq, wk, wv, scale):
    """Single-head self-attention over a (batch, token, feature) array: 3-d batched matmuls
    and a 3-d softmax."""
    q, k, v = x @ wq, x @ wk, x @ wv
    return m.softmax((q @ k.transpose(0, 2, 1)) * np.float32(scale), axis=-1) @ v


def transformer_block(m, x, g1, b1, wq, wk, wv, wo, g2, b2, w1, w2, scale):
    """A pre-norm transformer block: layernorm, self-attention, residual, layernorm, GELU MLP,
    residual."""
    x = x + attention(m, layernorm(m, x, g1, b1), wq, wk, wv, scale) @ wo
    return x + _gelu(m, layernorm(m, x, g2, b2) @ w1) @ w2


def transformer_loss(m, *args):
    """The block's output's mean square: a scalar to differentiate."""
    y = transformer_block(m, *args)
    return m.mean(y * y)


def transformer_backprop(m, x, g1, b1, wq, wk, wv, wo, g2, b2, w1, w2, scale):
    """Hand-written loss and gradients of `transformer_loss` for (wq, wk, wv, wo, w1, w2)."""
    f = np.float32
    c, eps = f(0.7978845608), f(1e-5)

    def ln(z, g, b):
        d = z - z.mean(-1, keepdims=True)
        r = 1 / np.sqrt((d * d).mean(-1, keepdims=True) + eps)
        return d * r * g + b, d * r, r

    def ln_back(dh, g, n, r):
        dn = dh * g
        return r * (dn - dn.mean(-1, keepdims=True) - n * (dn * n).mean(-1, keepdims=True))

    def flat(z):
        return z.reshape(-1, z.shape[-1])

    h1, _, _ = ln(x, g1, b1)
    q, k, v = h1 @ wq, h1 @ wk, h1 @ wv
    s = (q @ k.transpose(0, 2, 1)) * f(scale)
    e = np.exp(s - s.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    a = p @ v
    x2 = x + a @ wo
    h2, n2, r2 = ln(x2, g2, b2)
    u = h2 @ w1
    t = np.tanh(c * (u + f(0.044715) * u ** 3))
    gl = f(0.5) * u * (1 + t)
    y = x2 + gl @ w2
    dy = y * f(2 / y.size)
    dw2 = flat(gl).T @ flat(dy)
    du = (dy @ w2.T) * (f(0.5) * (1 + t) + f(0.5) * u * (1 - t * t) * c
                        * (1 + f(3 * 0.044715) * u * u))
    dw1 = flat(h2).T @ flat(du)
    dx2 = dy + ln_back(du @ w1.T, g2, n2, r2)
    dwo = flat(a).T @ flat(dx2)
    da = dx2 @ wo.T
    dp = da @ v.transpose(0, 2, 1)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True)) * f(scale)
    dq, dk, dv = ds @ k, ds.transpose(0, 2, 1) @ q, p.transpose(0, 2, 1) @ da
    return [np.mean(y * y), flat(h1).T @ flat(dq), flat(h1).T @ flat(dk),
            flat(h1).T @ flat(dv), dwo, dw1, dw2]


def embedding_loss(m, table, ids, w):
    """Rows of an embedding table gathered by integer ids, then a tanh readout: the gradient
    of the table is a scatter-add of rows."""
    return m.mean(m.tanh(table[ids] @ w))


def embedding_backprop(m, table, ids, w):
    """Hand-written loss and gradients (table, w) of `embedding_loss`."""
    h = table[ids]
    t = np.tanh(h @ w)
    dz = (1 - t * t) / np.float32(t.size)
    dtable = np.zeros_like(table)
    np.add.at(dtable, ids, dz @ w.T)
    return [t.mean(), dtable, h.T @ dz]


def classifier_loss(m, table, ids, w1, b1, w2, b2, onehot):
    """Embedding -> mean pool over tokens -> tanh MLP -> log_softmax -> cross-entropy."""
    h = m.tanh(m.mean(table[ids], axis=1) @ w1 + b1)
    logits = h @ w2 + b2
    logp = logits - m.logsumexp(logits, axis=1)[:, None]
    return -m.mean(m.sum(onehot * logp, axis=1))


def classifier_backprop(m, table, ids, w1, b1, w2, b2, onehot):
    """Hand-written loss and gradients (table, w1, b1, w2, b2) of `classifier_loss`."""
    pooled = table[ids].mean(1)
    h = np.tanh(pooled @ w1 + b1)
    logits = h @ w2 + b2
    top = logits.max(1, keepdims=True)
    e = np.exp(logits - top)
    logp = logits - (np.log(e.sum(1, keepdims=True)) + top)
    n = np.float32(len(ids))
    dlogits = (np.exp(logp) * onehot.sum(1, keepdims=True) - onehot) / n
    dh = (dlogits @ w2.T) * (1 - h * h)
    dpooled = dh @ w1.T
    dtable = np.zeros_like(table)
    np.add.at(dtable, ids, np.broadcast_to((dpooled / np.float32(ids.shape[1]))[:, None],
                                            (*ids.shape, table.shape[1])))
    return [-np.mean(np.sum(onehot * logp, axis=1)), dtable, pooled.T @ dh, dh.sum(0),
            h.T @ dlogits, dlogits.sum(0)]


def scan_scalar(m, x0, u):
    """x_t = 0.5 * x_{t-1} + u_t: a scalar recurrence, one cheap step per element of u; the
    trace of x. `m.recurrence(step, xs, init)` is each framework's loop (see peers.py)."""
    return m.recurrence(lambda x, u_t: 0.5 * x + u_t, u, x0)


def scan_rnn(m, h0, x, w, u, b):
    """h_t = tanh(h_{t-1} @ w + x_t @ u + b) over the rows of x; the trace of h."""
    return m.recurrence(lambda h, x_t: m.tanh(h @ w + x_t @ u + b), x, h0)


def scan_ew(m, h0, x, a):
    """h_t = tanh(a * h_{t-1} + x_t) over the rows of x (a: a decay per unit): a vector
    recurrence with no product, each step its elementwise work alone (as users write a leaky
    integrator or an EMA)."""
    return m.recurrence(lambda h, x_t: m.tanh(a * h + x_t), x, h0)


def rnn_loss(m, h0, x, w, u, b):
    """The mean square of an RNN's trace: its gradients go back through every step."""
    return m.mean(scan_rnn(m, h0, x, w, u, b) ** 2)


def rnn_backprop(m, h0, x, w, u, b):
    """Hand-written loss and gradients (h0, x, w) of `rnn_loss` (for numpy and cupy)."""
    hs = scan_rnn(m, h0, x, w, u, b)
    loss = m.mean(hs**2)
    direct = hs * (2 / hs.size)
    carry, dw, dx = h0 * 0, w * 0, x * 0
    for t in range(hs.shape[0] - 1, -1, -1):
        da = (direct[t] + carry) * (1 - hs[t] * hs[t])
        prev = hs[t - 1] if t else h0
        dw = dw + prev[:, None] * da[None, :]
        dx[t] = da @ u.T
        carry = da @ w.T
    return [loss, carry, dx, dw]


def dense(m, h, w, b):
    """One residual tanh layer."""
    return h + m.tanh(h @ w + b)


def layers(m, h, w, b, uses: int, shared: bool):
    """`dense` applied `uses` times with the same weights: through one reusable subgraph
    (`m.reusable`: an OpFromGraph in verglas and PyTensor, the function itself elsewhere)
    when `shared`, else written out each time."""
    layer = m.reusable(lambda h_, w_, b_: dense(m, h_, w_, b_)) if shared else (
        lambda h_, w_, b_: dense(m, h_, w_, b_))
    for _ in range(uses):
        h = layer(h, w, b)
    return h


# --- cases per program --------------------------------------------------------------------------

def _normal(shape, dtype, scale=1.0):
    """A data maker for one normal array."""
    return lambda rng: [(rng.standard_normal(shape) * scale).astype(dtype)]


def _ew_chain(device: str, quick: bool) -> list[Case]:
    sizes = [10_000] if quick else [10**8] if device == "cuda" else [10**6, 10**7]
    dtypes = ["float32"] if device == "cuda" else ["float32", "float64"]
    return [Case("ew_chain", f"ew_chain[{_size_label(n)},{dt[0]}{dt[-2:]}]", ("x",),
                 _normal((n,), dt), ew_chain) for n in sizes for dt in dtypes]


def _softmax(device: str, quick: bool) -> list[Case]:
    n = 100 if quick else 4096 if device == "cuda" else 1000
    return [Case("softmax", f"softmax[{n}x{n}]", ("x",), _normal((n, n), "float32"), softmax)]


def _logsumexp(device: str, quick: bool) -> list[Case]:
    shape = (256, 64) if quick else (4096, 512)
    return [Case("logsumexp", f"logsumexp[{shape[0]}x{shape[1]}]", ("x",),
                 _normal(shape, "float32"), logsumexp)]


def _sum(device: str, quick: bool) -> list[Case]:
    n = 100_000 if quick else 10**8 if device == "cuda" else 10**7
    # uniform [0, 1): no cancellation, so float32 results agree to 1e-4 whatever the order
    def data(rng):
        return [rng.random(n, dtype=np.float32)]

    return [Case("sum", f"sum[{_size_label(n)}]", ("x",), data, full_sum)]


def _spellings(name: str, device: str, quick: bool) -> list[Case]:
    """Programs as users spell them (methods, .T, Python-float constants), large arrays."""
    if name == "mse_loss":
        n = 10_000 if quick else 10**7
        return [Case(name, f"mse_loss[{_size_label(n)},f32]", ("p", "t"),
                     lambda rng: [rng.random(n, dtype=np.float32),
                                  rng.random(n, dtype=np.float32)], mse_loss)]
    if name == "argmax_rows":
        shape = (64, 100) if quick else (4096, 1024)
        return [Case(name, f"argmax_rows[{shape[0]}x{shape[1]},f32]", ("x",),
                     _normal(shape, "float32"), argmax_rows)]
    if name == "pairwise_dist":
        (na, nb), d = ((16, 24), 8) if quick else ((512, 1024), 64)

        def data(rng):
            return [rng.standard_normal((na, d)).astype("float32"),
                    rng.standard_normal((nb, d)).astype("float32")]
        return [Case(name, f"pairwise_dist[{na}x{nb}x{d},f32]", ("a", "b"), data,
                     pairwise_dist)]
    if name == "standardize":
        shape = (64, 100) if quick else (4096, 1024)
        return [Case(name, f"standardize[{shape[0]}x{shape[1]},f32]", ("x",),
                     _normal(shape, "float32"), standardize)]
    side = 64 if quick else 4096
    return [Case(name, f"symmetrize[{side}x{side},f32]", ("a",),
                 _normal((side, side), "float32"), symmetrize)]


def _call_overhead(device: str, quick: bool) -> list[Case]:
    return [Case("call_overhead", "call_overhead[4,f64]", ("x",), _normal((4,), "float64"),
                 add_one, tags=("overhead",))]


def _launch_overhead(device: str, quick: bool) -> list[Case]:
    return [Case("launch_overhead", "launch_overhead[20 kernels,1024]", ("x",),
                 _normal((1024,), "float32", 0.1), twenty_kernels, tags=("overhead",))]


def _big_graph(device: str, quick: bool, terms: int | None = None) -> list[Case]:
    terms = terms or (50 if quick else 500)
    n = 1000 if quick else 10_000

    def data(rng):
        return [rng.standard_normal(n), *(np.asarray(v) for v in rng.standard_normal(terms))]

    names = ("x", *(f"a_{i}" for i in range(terms)))
    return [Case("big_graph", f"big_graph[{terms} terms,{n}]", names, data, big_graph)]


def _big_graph_indexed(device: str, quick: bool, terms: int | None = None) -> list[Case]:
    terms = terms or (50 if quick else 500)
    n = 1000 if quick else 10_000

    def data(rng):
        return [rng.standard_normal(n), rng.standard_normal(terms)]

    def body(m, x, a):
        return big_graph_indexed(m, x, a, terms)

    return [Case("big_graph_indexed", f"big_graph_indexed[{terms} terms,{n}]", ("x", "a"), data,
                 body)]


def mlp_sizes(device: str, quick: bool) -> tuple[int, list[int]]:
    """Batch and layer widths (input, hidden..., output)."""
    if quick:
        return 32, [64, 64, 64, 10]
    if device == "cuda":
        return 4096, [4096, 4096, 4096, 10]
    return 256, [512, 512, 512, 10]


def _mlp_data(batch: int, widths: list[int]):
    """Inputs x, target t, then (w, b) per layer, scaled so tanh stays out of saturation."""
    def data(rng):
        out = [rng.standard_normal((batch, widths[0])), rng.standard_normal((batch, widths[-1]))]
        for fan_in, fan_out in itertools.pairwise(widths):
            out.append(rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in))
            out.append(rng.standard_normal(fan_out) * 0.1)
        return [a.astype("float32") for a in out]
    return data


MLP_NAMES = ("x", "t", "w1", "b1", "w2", "b2", "w3", "b3")


def _mlp(device: str, quick: bool, grad: bool) -> list[Case]:
    batch, widths = mlp_sizes(device, quick)
    name = "mlp_grad" if grad else "mlp_fwd"
    label = f"{name}[{batch},{'-'.join(map(str, widths))}]"
    if grad:
        return [Case(name, label, MLP_NAMES, _mlp_data(batch, widths), mlp_loss,
                     wrt=tuple(range(2, 8)), reference=mlp_backprop)]
    return [Case(name, label, MLP_NAMES, _mlp_data(batch, widths), mlp_loss)]


def _scan_scalar(device: str, quick: bool) -> list[Case]:
    n = 1000 if quick else 100_000

    def data(rng):
        return [np.asarray(0.5), rng.standard_normal(n)]
    return [Case("scan_scalar", f"scan_scalar[{_size_label(n)} steps]", ("x0", "u"), data,
                 scan_scalar)]


def _rnn_data(steps: int, hidden: int, dtype: str):
    """h0, x (steps x hidden), w, u (scaled so tanh stays out of saturation), b."""
    def data(rng):
        scale = 1 / np.sqrt(hidden)
        out = [rng.standard_normal(hidden) * 0.1, rng.standard_normal((steps, hidden)),
               rng.standard_normal((hidden, hidden)) * scale,
               rng.standard_normal((hidden, hidden)) * scale, rng.standard_normal(hidden) * 0.1]
        return [a.astype(dtype) for a in out]
    return data


def _scan_ew(device: str, quick: bool) -> list[Case]:
    steps, width = (50, 8) if quick else (1000, 256)

    def data(rng):
        return [rng.standard_normal(width).astype("float32"),
                rng.standard_normal((steps, width)).astype("float32"),
                rng.uniform(0.5, 0.95, width).astype("float32")]
    return [Case("scan_ew", f"scan_ew[T={steps},H={width},f32]", ("h0", "x", "a"), data,
                 scan_ew)]


def _rnn(device: str, quick: bool, grad: bool) -> list[Case]:
    steps, hidden = (50, 8) if quick else (1000, 64)
    name = "rnn_grad" if grad else "scan_rnn"
    return [Case(name, f"{name}[T={steps},H={hidden},{dt[0]}{dt[-2:]}]",
                 ("h0", "x", "w", "u", "b"), _rnn_data(steps, hidden, dt),
                 rnn_loss if grad else scan_rnn, wrt=(0, 1, 2) if grad else (),
                 reference=rnn_backprop if grad else None)
            for dt in ("float32", "float64")]


def _layers(device: str, quick: bool, uses: int, shared: bool) -> list[Case]:
    batch, width = (16, 32) if quick else (256, 256)

    def data(rng):
        return [rng.standard_normal((batch, width)).astype("float32"),
                (rng.standard_normal((width, width)) * 0.1 / np.sqrt(width)).astype("float32"),
                (rng.standard_normal(width) * 0.1).astype("float32")]

    name = {(20, True): "ofg_layers", (1, True): "ofg_once", (20, False): "ofg_inlined"}[
        (uses, shared)]
    return [Case(name, f"{name}[{uses}x dense {batch}x{width}]", ("h", "w", "b"), data,
                 lambda m, h, w, b: layers(m, h, w, b, uses, shared))]


def _models(name: str, device: str, quick: bool) -> list[Case]:
    """Pieces of a transformer block (issue 17's sizes: B=8, T=128, D=256, hidden 1024)."""
    b, t, d, hidden = (2, 8, 16, 32) if quick else (8, 128, 256, 1024)

    def normal(*shape, scale=1.0):
        return lambda rng: rng.standard_normal(shape).astype("float32") * np.float32(scale)

    if name == "gelu_mlp":
        def data(rng):
            return [normal(b * t, d)(rng), normal(d, hidden, scale=d ** -0.5)(rng),
                    normal(hidden, d, scale=hidden ** -0.5)(rng)]
        return [Case(name, f"gelu_mlp[{b * t}x{d}-{hidden}-{d}]", ("x", "w1", "w2"), data,
                     gelu_mlp)]
    if name == "softmax3d":
        return [Case(name, f"softmax3d[{b}x{t}x{t * 2}]", ("x",),
                     lambda rng: [normal(b, t, 2 * t)(rng)], softmax3d)]
    if name == "layernorm":
        return [Case(name, f"layernorm[{b}x{t}x{d}]", ("x", "gamma", "beta"),
                     lambda rng: [normal(b, t, d)(rng), normal(d)(rng), normal(d)(rng)],
                     layernorm)]
    if name == "rmsnorm":
        return [Case(name, f"rmsnorm[{b}x{t}x{d}]", ("x", "gamma"),
                     lambda rng: [normal(b, t, d)(rng), normal(d)(rng)], rmsnorm)]
    scale = d ** -0.5
    if name == "attention":
        return [Case(name, f"attention[{b}x{t}x{d}]", ("x", "wq", "wk", "wv"),
                     lambda rng: [normal(b, t, d)(rng), *(normal(d, d, scale=scale)(rng)
                                                          for _ in range(3))],
                     lambda m, *a: attention(m, *a, scale))]
    if name == "transformer_block":
        def data(rng):
            ones, zeros = np.ones(d, "float32"), np.zeros(d, "float32")
            return [normal(b, t, d)(rng), ones, zeros,
                    *(normal(d, d, scale=scale)(rng) for _ in range(4)), ones, zeros,
                    normal(d, hidden, scale=scale)(rng),
                    normal(hidden, d, scale=hidden ** -0.5)(rng)]
        names = ("x", "g1", "b1", "wq", "wk", "wv", "wo", "g2", "b2", "w1", "w2")
        return [Case(name, f"transformer_block[{b}x{t}x{d},{hidden}]", names, data,
                     lambda m, *a: transformer_block(m, *a, scale)),
                Case(name, f"transformer_grad[{b}x{t}x{d},{hidden}]", names, data,
                     lambda m, *a: transformer_loss(m, *a, scale), wrt=(3, 4, 5, 6, 9, 10),
                     reference=lambda m, *a: transformer_backprop(m, *a, scale))]
    vocab, tokens = (50, 4) if quick else (10000, 32)
    if name == "embedding":
        def data(rng):
            return [normal(vocab, d, scale=0.1)(rng),
                    rng.integers(0, vocab, size=b * t).astype("int64"),
                    normal(d, d, scale=scale)(rng)]
        return [Case(name, f"embedding[{b * t} of {vocab}x{d}]", ("table", "ids", "w"), data,
                     embedding_loss, wrt=(0, 2), reference=embedding_backprop)]
    classes = 10

    def data(rng):
        labels = rng.integers(0, classes, size=b * t)
        return [normal(vocab, d, scale=0.1)(rng),
                rng.integers(0, vocab, size=(b * t, tokens)).astype("int64"),
                normal(d, hidden, scale=scale)(rng), np.zeros(hidden, "float32"),
                normal(hidden, classes, scale=hidden ** -0.5)(rng),
                np.zeros(classes, "float32"), np.eye(classes, dtype="float32")[labels]]
    return [Case(name, f"classifier[{b * t}x{tokens} of {vocab}x{d},{hidden},{classes}]",
                 ("table", "ids", "w1", "b1", "w2", "b2", "onehot"), data, classifier_loss,
                 wrt=(0, 2, 3, 4, 5), reference=classifier_backprop)]


PROGRAMS: dict[str, Callable[[str, bool], list[Case]]] = {
    "ew_chain": _ew_chain,
    "softmax": _softmax,
    "logsumexp": _logsumexp,
    "mlp_fwd": lambda device, quick: _mlp(device, quick, grad=False),
    "mlp_grad": lambda device, quick: _mlp(device, quick, grad=True),
    "call_overhead": _call_overhead,
    "launch_overhead": _launch_overhead,
    "sum": _sum,
    "big_graph": _big_graph,
    "big_graph_indexed": _big_graph_indexed,
    "scan_scalar": _scan_scalar,
    "scan_ew": _scan_ew,
    "scan_rnn": lambda device, quick: _rnn(device, quick, grad=False),
    "rnn_grad": lambda device, quick: _rnn(device, quick, grad=True),
    "ofg_layers": lambda device, quick: _layers(device, quick, 20, shared=True),
    "ofg_once": lambda device, quick: _layers(device, quick, 1, shared=True),
    "ofg_inlined": lambda device, quick: _layers(device, quick, 20, shared=False),
    "gelu_mlp": lambda device, quick: _models("gelu_mlp", device, quick),
    "softmax3d": lambda device, quick: _models("softmax3d", device, quick),
    "layernorm": lambda device, quick: _models("layernorm", device, quick),
    "rmsnorm": lambda device, quick: _models("rmsnorm", device, quick),
    "attention": lambda device, quick: _models("attention", device, quick),
    "transformer_block": lambda device, quick: _models("transformer_block", device, quick),
    "embedding": lambda device, quick: _models("embedding", device, quick),
    "classifier": lambda device, quick: _models("classifier", device, quick),
    "mse_loss": lambda device, quick: _spellings("mse_loss", device, quick),
    "argmax_rows": lambda device, quick: _spellings("argmax_rows", device, quick),
    "symmetrize": lambda device, quick: _spellings("symmetrize", device, quick),
    "pairwise_dist": lambda device, quick: _spellings("pairwise_dist", device, quick),
    "standardize": lambda device, quick: _spellings("standardize", device, quick),
}

# pieces of a model (issue 17): run with --programs models
MODELS = ["gelu_mlp", "softmax3d", "layernorm", "rmsnorm", "attention", "transformer_block",
          "embedding", "classifier"]

# programs as users spell them, on large arrays: run with --programs spellings
SPELLINGS = ["mse_loss", "argmax_rows", "symmetrize", "pairwise_dist", "standardize"]

# inner graphs: loops (Scan, lax.scan, pytensor.scan, a Python loop for numpy) and one
# subgraph used many times (OpFromGraph); run with --programs inner
INNER = ["scan_scalar", "scan_ew", "scan_rnn", "rnn_grad", "ofg_layers", "ofg_once", "ofg_inlined"]

# run-time programs of a default run; big_graph is mostly a compile-time program (PyTensor
# NUMBA takes minutes to compile its 500-input fused loop), run with --programs all
DEFAULT = {
    "cpu": ["ew_chain", "softmax", "logsumexp", "mlp_fwd", "mlp_grad", "call_overhead", "sum"],
    "cuda": ["ew_chain", "sum", "softmax", "logsumexp", "mlp_fwd", "mlp_grad", "call_overhead",
             "launch_overhead"],
}

# compile-time programs, measured in fresh subprocesses (benchmarks/compile_probe.py)
COMPILE_PROGRAMS = ["ew_chain", "softmax", "mlp_grad", "big_graph", "big_graph_indexed",
                    "scan_scalar", "rnn_grad", "ofg_once", "ofg_layers"]


# a compile run measures a program's first case; these names measure another of its cases
OTHER_CASES = {"transformer_grad": ("transformer_block", 1)}


def compile_case(name: str, device: str, quick: bool) -> Case:
    """The case a compile run of `name` (a program, or one of OTHER_CASES) measures."""
    program, index = OTHER_CASES.get(name, (name, 0))
    return PROGRAMS[program](device, quick)[index]


def cases(names: list[str], device: str, quick: bool) -> list[Case]:
    """All cases of the named programs, in order."""
    unknown = [n for n in names if n not in PROGRAMS]
    if unknown:
        raise SystemExit(f"unknown program(s): {', '.join(unknown)}; "
                         f"known: {', '.join(PROGRAMS)}")
    return [case for name in names for case in PROGRAMS[name](device, quick)]

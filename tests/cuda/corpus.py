"""A corpus of programs covering every kernel kind the CUDA generator emits."""


import verglas as vg


def _t(name, shape, dtype):
    return vg.tensor(name, shape=shape, dtype=dtype)


def corpus():
    """(name, inputs, outputs) triples."""
    out = []
    for dtype in ("float32", "float64", "int32", "int64"):
        x, y = _t("x", (None, None), dtype), _t("y", (None,), dtype)
        outs = [x + y * 2, x < y, vg.maximum(x, y), x.astype("float64") / 3]
        if dtype.startswith("float"):
            outs += [vg.sigmoid(vg.exp(x) - vg.log1p(vg.abs(y))), vg.softplus(x) * vg.erf(y)]
        else:
            outs += [x // (y + 100), x % 7, x & y, vg.abs(x)]
        out.append((f"elemwise_{dtype}", [x, y], outs))
    x = _t("x", (None, None, None), "float32")
    b = _t("b", (None, None), "bool")
    reds = [vg.sum(x, axis=(0, 2)), vg.max(x, axis=1, keepdims=True), vg.prod(x), vg.min(x, 0),
            vg.any(b, axis=1), vg.all(b), vg.sum(b), vg.sum(vg.exp(x) * 2, axis=2),
            vg.argmax(x, axis=1), vg.argmin(x)]
    out.append(("reductions", [x, b], reds))
    m = _t("m", (None, 10), "float32")
    out.append(("softmax_rows", [m], [vg.softmax(m, axis=-1), vg.logsumexp(m, axis=1)]))
    v, i = _t("v", (None, None), "float64"), _t("i", (None,), "int64")
    u = _t("u", (None, None), "float64")
    out.append(("scatter_gather", [v, i, u],
                [vg.inc_subtensor(v[i], u), vg.set_subtensor(v[i, 1], 2.0), v[:, i],
                 vg.inc_subtensor(v[1:, ::2], 1.0)]))
    c = _t("c", (None, None), "int32")
    out.append(("cumsum", [c, v], [vg.cumsum(c, axis=1), vg.cumsum(v), vg.cumsum(v, 0)]))
    out.append(("constructors", [v], [vg.zeros((v.shape[0], 3)), vg.concatenate([v, v], 1),
                                      vg.arange(v.shape[0]), vg.arange(0.5, v.shape[1], 0.25)]))
    w = _t("w", (None, None), "float64")
    h = vg.tanh(v @ w)
    out.append(("mlp_grad", [v, w], [vg.sum(h), *vg.grad(vg.sum(h * h), [w])]))
    return out


def programs():
    """(name, Program) for the corpus, optimized as compile() does."""
    from verglas.function import _optimize
    from verglas.schedule import lower

    return [(name, lower(_optimize(ins, outs, "fast_run"))) for name, ins, outs in corpus()]



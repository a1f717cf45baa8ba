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
    # half precision: float32 in kernels (numba-cuda's half arithmetic needs helpers a PTX
    # module loaded alone lacks); every kernel kind that computes on values
    x, y = _t("x", (None, None), "float16"), _t("y", (None,), "float16")
    i = _t("i", (None,), "int64")
    out.append(("float16", [x, y, i], [
        x * y + x, x < y, vg.exp(x) - y * 0.5, vg.maximum(x, y), vg.sum(x, axis=1),
        vg.max(x, axis=0), vg.var(x, axis=-1), vg.softmax(x, axis=-1), vg.cumsum(x, axis=1),
        vg.argmax(x, axis=1), vg.set_subtensor(x[i], y), x[i] * 2, x.astype("float32") / 3,
        vg.prod(y)]))
    # the other integer widths, bool, and an integer array's atomic scatter along one axis
    for dtype in ("int8", "uint8", "int16", "uint16", "uint32", "uint64", "bool"):
        x, y = _t("x", (None, None), dtype), _t("y", (None,), dtype)
        outs = [x + y, x < y, vg.sum(x, axis=1), vg.max(x, axis=0), vg.cumsum(x, axis=1)]
        out.append((f"elemwise_{dtype}", [x, y], outs))
    # complex: numpy's definitions where numba-cuda's differ (power, log, log1p, ordering)
    z, w = _t("z", (None, None), "complex64"), _t("w", (None,), "complex128")
    out.append(("complex", [z, w], [
        z ** w, vg.log(z) + vg.log1p(w), z < w, vg.maximum(z, w), vg.argmax(z, axis=1),
        vg.argmin(w), vg.max(z, axis=0), vg.sum(z * w, axis=1), vg.exp(z) / w]))
    f, g = _t("f", (None, None), "float32"), _t("g", (None,), "float64")
    out.append(("float_divmod", [f, g], [f % g, f // g, vg.mod(g, 3.5), vg.floor_divide(f, 2)]))
    # inner graphs: an OpFromGraph's sub-program called twice, a Scan's body called per step
    h0, u, w = _t("h0", (None,), "float32"), _t("u", (None, None), "float32"), \
        _t("w", (None, None), "float32")
    layer = vg.OpFromGraph([h0, w], [vg.tanh(h0 @ w) + 1])
    hs = vg.scan(lambda u_t, h: vg.tanh(h @ w + u_t), sequences=[u], outputs_info=[h0])
    out.append(("inner_graphs", [h0, u, w], [layer(layer(h0, w), w), hs,
                                             *vg.grad(vg.sum(hs ** 2), [h0, w])]))
    # elementwise loops: one kernel each (scan_kernel.py)
    x0, s = _t("x0", (), "float64"), _t("s", (None,), "float64")
    v, q = _t("v", (None,), "float32"), _t("q", (None, None), "float32")
    xs = vg.scan(lambda s_t, x: 0.5 * x + s_t, sequences=[s], outputs_info=[x0])
    hs, ys = vg.scan(lambda q_t, h: [vg.tanh(h * 0.9 + q_t), h * h], sequences=[q],
                     outputs_info=[v, None])
    out.append(("elementwise_loops", [x0, s, v, q], [xs, hs, ys]))
    # x[i] += v where the dtype has no atomic add: a wider accumulator
    i = _t("i", (None,), "int64")
    narrow = [(_t(f"n{d}", (None, None), d), _t(f"v{d}", (None, None), d))
              for d in ("uint8", "int16", "bool", "float16", "complex128")]
    out.append(("scatter_add_narrow", [i, *(v for pair in narrow for v in pair)],
                [vg.inc_subtensor(x[i], y) for x, y in narrow]))
    a, i = _t("a", (None,), "int64"), _t("i", (None,), "int64")
    out.append(("scatter_int", [a, i], [vg.inc_subtensor(a[i], 2), vg.set_subtensor(a[i], -1)]))
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



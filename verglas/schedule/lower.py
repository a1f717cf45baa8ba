"""Lowering a frozen graph to a Program: buffers, steps, aliasing, liveness, memory plan."""

from __future__ import annotations

from dataclasses import replace

from verglas.graph.basic import Constant
from verglas.ops.basic import DimShuffle
from verglas.ops.elemwise import Elemwise, SumToShape
from verglas.ops.indexing import Subtensor
from verglas.ops.scan import Scan
from verglas.schedule.liveness import liveness
from verglas.schedule.loops import body_input_names, plan_loop
from verglas.schedule.memory import plan_memory
from verglas.schedule.pools import has_products, pooled_loops
from verglas.schedule.reduce_maps import reduce_maps
from verglas.schedule.program import Buffer, Program, Step, shared_ops
from verglas.schedule.repeats import repeats
from verglas.schedule.rowgroups import row_groups
from verglas.schedule.shapes import ShapeTable
from verglas.schedule.variants import adopted_steps, broadcast_checks, specialized_sizes

__all__ = ["lower"]


def lower(graph, input_names=(), _cache=None, loop_body: bool = False,
          _products: bool | None = None) -> Program:
    """The Program of `graph`; inner-graph ops get a sub-Program, one per distinct op (a
    Scan's is a `loop_body`: its outputs are copied out, or computed into their rows, by the
    loop, so they need no arrays of their own). `_products`: whether the whole program, its
    inner graphs included, has matrix products (pools.py)."""
    cache = {} if _cache is None else _cache
    if _products is None:
        _products = has_products(graph)
    buffers: list[Buffer] = []
    index: dict = {}

    def add(var, kind, **kw):
        index[var] = len(buffers)
        buffers.append(Buffer(len(buffers), var, var.type.dtype, var.type.ndim, kind, **kw))
        return index[var]

    inputs = tuple(add(v, "input") for v in graph.inputs)
    order = _shapes_first(graph.toposort(), graph.inputs)
    reads = element_reads(order, graph.outputs)
    steps = []
    for node in order:
        if node.outputs and node.outputs[0] in reads:
            continue  # read inside the steps that use it
        in_ids = []
        element = []
        for i, var in enumerate(node.inputs):
            if var in reads:
                var, at = reads[var]
                element.append((i, at))
            if var not in index:
                add(var, "constant")  # the only roots besides inputs
            in_ids.append(index[var])
        out_ids = []
        for j, out in enumerate(node.outputs):
            view = node.op.view_map.get(j)
            destroy = node.op.destroy_map.get(j)
            out_ids.append(add(out, "temp",
                               view_of=in_ids[view[0]] if view else None,
                               takes_over=in_ids[destroy[0]] if destroy else None))
        inner = node.op.inner_graph
        sub = None
        if inner is not None:
            sub = cache.get(node.op)
            if sub is None:
                body = isinstance(node.op, Scan)
                names = body_input_names(node.op.layout) if body else ()
                sub = cache[node.op] = lower(inner, names, cache, loop_body=body,
                                             _products=_products)
        steps.append(Step(len(steps), node, tuple(in_ids), tuple(out_ids), sub, tuple(element),
                          plan_loop(node.op, sub) if sub is not None else None))
    for var in graph.outputs:
        if var not in index:  # an output that is a constant
            add(var, "constant")
    outputs = tuple(index[v] for v in graph.outputs)
    out_set = set(outputs)
    buffers = [b if b.id not in out_set else _replace(b, is_output=True) for b in buffers]

    shapes = ShapeTable(graph, [b.var for b in buffers], input_names)
    checks = broadcast_checks(steps, shapes)
    base_of = list(range(len(buffers)))
    for b in buffers:
        if b.view_of is not None:
            base_of[b.id] = base_of[b.view_of]
        elif b.takes_over is not None:
            base_of[b.id] = base_of[b.takes_over]
    given = _given_views(buffers, outputs, shapes, base_of)
    buffers = [b if b.id not in given else _replace(b, is_output=True) for b in buffers]
    # the general variant: any dim may broadcast at run time, planned with the symbolic sizes;
    # the specialized one: its checked steps may join row groups, and a slot may be shared
    # between sizes its checks take to be equal (variants.py)
    pools = not (_products or loop_body)  # (elementwise loops on the pool: pools.py)
    general = _arrange(steps, buffers, outputs, shapes, base_of, frozenset(),
                       _own_sizes(steps, shapes.size_of), frozenset(checks), pools)
    plan = _arrange(steps, buffers, outputs, shapes, base_of, frozenset(checks),
                    _own_sizes(steps, specialized_sizes(steps, shapes, checks, len(buffers))),
                    frozenset(), pools)
    general.pop("shares")
    in_runs = {k for r in plan["repeats"] for k in range(r.first, r.last_step + 1)}
    owned = () if loop_body else tuple(b.id for b in buffers if b.is_output)  # (given too)
    adopted = adopted_steps(steps, buffers, owned, plan["live"], plan["slots"],
                            in_runs) | plan.pop("shares")
    general_plan = tuple((k, v) for k, v in general.items() if v != plan[k])
    if any(step.sub_program is not None for step in steps):
        general_plan += (("steps", _general_steps(steps)),)
    return Program(graph, tuple(buffers), tuple(steps), inputs, outputs, shapes,
                   input_names=tuple(input_names), variant="specialized",
                   broadcast_checks=checks, adopted=adopted, general_plan=general_plan,
                   **plan)


def _general_steps(steps) -> tuple:
    """`steps` with their sub-programs' general variants (one per distinct sub-program, so
    that uses of one op still share its function): a general program's inner graphs broadcast
    at run time too (seed 24239: an OpFromGraph's specialized body raised RuntimeBroadcast in
    the general program, which had no other to turn to)."""
    general: dict = {}
    out = []
    for step in steps:
        sub = step.sub_program
        if sub is None:
            out.append(step)
            continue
        if id(sub) not in general:
            general[id(sub)] = sub.general()
        sub = general[id(sub)]
        out.append(replace(step, sub_program=sub, loop=plan_loop(step.node.op, sub)))
    return tuple(out)


def _own_sizes(steps, size_of):
    """`size_of` with the outputs of loops that may stop early (`vg.until`) each a size of its
    own, which no other buffer shares a slot by: their arrays hold rows for the most steps,
    while their symbolic size is that of the steps that ran (seed 16605: a trace of 4 rows
    shared the slot of a 3-row array its folded size matched, and both programs raised)."""
    early = {b for step in steps if isinstance(step.node.op, Scan) and step.node.op.layout.until
             for b in step.outputs}
    if not early:
        return size_of
    own = {b: object() for b in early}
    return lambda b: own[b] if b in own else size_of(b)


def _arrange(steps, buffers, outputs, shapes, base_of, assumed, size_of, unchecked,
             pools) -> dict:
    """What runs together and where it is stored, for one variant: row groups (`assumed`:
    the steps whose broadcasting is checked at run time), fused maps, liveness, the memory
    plan by `size_of`, the repeats and the loops on the thread pool (`unchecked`: the steps
    broadcasting at run time; `pools`: elementwise loops may be): the Program's fields of
    those names."""
    groups = row_groups(steps, buffers, outputs, shapes, assumed)
    grouped = {s.index for g in groups for s in g.steps}
    maps = reduce_maps(steps, outputs, shapes, grouped)
    spans = [(g.buffers(), g.last) for g in groups] + [
        ({*steps[p].inputs, *steps[r].inputs, *steps[r].outputs}, r) for r, p in maps]
    live = liveness(len(buffers), steps, outputs, base_of, spans)
    # no storage: a group's row-local buffers, a fused map's result
    local = {b for g in groups for b in g.local} | {steps[p].outputs[0] for _, p in maps}
    # storage of its own only for a temporary that is not group-local
    plannable = [b if b.kind == "temp" and not _aliases_root(b, buffers, base_of)
                 and b.id not in local
                 else _replace(b, view_of=b.view_of if b.view_of is not None else b.id)
                 for b in buffers]
    fused = grouped | {k for pair in maps for k in pair}
    takes, shares = _identity_sums(steps, plannable, live, assumed, base_of)
    for k, g in [(k, steps[k].inputs[0]) for k in takes] + _checked_inplace(
            steps, plannable, live, assumed, fused, base_of):
        o = steps[k].outputs[0]
        plannable[o] = _replace(plannable[o], takes_over=g)
    if shares:
        base_of = list(base_of)
        for k in shares:
            g, o = steps[k].inputs[0], steps[k].outputs[0]
            plannable[o] = _replace(plannable[o], view_of=g)
            base_of[o] = base_of[g]
        live = liveness(len(buffers), steps, outputs, base_of, spans)
    slots, specs = plan_memory(plannable, steps, live, size_of)
    return {"groups": tuple(groups), "reduce_maps": maps, "live": tuple(live),
            "slots": tuple(slots), "slot_specs": tuple(specs),
            "repeats": tuple(repeats(steps, buffers, outputs, slots, shapes, fused)),
            "pooled": pooled_loops(steps, groups, maps, unchecked, pools),
            "shares": frozenset(shares)}


def _identity_sums(steps, plannable, live, assumed, base_of) -> tuple[list, list]:
    """The SumToShape steps that the variant checks (nothing broadcast: the result is its
    input's values) whose result needs no storage of its own: (those where the input's
    storage dies, whose result takes it over as an inplace output does; those where it lives
    on and no later step overwrites either, whose result shares it as a view). A gradient's
    factor read by two products through SumToShapes is then one array."""
    takes, shares = [], []
    for k in sorted(assumed):
        step = steps[k]
        if not isinstance(step.node.op, SumToShape) or not step.node.inputs[0].ndim:
            continue
        g, o = step.inputs[0], step.outputs[0]
        if not (_hands_on(plannable[g]) and _hands_on(plannable[o])):
            continue
        if live[g][1] == k:
            takes.append(k)
        elif not any(b.takes_over is not None and live[b.id][0] > k
                     and base_of[b.takes_over] in (base_of[g], o) for b in plannable):
            shares.append(k)
    return takes, shares


def _hands_on(buf) -> bool:
    """Whether `buf` is a temporary with storage of its own that no output keeps: a step may
    take its storage over or share it."""
    return (buf.kind == "temp" and buf.view_of is None and buf.takes_over is None
            and not buf.is_output)


def _checked_inplace(steps, plannable, live, assumed, fused, base_of) -> list:
    """[(step, input)] for the elementwise steps that the variant checks (nothing broadcast
    at run time) whose output may take over the storage of an input of its dtype and shape
    that dies there: the graph's inplace could not prove the shapes equal, the check does (a
    weight gradient's `zeros + product` writes over the product). Steps of row groups and
    fused maps keep their own storage, and so do the steps of an op that many steps run: they
    share one kernel (Program.shared_kernels), which writing over an input would split."""
    shared = shared_ops(steps, fused)
    found = []
    for k in sorted(assumed):
        step = steps[k]
        node = step.node
        if (k in fused or type(node.op) is not Elemwise or len(step.outputs) != 1
                or node.op.destroy_map or node.op in shared):
            continue
        out, o = node.outputs[0], step.outputs[0]
        if plannable[o].view_of is not None or plannable[o].takes_over is not None:
            continue
        element = {i for i, _ in step.element_reads}
        for var, g in zip(node.inputs, step.inputs):
            # (read only element by element, at the index written: no view of it, no one
            # element of it read inside the loop)
            alone = all(base_of[h] != base_of[g] or (h == g and j not in element)
                        for j, h in enumerate(step.inputs))
            if (alone and _hands_on(plannable[g]) and live[g][1] == k and var.dtype == out.dtype
                    and var.ndim == out.ndim
                    and all(a != 1 or b == 1 for a, b in zip(var.type.shape, out.type.shape))):
                found.append((k, g))
                break
    return found


def _shapes_first(order, inputs) -> list:
    """`order` with the one-element steps computed from the inputs' shapes alone (a mean's
    count: `x.shape[2]` cast to float, broadcast to (1, 1, 1)) and the views of inputs
    (layernorm's gamma as (1, 1, C)) moved to the front, in their order: between two steps
    over rows they would split a row group (layernorm's first mean ran alone, its scale and
    shift after it). Steps that read an input's value, and views of one element, stay where
    they are (a repeat's blocks read their own scalars)."""
    inputs = set(inputs)
    hoisted: set = set()
    first, rest = [], []
    for node in order:
        op = node.op
        if not node.outputs or op.inner_graph is not None or op.destroy_map:
            rest.append(node)
            continue
        one_element = all(all(d == 1 for d in o.type.shape) for o in node.outputs)
        if ((one_element and all(isinstance(v, Constant) or v in hoisted
                                 or (op.reads_shape_only and v in inputs)
                                 for v in node.inputs))
                or (op.view_map and not one_element
                    and all(v in inputs or v in hoisted or isinstance(v, Constant)
                            for v in node.inputs))):
            first.append(node)
            hoisted.update(node.outputs)
        else:
            rest.append(node)
    return first + rest


def element_reads(nodes, outputs) -> dict:
    """{variable: (array variable, constant index)} for the one-element reads a[3], a[1, -2]
    (and their broadcasts a[3][None]) that only elementwise steps use: they read the element
    inside their loop, so the read is neither a step nor a buffer of its own (a sum of 500
    terms a[i] * sin(x + i) is one step, not 1,001)."""
    clients: dict = {}
    for node in nodes:
        for i, var in enumerate(node.inputs):
            clients.setdefault(var, []).append((node, i))
    found: dict = {}
    for node in nodes:
        op = node.op
        if (isinstance(op, Subtensor) and node.inputs[0].ndim == len(op.idx_list)
                and all(e == "int" for e in op.idx_list)
                and all(isinstance(v, Constant) for v in node.inputs[1:])):
            found[node.outputs[0]] = (node.inputs[0],
                                      tuple(int(v.data) for v in node.inputs[1:]))
        elif (isinstance(op, DimShuffle) and node.inputs[0] in found
              and all(d == "x" for d in op.new_order)):
            found[node.outputs[0]] = found[node.inputs[0]]
    kept: dict = {}
    keep = set(outputs)
    for node in reversed(nodes):  # the users of a read first
        for var in node.outputs:
            if var in found and var not in keep and all(
                    (isinstance(user.op, Elemwise)
                     and not any(i in ins for ins in user.op.destroy_map.values()))
                    or user.outputs[0] in kept for user, i in clients.get(var, [])):
                kept[var] = found[var]
    return kept


# the most leading rows a view may leave out of the temporary given with it (a scan's trace
# without its initial entries): rows the caller's array keeps alive, where a copy would cost
# a pass over the whole trace
GIVEN_EXTRA_ROWS = 16


def _given_views(buffers, outputs, shapes, base_of) -> set:
    """The temporaries an output is a view of, of its whole size (a reversal, a transpose,
    a matrix product's rows as a vector's) or of all but a few leading rows (a scan's trace
    after its initial entries), that no other output shares: the call allocates them afresh
    and returns the view as it is (Program.returned_copies), not a copy of it."""
    bases = [base_of[b] for b in outputs]
    given = set()
    for b, base in zip(outputs, bases):
        buf = buffers[base]
        if (buffers[b].view_of is not None and buf.kind == "temp" and base not in outputs
                and bases.count(base) == 1 and buffers[b].ndim and buf.ndim
                and (shapes.size_of(b) is shapes.size_of(base)
                     or _all_but_leading_rows(shapes.dims_of(b), shapes.dims_of(base)))):
            given.add(base)
    return given


def _all_but_leading_rows(view_dims, base_dims) -> bool:
    """Whether a view of these dims is its base's but for at most GIVEN_EXTRA_ROWS rows more
    on axis 0 (the base's first dim `add(d, c)`, `d` the view's, `c` a constant)."""
    if len(view_dims) != len(base_dims) or any(
            v is not w for v, w in zip(view_dims[1:], base_dims[1:])):
        return False
    node = base_dims[0].owner
    if node is None or not isinstance(node.op, Elemwise) or \
            getattr(node.op.scalar_op, "name", None) != "add" or len(node.inputs) != 2:
        return False
    for d, c in (node.inputs, node.inputs[::-1]):
        if d is view_dims[0] and isinstance(c, Constant) and c.data.ndim == 0:
            return 0 < int(c.data) <= GIVEN_EXTRA_ROWS
    return False


def _aliases_root(buf, buffers, base_of) -> bool:
    """True when `buf` is a view or inplace result whose storage is an input or constant."""
    if buf.view_of is None and buf.takes_over is None:
        return False
    return buffers[base_of[buf.id]].kind != "temp"


def _replace(buf: Buffer, **changes) -> Buffer:
    fields = dict(id=buf.id, var=buf.var, dtype=buf.dtype, ndim=buf.ndim, kind=buf.kind,
                  view_of=buf.view_of, takes_over=buf.takes_over, is_output=buf.is_output)
    fields.update(changes)
    return Buffer(**fields)



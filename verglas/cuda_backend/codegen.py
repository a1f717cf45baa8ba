"""Source generation for the CUDA backend: a Program becomes ONE host function (Python) that
allocates buffers by the memory plan and launches generated kernels.

The host function `program(L, in0, ..., c0, ...)` gets the Launcher `L`, the device inputs and
the device copies of large constants; it returns the outputs. Kernels (templates.py) are
globals `K0, K1, ...`; `P<k>` runs step k's reference `perform` (views, shape arithmetic on the
host, and the fallback for ops without a kernel); `H` is host.py.

Placement: every buffer lives on the device, on the host (0-d and shape-vector values computed
from shapes: slicing bounds, reshape targets), or both (constants). A step whose inputs are all
on the host and whose outputs are small runs on the host. Reading a device value on the host
(`L.to_host`) syncs, which makes the program not capturable as a CUDA graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from verglas.cuda_backend.kernels import emit
from verglas.cuda_backend.rowkernels import emit_row_group, row_group_fusable
from verglas.cuda_backend.scan_kernel import elementwise_scan_kernel
from verglas.cuda_backend.templates import Emitter, KernelSpec, by_content
from verglas.ops.basic import MakeVector, Shape, ShapeI
from verglas.ops.elemwise import Elemwise
from verglas.ops.linalg import MatMul
from verglas.ops.reduce import CumSum
from verglas.ops.shape import Alloc, ARange
from verglas.schedule.program import Step
from verglas.schedule.repeats import Repeat
from verglas.source import EmitContext

__all__ = ["HostSource", "StepContext", "generate", "Config", "HOST_OPS"]

HOST_OPS = (Shape, ShapeI, MakeVector)  # always on the host: they read metadata
_NEVER_HOST = (ARange, Alloc, MatMul, CumSum)


@dataclass(frozen=True)
class Config:
    """What the kernels are generated for: the block size (shared-memory kernels bake it in)."""

    threads: int = 256


@dataclass
class HostSource:
    """A generated program: host source, its kernels and globals, and what limits replay."""

    name: str
    config: Config
    text: str = ""
    kernels: list[KernelSpec] = field(default_factory=list)
    globals: dict = field(default_factory=dict)
    const_args: list = field(default_factory=list)  # (arg name, numpy data) uploaded once
    syncs: bool = False  # reads device values on the host
    has_matmul: bool = False
    fallbacks: list = field(default_factory=list)  # ops run by their reference perform
    subs: dict = field(default_factory=dict)  # global name -> HostSource of a sub-program

    @property
    def capturable(self) -> bool:
        """Whether a whole call can be captured and replayed as a CUDA graph."""
        return not (self.syncs or self.has_matmul or self.fallbacks)

    def kernel(self, spec: KernelSpec) -> str:
        """The global name of kernel `spec`: identical kernels are shared, and are one spec
        in every program (see `by_content`), compiled and cached once."""
        spec = by_content(spec)
        digest = spec.name.split("_", 1)[0]  # (one kernel made as two kinds is one too)
        for k, existing in enumerate(self.kernels):
            if existing.name.split("_", 1)[0] == digest:
                return f"K{k}"
        self.kernels.append(spec)
        return f"K{len(self.kernels) - 1}"

    def full_text(self) -> str:
        """The host function followed by every kernel's source (what users read), then each
        sub-program's."""
        parts = [self.text]
        for k, spec in enumerate(self.kernels):
            parts.append(f"# K{k} = {spec.name}\n{spec.source}")
        for name, sub in self.subs.items():
            text = sub.full_text().replace("\n", "\n# | ")
            parts.append(f"# {name}: a sub-program's host function and kernels\n# | {text}")
        return "\n\n".join(parts)

    def all_kernels(self):
        """The kernels of this program and of its sub-programs."""
        yield from self.kernels
        for sub in self.subs.values():
            yield from sub.all_kernels()

    def add_sub(self, sub: HostSource) -> str:
        """The global name of sub-program `sub` (its host function, called by this one); what
        limits its replay limits this program's."""
        name = f"S{len(self.subs)}"
        self.subs[name] = sub
        self.syncs |= sub.syncs
        self.has_matmul |= sub.has_matmul
        self.fallbacks.extend(sub.fallbacks)
        return name


class StepContext(EmitContext):
    """What a step emitter sees: input/output names on host or device, allocation, kernels."""

    def __init__(self, gen, step):
        self.gen = gen
        self.src = gen.src
        self.em = gen.em
        self.program = gen.program
        self.step = step
        self.node = step.node
        self.op = step.node.op
        self.threads = gen.src.config.threads

    # -- inputs --------------------------------------------------------------------------------
    def on_host(self, i: int) -> bool:
        return self.gen.host_name.get(self.step.inputs[i]) is not None

    def on_device(self, i: int) -> bool:
        return self.gen.dev_name.get(self.step.inputs[i]) is not None

    def dev(self, i: int) -> str:
        """A device array holding input `i` (uploaded from the host on first need)."""
        return self.gen.dev(self.step.inputs[i])

    def host(self, i: int) -> str:
        """A host value of input `i` (read back from the device on first need: a sync)."""
        return self.gen.host(self.step.inputs[i])

    # -- outputs -------------------------------------------------------------------------------
    def out(self, j: int) -> str:
        return f"b{self.step.outputs[j]}"

    def alloc(self, j: int, shape_expr: str) -> str:
        """Emit the device allocation of output `j` (a dead slot's storage when the plan says)."""
        return self.gen.alloc(self.step.outputs[j], shape_expr)

    def set_device(self, j: int) -> str:
        """Declare output `j` computed on the device under its usual name."""
        bid = self.step.outputs[j]
        self.gen.dev_name[bid] = f"b{bid}"
        return f"b{bid}"

    # -- code ------------------------------------------------------------------------------------
    def kernel(self, spec: KernelSpec) -> str:
        return self.src.kernel(spec)

    def kname(self, kind: str) -> str:
        """A kernel function name for this step."""
        return f"k{self.step.index}_{kind}"

    def perform(self) -> str:
        """The global name of a callable running this step's reference perform."""
        name = f"P{self.step.index}"
        self.src.globals[name] = Perform(self.node, self.step.element_reads)
        return name

    def emit_perform(self, on_host: bool) -> None:
        """Emit the call of this step's reference perform (see `_emit_perform`)."""
        _emit_perform(self.gen, self, on_host)

    def for_step(self, step) -> StepContext:
        """The context of another step of the program (a producer fused into this one)."""
        return StepContext(self.gen, step)


class Perform:
    """Runs a node's reference `perform` on the given values; returns the outputs. An element
    read of the step (Step.element_reads) receives the whole array: its element is taken
    here, shaped as the node's input."""

    def __init__(self, node, element_reads=()):
        self.node = node
        self.element_reads = element_reads

    def __call__(self, *args):
        storage = [[None] for _ in self.node.outputs]
        args = list(args)
        for i, index in self.element_reads:
            shape = (1,) * self.node.inputs[i].type.ndim
            args[i] = args[i][tuple(index) + (Ellipsis,)].reshape(shape)
        for ins in getattr(self.node.op, "destroy_map", {}).values():
            for i in ins:  # an inplace op on a read-only host value (a constant): a copy
                if isinstance(args[i], np.ndarray) and not args[i].flags.writeable:
                    args[i] = args[i].copy()
        self.node.op.perform(self.node, args, storage)
        return [s[0] for s in storage]

    def __repr__(self):
        return f"Perform({self.node.op}): the node's reference perform, on the host"


class _Generator:
    def __init__(self, program, config: Config, name: str):
        self.program = program
        self.src = HostSource(name, config)
        self.em = Emitter(depth=1)
        self.dev_name: dict[int, str] = {}
        self.host_name: dict[int, str] = {}
        self.slot_storage: dict[int, str] = {}
        self.sub_names: dict[int, str] = {}  # id(sub-program) -> its global name

    def sub(self, program) -> str:
        """The global name of the host function running sub-program `program` (generated
        once per distinct sub-program: an OpFromGraph used many times shares it)."""
        name = self.sub_names.get(id(program))
        if name is None:
            sub = generate(program, self.src.config, name="program")
            name = self.sub_names[id(program)] = self.src.add_sub(sub)
        return name

    def dev(self, bid: int) -> str:
        name = self.dev_name.get(bid)
        if name is None:
            name = self.dev_name[bid] = f"d{bid}"
            self.em.line(f"{name} = L.to_device({self.host_name[bid]})")
        return name

    def host(self, bid: int) -> str:
        name = self.host_name.get(bid)
        if name is None:
            name = self.host_name[bid] = f"h{bid}"
            self.em.line(f"{name} = L.to_host({self.dev_name[bid]})")
            self.src.syncs = True
        return name

    def alloc(self, bid: int, shape_expr: str) -> str:
        buf = self.program.buffers[bid]
        out = f"b{bid}"
        self.dev_name[bid] = out
        slot = self.program.slots[bid] if self.program.slots else None
        if slot is None or slot not in self.slot_storage:
            self.em.line(f"{out} = L.empty({shape_expr}, {buf.dtype!r})")
            if slot is not None:
                self.slot_storage[slot] = out
        else:  # the storage of a dead buffer of the same dtype and size
            self.em.line(f"{out} = {self.slot_storage[slot]}.reshape({shape_expr})")
        return out


def _runs_on_host(gen, step) -> bool:
    op = step.node.op
    if isinstance(op, HOST_OPS):
        return True
    if isinstance(op, _NEVER_HOST) or step.sub_program is not None:
        return False
    return (all(b in gen.host_name for b in step.inputs)
            and all(o.ndim <= 1 for o in step.node.outputs))


def generate(program, config: Config = Config(), name: str = "program") -> HostSource:
    """The host source computing `program` with kernels registered in kernels.py."""
    gen = _Generator(program, config, name)
    src, em = gen.src, gen.em
    args = ["L"]
    for k, b in enumerate(program.inputs):
        gen.dev_name[b] = f"in{k}"
        args.append(f"in{k}")
    for buf in program.buffers:
        if buf.kind != "constant":
            continue
        data = np.asarray(buf.var.data)
        gen.host_name[buf.id] = f"hc{buf.id}"
        src.globals[f"hc{buf.id}"] = data
        gen.dev_name[buf.id] = f"c{buf.id}"
        src.const_args.append((f"c{buf.id}", data))
        args.append(f"c{buf.id}")
    # reductions computing their elementwise producer (the scheduler's decision)
    absorbed = {r: program.steps[p] for r, p in program.reduce_maps}
    skipped = {p.index for p in absorbed.values()}
    steps = []  # what runs step by step: every step but those of row groups run as one kernel
    for unit in program.units():
        if isinstance(unit, Step):
            steps.append(unit)
        elif isinstance(unit, Repeat):
            # the host code launches each iteration's kernels in turn (unrolled: the kernels,
            # compiled once each, are the same; a captured graph replays the launches anyway)
            steps.extend(program.steps[unit.first:unit.last_step + 1])
        elif row_group_fusable(program, unit):
            steps.append(unit)
        else:  # its steps one by one, the row-local buffers stored
            steps.extend(unit.steps)
    for step in steps:
        if not isinstance(step, Step):
            em.line(f"# steps {step.first}-{step.last}: one row kernel")
            for member in step.steps:
                em.line(f"# step {member.index}: {member.node.op}")
            emit_row_group(gen, step, [StepContext(gen, s) for s in step.steps])
            continue
        if step.index in skipped:
            em.line(f"# step {step.index}: {step.node.op} (fused into step "
                    f"{next(i for i, p in absorbed.items() if p.index == step.index)})")
            continue
        em.line(f"# step {step.index}: {step.node.op}")
        ctx = StepContext(gen, step)
        ctx.producer = absorbed.get(step.index)
        if _runs_on_host(gen, step):
            _emit_perform(gen, ctx, on_host=True)
            continue
        if step.sub_program is not None:  # an OpFromGraph: a call; a Scan: a loop of calls
            (_emit_sub_call if step.loop is None else _emit_scan)(gen, ctx)
            continue
        mark = len(em.lines)
        n_kernels = len(src.kernels)
        try:
            emit(step.node.op, ctx)
        except NotImplementedError:
            del em.lines[mark:]
            del src.kernels[n_kernels:]
            _emit_perform(gen, ctx, on_host=False)
    outs, seen = [], set()
    for b in program.outputs:
        buf = program.buffers[b]
        owned = (buf.kind == "temp" and buf.view_of is None and buf.takes_over is None
                 and b in gen.dev_name and gen.dev_name[b] == f"b{b}")
        if owned and b not in seen:
            outs.append(gen.dev_name[b])
        elif b in gen.dev_name:
            outs.append(f"L.copy({gen.dev_name[b]})")
        else:
            outs.append(f"L.to_device({gen.host_name[b]})")
        seen.add(b)
    em.line(f"return ({', '.join(outs)}{',' if len(outs) == 1 else ''})")
    src.text = "\n".join([f"def {name}({', '.join(args)}):"] + em.lines)
    return src


def _emit_sub_call(gen, ctx) -> None:
    """Call the host function of the step's sub-program on device arrays: its kernels run
    as the caller's do, and its outputs are arrays of its own."""
    step = ctx.step
    fn = gen.sub(step.sub_program)
    args = [gen.dev(b) for b in step.inputs]
    outs = [f"b{b}" for b in step.outputs]
    gen.em.line(f"{', '.join(outs)}, = {fn}(L, {', '.join(args)})")
    for b, o in zip(step.outputs, outs):
        gen.dev_name[b] = o


def _emit_scan(gen, ctx) -> None:
    """A Scan: the host drives its loop (host.run_scan), a call of the body's sub-program per
    step on the device; with a stopping condition it reads the condition back each step."""
    step = ctx.step
    fn = gen.sub(step.sub_program)
    op_name = f"OP{step.index}"
    gen.src.globals[op_name] = ctx.op
    if ctx.op.layout.until:
        gen.src.syncs = True
    args = [gen.host(step.inputs[0])] + [gen.dev(b) for b in step.inputs[1:]]
    outs = [f"b{b}" for b in step.outputs]
    spec = elementwise_scan_kernel(ctx.kname("scan"), ctx.op)
    if spec is not None:  # one kernel runs the whole loop (the host loop where shapes differ)
        gen.em.line(f"{', '.join(outs)}, = H.run_scan_elementwise(L, {op_name}, "
                    f"{ctx.kernel(spec)}, {fn}, {', '.join(args)})")
    else:
        gen.em.line(f"{', '.join(outs)}, = H.run_scan(L, {op_name}, {fn}, {', '.join(args)})")
    for b, o in zip(step.outputs, outs):
        gen.dev_name[b] = o


def _emit_perform(gen, ctx, on_host: bool) -> None:
    """Run the step's reference perform: on host values (a host step), on device arrays plus
    host indices (views), or on host copies of everything (the fallback, which syncs)."""
    step = ctx.step
    fn = ctx.perform()
    view = bool(ctx.op.view_map) and not isinstance(ctx.op, Elemwise)
    if on_host:
        args = [gen.host(b) if b in gen.host_name or not ctx.op.reads_shape_only
                else gen.dev_name[b] for b in step.inputs]
    elif view:  # metadata work on the device array; indices and shapes from the host
        args = [gen.dev(step.inputs[0])] + [gen.host(b) for b in step.inputs[1:]]
    else:
        gen.src.fallbacks.append(str(ctx.op))
        args = [gen.host(b) for b in step.inputs]
    outs = [f"h{b}" if on_host or not view else f"b{b}" for b in step.outputs]
    gen.em.line(f"{', '.join(outs)}, = {fn}({', '.join(args)})")
    for b, o in zip(step.outputs, outs):
        (gen.host_name if o.startswith("h") else gen.dev_name)[b] = o

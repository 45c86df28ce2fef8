"""Reverse-mode automatic differentiation: Context, Function, backward().

A `Function` is one primitive: a static `forward(ctx, *arrays)` and a static
`backward(ctx, grad_out)`. Both take and return raw backend arrays (NumPy or
CuPy), never Tensors; only `Function.apply` wraps and unwraps, and it alone
builds the graph. Each Tensor made by `apply` remembers its Context (the
function, the parent Tensors, whatever forward saved), and `backward()` walks
those Contexts in reverse topological order applying the chain rule.

Process-wide state here is the grad-mode switch behind `no_grad()` (restored even
when the body raises). The other process-wide state of minitensor is in backends/:
one instance per backend, and the Numba backend's threading layer, set when that
backend is first created.
"""
from __future__ import annotations

import contextlib
import inspect

_grad_enabled = True  # the grad-mode switch: see no_grad()


def is_grad_enabled() -> bool:
    return _grad_enabled


@contextlib.contextmanager
def no_grad():
    """Run a block without recording the graph (evaluation, decoding, optimizer steps)."""
    global _grad_enabled
    previous = _grad_enabled
    _grad_enabled = False
    try:
        yield
    finally:
        _grad_enabled = previous


class Context:
    """What one application of a Function keeps for its backward pass: a node of the graph.

    `parents` records each input as a graph node: a leaf Tensor as itself (its
    `.grad` is where gradients land), an intermediate Tensor by its own
    Context, and an input that needs no gradient as None. Intermediate Tensors
    are not kept, so their arrays are freed as soon as the forward code drops
    them; only what `save_for_backward` keeps survives until backward.
    What else backward needs is already here: the inputs' shapes and dtypes, and
    `params`, the keyword arguments forward was called with (an axis, a scale, a seed).
    `__slots__`: a graph holds one Context per op, and nothing else may be stashed on it.
    """

    __slots__ = ("function", "backend", "params", "needs_input_grad", "parents", "input_shapes",
                 "input_dtypes", "saved", "consumed")

    def __init__(self, function, inputs, backend, params):
        self.function = function
        self.backend = backend            # backward does its math through this
        self.params = params              # forward's keyword arguments
        needs, parents, shapes, dtypes = [], [], [], []
        for t in inputs:                  # one pass: a step builds a few hundred of these
            data, requires_grad = t.data, t.requires_grad
            needs.append(requires_grad)
            parents.append((t if t._ctx is None else t._ctx) if requires_grad else None)
            shapes.append(data.shape)
            dtypes.append(data.dtype)
        self.needs_input_grad, self.parents = tuple(needs), tuple(parents)
        self.input_shapes, self.input_dtypes = tuple(shapes), tuple(dtypes)
        self.saved = ()
        self.consumed = False

    def save_for_backward(self, *arrays):
        self.saved = arrays


class Function:
    """Base class of every differentiable primitive.

    Subclasses set `has_aux = True` when forward returns `(out, aux)`: `aux` is
    a raw array (or tuple) that is not differentiated, e.g. the per-token NLL
    computed alongside the label-smoothed loss; `apply` then returns `(Tensor, aux)`.
    `sums_grad_out = True`: backward gets a tuple of the gradients from each consumer of the
    output, not their sum, and adds them itself (a kernel that reads two arrays instead of one
    saves the add kernel and its write, e.g. the sub-layer connection's, whose output feeds both
    the next sub-layer and the residual stream).
    """

    has_aux = False
    sums_grad_out = False
    defaults: dict = {}      # forward's keyword defaults, so ctx.params always holds every keyword

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.defaults = {name: p.default for name, p in inspect.signature(cls.forward).parameters.items()
                        if p.kind is p.KEYWORD_ONLY and p.default is not p.empty}

    @staticmethod
    def forward(ctx: Context, *arrays, **params):
        raise NotImplementedError

    @staticmethod
    def backward(ctx: Context, grad_out):
        raise NotImplementedError

    @classmethod
    def apply(cls, *inputs, **params):
        from .tensor import Tensor  # tensor.py imports this module

        backend = inputs[0].backend
        for t in inputs[1:]:
            if t.backend is not backend:
                raise ValueError(
                    f"{cls.__name__}: inputs live on different backends "
                    f"({backend.name} and {t.backend.name}); move them with .to() first")
        ctx = Context(cls, inputs, backend, {**cls.defaults, **params} if cls.defaults else params)
        result = cls.forward(ctx, *[t.data for t in inputs], **params)
        out, aux = result if cls.has_aux else (result, None)
        requires_grad = _grad_enabled and any(ctx.needs_input_grad)
        tensor = Tensor._wrap(out, backend, requires_grad, ctx if requires_grad else None)
        return (tensor, aux) if cls.has_aux else tensor


def toposort(root) -> list:
    """Graph nodes reachable from `root` (a Context or a leaf Tensor), parents before children.

    Iterative depth-first search: a 10,000-op chain must not hit Python's
    recursion limit (micrograd's recursive build_topo does).
    """
    order, visited = [], set()
    stack = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if children_done:
            order.append(node)
            continue
        if id(node) in visited:
            continue
        visited.add(id(node))
        stack.append((node, True))
        for parent in (node.parents if type(node) is Context else ()):   # leaf Tensors have no parents
            if parent is not None and id(parent) not in visited:
                stack.append((parent, False))
    return order


def backward(root, grad_out=None, on_leaf_done=None) -> None:
    """Accumulate d(root)/d(leaf) into every leaf's `.grad` (leaves add up with +).

    `on_leaf_done(leaf)`, if given, is called once for every leaf the walk reaches, as soon
    as this backward has added everything it will to `leaf.grad`: toposort puts a node after
    all its consumers in the reversed walk, so a leaf is reached exactly once, last. A
    data-parallel trainer starts all-reducing a group of gradients there, while the rest
    of the backward pass still runs. The graph is freed as it is consumed, so call
    backward once per forward.
    """
    if not root.requires_grad:
        raise RuntimeError("backward() on a tensor that does not require grad "
                           "(no input had requires_grad=True, or it was made under no_grad())")
    if grad_out is None:
        if root.data.size != 1:
            raise RuntimeError(f"backward() without a gradient needs a scalar, got shape {root.shape}")
        grad_out = root.backend.xp.ones_like(root.data)
    start = root if root._ctx is None else root._ctx
    grads = {id(start): grad_out}
    for node in reversed(toposort(start)):
        grad = grads.pop(id(node), None)
        if not isinstance(node, Context):  # a leaf: accumulate, out of place so no gradient array is shared and mutated
            if grad is not None:
                node.grad = grad if node.grad is None else node.grad + grad
            if on_leaf_done is not None:
                on_leaf_done(node)          # every consumer is done: node.grad is final for this backward
            continue
        if grad is None:
            continue
        if node.consumed:
            raise RuntimeError("backward through a graph that was already freed: "
                               "run the forward again before each backward")
        if node.function.sums_grad_out and not isinstance(grad, tuple):
            grad = (grad,)
        input_grads = node.function.backward(node, grad)
        if not isinstance(input_grads, tuple):
            input_grads = (input_grads,)
        if len(input_grads) != len(node.parents):
            raise RuntimeError(f"bug in {node.function.__name__}.backward: returned "
                               f"{len(input_grads)} gradients for {len(node.parents)} inputs")
        for parent, shape, g in zip(node.parents, node.input_shapes, input_grads):
            if g is None or parent is None:
                continue
            if g.shape != shape:
                raise RuntimeError(f"bug in {node.function.__name__}.backward: gradient shape "
                                   f"{g.shape} for an input of shape {shape}")
            key = id(parent)
            if key not in grads:
                grads[key] = g
            elif isinstance(parent, Context) and parent.function.sums_grad_out:
                grads[key] = (*grads[key], g) if isinstance(grads[key], tuple) else (grads[key], g)
            else:
                grads[key] = node.backend.add(grads[key], g)   # bf16 too
        node.saved, node.params, node.consumed = (), None, True  # free what it kept as soon as it is used

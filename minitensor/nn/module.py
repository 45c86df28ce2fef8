"""Module: a container of Parameters and sub-Modules, registered by attribute assignment.

`self.w = Parameter(...)` and `self.layer = Linear(...)` are all it takes;
names come from the attribute path (`encoder.layers.0.self_attn.w_q.weight`),
which is also what a checkpoint stores.
"""
from __future__ import annotations

import numpy as np

from ..backends import get_backend
from ..tensor import Tensor


_DATA = Tensor.data   # the slot that holds a Tensor's array


class Parameter(Tensor):
    """A leaf Tensor that a Module owns and an optimizer updates.

    In mixed precision the optimizer also keeps a copy of the data in the activations' half
    precision (float16 or bf16), written in the same pass as the update (Adam(half_dtype=...)),
    so the forward pass multiplies with it and casts nothing. Assigning `data` drops that copy:
    a stale one is never read. (Writing into `data` in place, `p.data[...] = x`, does not: only
    the optimizer that owns the copy updates the array in place.)
    """

    __slots__ = ("_half",)

    def __init__(self, data, backend=None, dtype=None):
        super().__init__(data, requires_grad=True, backend=backend, dtype=dtype)

    @property
    def data(self):
        return _DATA.__get__(self)

    @data.setter
    def data(self, array):
        _DATA.__set__(self, array)
        self._half = None

    def half(self, dtype):
        """The optimizer's copy of the data in `dtype` (float16 or bf16), or None if there is none."""
        half = self._half
        return half if half is not None and half.dtype == np.dtype(dtype) else None

    def set_half(self, array) -> None:
        """Keep `array` (the data rounded to a half dtype, same shape) as the copy the forward pass uses."""
        if array.shape != self.shape:
            raise ValueError(f"half copy of shape {array.shape} for a parameter of shape {self.shape}")
        self._half = array


class Module:
    def __init__(self):
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__}.__init__ must call super().__init__() "
                                 f"before assigning {name!r}")
        for registry in (self._parameters, self._modules, self._buffers):
            registry.pop(name, None)
        if isinstance(value, Parameter):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        object.__setattr__(self, name, value)

    def register_buffer(self, name: str, tensor: Tensor) -> None:
        """A non-trainable tensor (e.g. the sinusoid table) that moves with .to() but is not saved."""
        setattr(self, name, tensor)
        self._buffers[name] = tensor

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        raise NotImplementedError

    # --- traversal ----------------------------------------------------------------
    def named_modules(self, prefix: str = ""):
        yield prefix, self
        for name, child in self._modules.items():
            yield from child.named_modules(f"{prefix}{name}.")

    def named_parameters(self, prefix: str = ""):
        for module_prefix, module in self.named_modules(prefix):
            for name, p in module._parameters.items():
                yield module_prefix + name, p

    def parameters(self) -> list[Parameter]:
        return [p for _, p in self.named_parameters()]

    def num_parameters(self) -> int:
        return sum(p.size for p in self.parameters())

    @property
    def backend(self):
        """The backend the parameters live on (they all share one: see `to`)."""
        for _, p in self.named_parameters():
            return p.backend
        raise AttributeError(f"{type(self).__name__} has no parameters, so no backend of its own")

    # --- modes, devices, gradients ---------------------------------------------------
    def train(self, mode: bool = True) -> "Module":
        for _, module in self.named_modules():
            object.__setattr__(module, "training", mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def to(self, device=None, dtype=None) -> "Module":
        """Move every parameter and buffer to another backend and/or float dtype, in place.

        Build optimizers after this: they keep references to the arrays.
        """
        for _, module in self.named_modules():
            for registry in (module._parameters, module._buffers):
                for t in registry.values():
                    target = t.backend if device is None else get_backend(device)
                    if target is not t.backend:
                        t.data, t.backend = target.asarray(t.backend.to_numpy(t.data)), target
                        t.grad = None
                    if dtype is not None and t.data.dtype.kind == "f" and t.data.dtype != dtype:
                        t.data, t.grad = t.data.astype(dtype), None
        return self

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.grad = None

    # --- state ---------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """name -> a NumPy copy of each parameter (host memory, safe to save)."""
        return {name: np.array(p.numpy(), copy=True) for name, p in self.named_parameters()}

    def load_state_dict(self, state: dict, strict: bool = True) -> None:
        """Copy arrays into the parameters; missing, unexpected or mis-shaped keys raise KeyError/ValueError."""
        own = dict(self.named_parameters())
        missing = sorted(set(own) - set(state))
        unexpected = sorted(set(state) - set(own))
        if strict and (missing or unexpected):
            raise KeyError(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}")
        for name, p in own.items():
            if name not in state:
                continue
            value = np.asarray(state[name])
            if tuple(value.shape) != p.shape:
                raise ValueError(f"load_state_dict: {name!r} has shape {tuple(value.shape)} in the "
                                 f"state but {p.shape} in the model")
            p.data = p.backend.asarray(np.array(value, dtype=p.dtype))   # a copy, never a view of a file

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__}("]
        for name, child in self._modules.items():
            lines.append("  " + f"({name}): {child!r}".replace("\n", "\n  "))
        return "\n".join(lines) + ")" if len(lines) > 1 else f"{type(self).__name__}()"

"""Whether a module's call may be replaced by its operations: :func:`plain_calls`, :func:`direct_calls`."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn
from torch.nn.modules import module as module_hooks

_GLOBAL_HOOKS = (
    module_hooks._global_forward_pre_hooks,
    module_hooks._global_forward_hooks,
    module_hooks._global_backward_pre_hooks,
    module_hooks._global_backward_hooks,
)


def plain_calls(*modules: nn.Module) -> bool:
    """Whether calling each of ``modules`` is running its ``forward`` and nothing more, so that a fused Function may
    run their operations instead: no module hook on them or registered globally, none compiled in place
    (``module.compile()``), no TorchScript trace running. Checked at each call (training mode is not asked about)."""
    if any(_GLOBAL_HOOKS) or torch._C._get_tracing_state():
        return False
    return not any(
        m._forward_hooks
        or m._forward_pre_hooks
        or m._backward_hooks
        or m._backward_pre_hooks
        or m._compiled_call_impl is not None
        for m in modules
    )


def direct_calls(modules: Sequence[nn.Module]) -> Callable[[], bool]:
    """A check, made before each pass that uses a bound field (:meth:`~odeformer.layer.Layer.bind_cache`): whether
    calling each of ``modules``' ``forward`` directly still does what calling the module does: what
    :func:`plain_calls` asks, and none in training mode. The modules' hook dictionaries are gathered here once (a
    module keeps its own for its life)."""
    unique = tuple({id(m): m for m in modules}.values())
    hooks = _GLOBAL_HOOKS + tuple(
        d for m in unique for d in (m._forward_hooks, m._forward_pre_hooks, m._backward_hooks, m._backward_pre_hooks)
    )
    tracing = torch._C._get_tracing_state

    def check() -> bool:
        if any(hooks) or tracing():
            return False
        for m in unique:
            if m.training or m._compiled_call_impl is not None:
                return False
        return True

    return check

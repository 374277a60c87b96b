"""The kit's gradient check on drawn instances: a learnable parameter whose whole effect is below float64's
resolution (TripleJump's λ at a small step) is not judged for a zero gradient there; one that moves the result but
gets no gradient is rejected everywhere, and the fixed instances stay strict."""

import copy

import pytest
import torch

import solvers
from solvers.testing import check_gradients
from solvers.testing.protocol import _compare_derivative


class Rejected(Exception):
    pass


def reject():
    raise Rejected


def _zero_gradient_run(detached_effect: bool):
    """A map of ``x`` and ``p`` whose derivative in ``p`` is exactly zero; with ``detached_effect`` ``p`` still moves
    the result (through a detached use), else it does not act at all."""
    p = torch.nn.Parameter(torch.tensor([0.3], dtype=torch.float64))

    def run(x):
        y = x * 1.5 + (p * 0.25 - p * 0.25)
        return y + 0.1 * p.detach() if detached_effect else y

    return p, run


def test_a_parameter_with_no_resolvable_effect_is_not_judged_on_a_drawn_instance_but_is_on_a_fixed_one():
    p, run = _zero_gradient_run(detached_effect=False)
    base = torch.linspace(-1, 1, 4, dtype=torch.float64)
    with pytest.raises(Rejected):
        _compare_derivative("S", run, base, [("p", p)], "here", 1.0, irregular=reject)
    with pytest.raises(AssertionError, match="S's learnable parameter p gets a gradient of zero"):
        _compare_derivative("S", run, base, [("p", p)], "here", 1.0)


def test_a_parameter_that_moves_the_result_but_gets_a_zero_gradient_is_rejected_even_on_a_drawn_instance():
    p, run = _zero_gradient_run(detached_effect=True)
    base = torch.linspace(-1, 1, 4, dtype=torch.float64)
    with pytest.raises(AssertionError, match="S's learnable parameter p gets a gradient of zero"):
        _compare_derivative("S", run, base, [("p", p)], "here", 1.0, irregular=reject)


class DetachedLimitLightWave(solvers.LightWave):
    """Light Wave (a learnable momentum, per channel) whose limit field reads its friction through ``.detach()``:
    every value is right, but autograd sees no parameter in the limit, so ``model.parameterization=ode`` would take
    the momentum for a discretisation coefficient and freeze it."""

    def limit_field(self, field):
        honest = super().limit_field(field)
        detached = copy.deepcopy(self)
        for p in detached.parameters():
            p.requires_grad_(False)
        frozen = solvers.LightWave.limit_field(detached, field)
        return lambda t, y: frozen(t, y) if torch.is_grad_enabled() else honest(t, y)


def test_a_limit_field_that_reads_a_parameter_detached_is_rejected_by_the_gradient_check():
    from odeformer.parameterization import scheme_roles

    honest, detached = solvers.LightWave(dim=3), DetachedLimitLightWave(dim=3)
    assert set(scheme_roles(honest).values()) == {"scheme"} and set(scheme_roles(detached).values()) == {
        "discretisation"
    }
    with pytest.raises(AssertionError, match=r"gradient is not that of the vector field its limit_field returns"):
        check_gradients(detached, examples=0)
    check_gradients(honest, examples=0)
    with pytest.raises(AssertionError, match=r"gradient is not that of the vector field its limit_field returns"):
        check_gradients(solvers.Split(DetachedLimitLightWave(dim=2)), examples=0)  # a layer's limit too


_RATES: dict[int, torch.Tensor] = {}


class IdMemoLimitLightWave(solvers.LightWave):
    """Light Wave whose limit field keeps its momentum, detached, in a table keyed by ``id(self)`` ("the limit built
    many times by the ode parameterization costs nothing"): every object's first value is right, but the parameter is
    frozen there, and an object freed and another made at its address reads the old one's stale momentum."""

    def limit_field(self, field):
        lam = _RATES.setdefault(id(self), self.lam().detach().clone())
        return lambda t, x: field(t, x) / (1 - lam.to(x.dtype))


def test_a_limit_memoised_in_a_table_keyed_by_the_objects_address_is_rejected_at_every_seed():
    honest = solvers.LightWave(dim=3)
    for _ in range(3):  # the limit's objects are kept alive to the end: none reads another's entry by a reused id()
        _RATES.clear()
        with pytest.raises(AssertionError, match=r"gradient is not that of the vector field its limit_field returns"):
            check_gradients(IdMemoLimitLightWave(dim=3), examples=0)
    check_gradients(honest, examples=0)

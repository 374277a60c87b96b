"""torch.compile: every preset traces without graph breaks, and compiled equals eager."""

import pytest
import torch

import odeformer
import odeformer.joint.mlp as recomputing

FULLGRAPH = sorted(set(odeformer.solver_names("discrete")) - {"reversible"})


def _code(name):
    """What Dynamo traces for a preset: the class whose ``step`` the layer's scheme runs, the layer's form, block
    stepper, splitting, FFN scheme and memory, whether the FFN has a step of its own, and every option that is not a
    number. Presets that share it differ in coefficients and numeric options alone (floats a trace holds as
    constants)."""
    p = odeformer.as_solver(name)
    owner = next(c for c in p.stepper.__mro__ if "step" in vars(c))
    words = sorted((k, v) for k, v in p.options.items() if isinstance(v, bool) or not isinstance(v, (int, float)))
    return owner, p.form, p.block_stepper, p.splitting, p.ffn, p.ffn_dt is None, p.memory, tuple(words)


TRACED = {}
for _name in FULLGRAPH:
    TRACED.setdefault(_code(_name), _name)
"""One preset per traced code path in the default suite; the others, the same code with other constants, in the slow
suite (every preset traces in CI)."""


def _model(solver):
    torch.manual_seed(0)
    return odeformer.ViT(depth=2, dim=16, heads=2, solver=solver)  # the first layer and one after it: what loops trace


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize(
    "solver",
    [
        *(n if n in TRACED.values() else pytest.param(n, marks=pytest.mark.slow) for n in FULLGRAPH),
        pytest.param(odeformer.solver("mix", splitting="strang"), marks=pytest.mark.slow),  # ~8 s
    ],
    ids=lambda s: s if isinstance(s, str) else f"{s.name}-{s.splitting}",
)
def test_presets_trace_in_one_graph(solver):
    model = _model(solver)
    images = torch.randn(2, 1, 8, 8)
    compiled = torch.compile(model, backend="eager", fullgraph=True)  # fullgraph: any graph break is an error
    out = compiled(images)
    out.sum().backward()
    torch.testing.assert_close(out, model(images), rtol=1e-6, atol=1e-6)


def test_reversible_compiles_with_its_stack_eager():
    """The reversible stack's custom backward stays eager (torch.compiler.disable); the rest compiles."""
    model = _model("reversible")
    images = torch.randn(2, 1, 8, 8)
    torch._dynamo.utils.counters.clear()
    compiled = torch.compile(model, backend="eager")
    out = compiled(images)
    grads = torch.autograd.grad(out.square().sum(), list(model.parameters()))
    reference = torch.autograd.grad(model(images).square().sum(), list(model.parameters()))
    breaks = [reason.splitlines()[0] for reason in torch._dynamo.utils.counters["graph_break"]]
    assert any("disable()`d function" in b for b in breaks), breaks  # Dynamo skipped it, did not trace into it
    torch.testing.assert_close(out, model(images), rtol=1e-6, atol=1e-6)
    for a, b in zip(grads, reference):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("solver", ["diffusion", "full_wave", "light_wave"])
def test_inductor_compiled_equals_eager(solver):
    model = _model(solver)
    images = torch.randn(4, 1, 8, 8)
    compiled = torch.compile(model)
    torch.testing.assert_close(compiled(images), model(images), rtol=1e-4, atol=1e-4)


def _graph_names(out: torch.Tensor) -> set[str]:
    seen, names, stack = set(), set(), [out.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.add(node.name())
        stack.extend(next_node for next_node, _ in node.next_functions)
    return names


@pytest.mark.parametrize(
    "solver,backend",
    [("diffusion", "eager"), ("light_wave", "eager"), pytest.param("diffusion", "inductor", marks=pytest.mark.slow)],
)
def test_the_recomputed_mlp_compiles_and_matches_eager(solver, backend, monkeypatch):
    """The FFN's recomputing Function (what training runs at size, forced here at a test's size) traces in one graph
    and its compiled gradients are eager's."""
    monkeypatch.setattr(recomputing, "RECOMPUTE_FROM", 0)
    model = _model(solver)
    images = torch.randn(2, 1, 8, 8)
    reference = model(images)
    assert "_RecomputedMLPBackward" in _graph_names(reference)
    expected = torch.autograd.grad(reference.square().sum(), list(model.parameters()))
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    out = compiled(images)
    grads = torch.autograd.grad(out.square().sum(), list(model.parameters()))
    torch.testing.assert_close(out, reference, rtol=1e-5, atol=1e-5)
    for a, b in zip(grads, expected, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)

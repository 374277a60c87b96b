"""Every threshold the property kit applies, stated once; the docstrings and ``docs/extending.md`` quote these names.

Change one here and every check, message and (through the docs test) the documentation follow.
"""

import torch

EPS = torch.finfo(torch.float64).eps
"""float64's rounding unit."""
EPS32 = torch.finfo(torch.float32).eps
"""float32's rounding unit."""

# -- order ------------------------------------------------------------------------------------------------------------
ORDER_TOLERANCE = 0.3
"""The fitted slope of log error against log dt must lie this close to the declared order."""
ABOVE_FLOOR = 100
"""A usable error exceeds ``n`` steps' worst-case rounding, ``n * EPS``, this many times."""
MIN_DT = 2.0**-12
"""Grids are refined at least to this step (unless the error reaches the rounding floor first)."""
MAX_STEPS = 2**12
"""... or to ``T / MAX_STEPS`` on horizons longer than 1."""
GRIDS = 3
"""The slope is fitted on the finest this many usable grids."""
STEADY = 0.1
"""The local slopes of those grids must agree this closely ..."""
SETTLING = 0.7
"""... or approach a limit, each change at most this fraction of the one before."""
ORDER_T = 0.5
"""Horizon of the default order problems."""
REFERENCE_DT = 2.0**-10
"""Coarser of the two classic RK4 runs a nonlinear reference is Richardson-extrapolated from."""
REFERENCE_RTOL = 1e-10
"""The two runs must agree to this (relative): the finer one's error is then below 1e-11, and the extrapolated
reference's far below what an order ladder measures above its rounding floor; else the reference is refined."""
REFERENCE_REFINE = 6
"""A span between checkpoints is refined at most this many doublings (64 times the steps)."""
CHECKPOINTS = 8
"""Errors are compared at ``t_k = k T / CHECKPOINTS``."""
BLOCK_WIDTH = 8
"""A block stepper's order is also measured on a block of this width (a transformer's is wider: a layer that takes
another path from some width shows) ..."""
BLOCK_TOKENS = 6
"""... and this many tokens."""
MOVED = 0.5
"""Standard deviation of the move of learnable parameters for the order, symplectic and reversible checks."""

# -- evaluations ------------------------------------------------------------------------------------------------------
EVAL_DTS = (1.0, 0.5, 0.1, 1e-3, -0.5, 2.5)
"""Step sizes of the deterministic evaluation count (a negative one: reversible backpropagation steps back, and a
stage's abscissa ``c`` is the same for either sign; one above 1.5, where a residual layer of a coarse model steps)."""
EVAL_T0 = 0.25
"""Start time of the deterministic evaluation count."""
EVAL_STEPS = 10
"""Steps of the deterministic evaluation count."""
MAX_HORIZON = 80
"""Drawn instances run up to this many steps (an evaluation or a defect that shows only at step 17 or 64 is found)."""

# -- symplectic and reversible ----------------------------------------------------------------------------------------
SYMPLECTIC_RTOL = 1000 * EPS
"""``max|Mᵀ J M - J| <= SYMPLECTIC_RTOL |M|²`` and ``|det M - 1| <= SYMPLECTIC_RTOL |M|^(2d)``."""
REVERSIBLE_DTS = (1.0, 0.5, 0.1, 0.01)
"""Step sizes of the deterministic round trips."""
REVERSIBLE_RTOL = 1e-12
"""A round trip recovers the state to this error, relative to the largest magnitude its steps reach."""
GRADIENT_NUDGES = 3
"""How many times a low-precision gradient is taken again from the state moved by one unit in the last place (each
entry up or down), to see how noisy the dtype makes it where the scheme's sums cancel (a learnable coefficient whose
effect is of order ``dt³``)."""
MODELLED_ROUNDING = 16
"""A round trip may also miss by this many times what modelled rounding moves it (its start and every evaluation's
input and result perturbed by float64's rounding unit), or by the scheme's own rounding units
(:func:`~solvers.testing.protocol.float32_allowance`) times that where its arithmetic is larger: the model does not
perturb the scheme's own sums (a kick's ``v + h a``, which rounds at the size of ``v``, not of ``h a``), of which a
composition of fifteen sub-steps of weights up to 2.4 has many (Yoshida's eighth-order composition at dt = -1 from a
pendulum at magnitude 100 missed by 1.07e-12 where sixteen times the modelled movement was 1.0e-12)."""
STIFF = 100.0
"""``|dt| L`` (``L`` the Lipschitz constant of a scheme's limit at the step's start, estimated from below) beyond
which no explicit step of it can stay stable: a drawn step that is not finite there is beyond its reach, not judged."""
BLOWN_UP = 1e3
"""A step that grows the state (or whose Jacobian grows) more than this many times is outside the scheme's stability
interval: the symplectic check halves such a step, and a drawn reversible point is redrawn, instead of judging it."""

# -- one step, protocol, gradients, precision --------------------------------------------------------------------------
ONE_STEP_RTOL = 1e-12
"""A step from the carried state equals a fresh one (and a sample alone its row of the batch) to this relative error."""
GRADIENT_RTOL = 1e-6
"""Autograd's derivative equals difference quotients to this (relative), or to what the quotients resolve."""
GRADIENT_STEPS = (4, 8)
"""The gradient is checked through this many steps (drawn between the two), the state handed on between them."""
FLOAT32_UNITS = 16
"""A float32 step agrees with the float64 step from the same start to at least this many float32 rounding units
(relative to the state's and the step's size) ..."""
FLOAT32_UNITS_PER_TERM = 2
"""... or to this many per evaluation and unit of coefficient, ``FLOAT32_UNITS_PER_TERM * evals_per_step *
sum|coefficients|``, where the scheme's arithmetic is larger (``check_precision``)."""
LINEAR_PART_SIZE = 2.0**-64
"""The size a state is scaled to where the allowance for rounding a nonlinear step's own values asks whether its linear
part rounds within its arithmetic's allowance (:func:`~solvers.testing.protocol.linear_part_rounds_within`): a
nonlinearity of the scheme's own whose relative size grows with the state (a drag ``c h |v|``, ``c h`` up to about
1e7) is below ``ONE_STEP_RTOL`` there; one that does not grow with it (``c sign(v)``) is, at its inverse."""
FLOAT32_MEASURED = 2
"""A scheme that states no coefficients is allowed this many times the float32 rounding units its own step shows on a
constant field (which no stage can round: what moves is the scheme's own combination of states, an extrapolation's
weights above 1) ..."""
FLOAT32_UNSTATED_MOST = 64
"""... up to this many units: a lower-precision stage (bf16, fp16: thousands of float32 units on a step of size one)
stays far beyond it, and coefficients that round more than it are stated by ``coefficients()``."""
LARGE_STATE = 4096
"""Some drawn states have at least this many entries (a write in place that only large states take is found)."""
MAGNITUDES = (1e-3, 1e3)
"""States and fields are drawn at magnitudes log-uniform in this range."""
T0_RANGE = (10.0, 1e3)
"""Now and then a run starts at a time of either sign log-uniform in this range (a model of depth 32 at dt 1 reaches
t = 32), else in [-1, 1]."""
RATES = (0.05, 0.9)
"""The step sizes of a drawn run alternate ``dt`` and ``rate * dt``, ``rate`` in this range (``dt`` changes by up to
20 times from one step to the next)."""

# -- contexts ---------------------------------------------------------------------------------------------------------
CONTEXT_SIZES = (
    (2, 8, 8),
    (2, 16, 32),
    (2, 17, 48),
    (2, 128, 128),
    (2, 17, 64),
    (1, 2708, 64),
    (2, 197, 192),
    (2, 64, 768),
)
"""``(batch, tokens, width)`` of the transformer-sized states the context check draws, each reached exactly by tiling
(a per-channel stepper keeps its width, a state with heads its batch): two small ones, then the tokens and widths the
presets step (the digits ViT, the character LM, Fashion-MNIST, Cora's full batch), a DeiT-Tiny sequence and a GPT-2
width, at a batch of two (a state's cost grows with it; the fixed contexts hold the presets' own batches, 64 and 128).
A scheme that branches on an exact shape a model has shows ..."""
CONTEXT_LARGE_STATE = 2**20
"""... and now and then a state of at least this many entries (a Tiny Shakespeare batch has 262k; a kernel that
switches path above a million entries shows)."""
CONTEXT_T0_RANGE = (10.0, 2e4)
"""Contexts start far from ``t = 0`` at times of either sign log-uniform in this range: past ``±8192``, where float16
and bfloat16 no longer hold a step's stage times apart."""
CONTEXT_MAX_DT = 4.0
"""Contexts replace the instance's step size now and then by one of either sign with ``|dt|`` from 1.5 to this (a
residual layer's step is often 1; a scheme guarded or switched above some step shows)."""
CONTEXT_SCALES = (2.0**-10, 2.0**10)
"""The powers of two a context scales the state and the field by range between these (about 1e-3 to 1e3, beside the
drawn magnitude), compared with the reference at the instance's own size: a scheme that clips, guards or switches path
on the size of its state meets both sides."""
UNRESOLVED = 0.1
"""A comparison whose allowance (the scheme's rounding units times the step's amplification, in the dtype's rounding
unit) exceeds this relative size resolves nothing and is not made: bfloat16 on a composition of fifteen large
sub-steps, or in float64 the inverse of a step far outside its stability region (Yoshida's eighth-order composition at
dt = 3.2, whose inverse amplifies rounding 5·10¹³ times)."""
COMMUTES = 1e-9
"""A scheme's limit field commutes with a shift of time or a scaling of the state (and its step must then too) where
the two sides agree to this (relative); a friction of the scheme's own that depends on the time or the size differs by
far more."""
HAMILTONIAN_WIDTH = 8
"""Drawn symplectic points have 1 to this many positions (and as many velocities): enough coordinates that a force
changed only on some of them shows."""

HALF_MAGNITUDES = (1e-2, 10.0)
"""Half-precision contexts clamp the drawn magnitude into this range (float16 overflows at 65504)."""

# -- how much is drawn -------------------------------------------------------------------------------------------------
EXAMPLES = 12
"""Drawn instances per claim in the default run (``check_stepper(cls, examples=...)`` draws more)."""
ORDER_EXAMPLES = 1
"""Drawn problems the order is measured on, beside the fixed ones, in the default run (a tenth of ``examples``,
at least this many, when more are asked for)."""

CONTINUITY_SPACING = 2**-6
"""The grid :func:`~solvers.testing.continuity.check_continuity` scans a step's size and start time on: a power of two,
so it holds a model's exact sizes (1, 1/2, 1/4, ...) and times (multiples of them, 0 among them)."""

CONTINUITY_LEVELS = 30
"""How many halvings a suspect jump is followed down (to ``CONTINUITY_SPACING / 2**30``, about 1.5e-11): a continuous
change shrinks with the distance, a jump stays."""

CONTINUITY_SUSPECTS = 3
"""How many suspect points and gaps of each scan are followed (the largest departures from a smooth curve)."""

CONTINUITY_KICK = 4.0
"""A step may jump where its own limit jumps in time by at most this many times ``|dt|`` times the limit's jump: a
stage that crosses a jump of the force moves the step by its weight (at most a few, a composition's) times ``dt``
times the jump. A step's jump beyond it is the scheme's, not its limit's."""

CONTINUITY_TIMES = (1.0, 2.0)
"""The depth-times ``T`` whose steps ``T / n`` are tested besides the grid, for ``n`` up to ``CONTINUITY_LAYERS``: a
model's ``dt`` need not be a power of two (``T = 1`` over 3 layers steps 1/3) ..."""
CONTINUITY_LAYERS = 64
"""... layers."""

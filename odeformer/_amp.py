"""Autocast inside custom autograd functions: a backward pass runs with autocast off unless told otherwise, so a
function whose forward ran under ``torch.autocast`` replays the same state in its backward (as ``torch.amp.custom_bwd``
does, for whichever device the tensors live on). One implementation, in ``solvers`` (its reversible driver needs it
too)."""

from solvers._reversible import AutocastState

__all__ = ["AutocastState"]

"""Compute / communication overlap of one MoE layer under n micro-batches, as SymPy expressions.

Per micro-batch: compute c (everything on the compute stream, shared expert s included),
dispatch d and combine b (the step model computes each at tokens / n, so weight reads and kernel
launches are paid once per micro-batch: splitting a batch has a price).

SM sharing. A communication kernel that holds N_SM_comm of the GPU's N_SM SMs slows compute that
runs beside it; with phi = N_SM_comm / N_SM, compute work c overlapped with communication x
takes one stage of

    stage(c, x) = max(x, c + phi x)

(during x the compute stream does (1 - phi) x of its work, the rest runs at full speed after).
DeepEP low-latency kernels hold no SMs while in flight (phi = 0); normal mode and NCCL do.

n = 1: c - s + stage(s, d) + b   (shared expert overlapped with the dispatch, seed 001's
       prepare_no_receive; the routed experts need the dispatched tokens, the combine ends it)
n >= 2 (seed 000 section 5.3, generalised; start-up and drain included):
       d + stage(c, d) + (n - 2) stage(c, b + d) + stage(c, b) + b
With phi = 0 and c >= b + d this is n c + d + b: communication hides behind compute except the
first dispatch and the last combine (seed 000's "DeepEP free decode communication" is its
steady state).

>>> import sympy as sp
>>> c, d, b = sp.symbols("c d b", positive=True)
>>> pipelined(c, d, b, 2)
b + d + Max(b, c) + Max(c, d)
"""

from __future__ import annotations

import sympy as sp

from ..specs.deployment import A2AMode
from ..symbolic.symbols import S
from ..symbolic.expr import smax, sym

__all__ = [
    "free_comm_layer",
    "step_edges",
    "layer_time",
    "pipelined",
    "sm_share",
    "stage",
]


def stage(c, x, phi=0) -> sp.Expr:
    """Compute work c beside communication x that holds a share phi of the SMs:
    max(x, c + phi x).

    >>> import sympy as sp
    >>> c, x, p = sp.symbols("c x p", positive=True)
    >>> stage(c, x, p)
    Max(x, c + p*x)
    """
    c, x, phi = sym(c), sym(x), sym(phi)
    return smax(x, c + phi * x)


def pipelined(c, d, b, n, phi=0, shared=0) -> sp.Expr:
    """Time of n micro-batches of (compute c, dispatch d, combine b) on two streams.

    n = 1: c - s + stage(s, d) + b; n >= 2: d + stage(c, d) + (n - 2) stage(c, b + d)
    + stage(c, b) + b (see the module docstring); s = ``shared`` (part of c).

    >>> import sympy as sp
    >>> c, d, b, s = sp.symbols("c d b s", positive=True)
    >>> pipelined(c, d, b, 1, shared=s)
    b + c - s + Max(d, s)
    """
    c, d, b, n, phi, s = (sym(x) for x in (c, d, b, n, phi, shared))
    one = c - s + stage(s, d, phi) + b if s != 0 else c + d + b
    many = d + stage(c, d, phi) + (n - 2) * stage(c, b + d, phi) + stage(c, b, phi) + b
    if n.is_number:
        return one if n == 1 else many
    return sp.Piecewise((one, sp.Eq(n, 1)), (many, True))


def sm_share(mode: A2AMode) -> sp.Expr:
    """Share of SMs communication holds while it overlaps compute: 0 for DeepEP low-latency
    (RDMA/IBGDA from a few warps, released while in flight), N_SM_comm / N_SM otherwise
    (N_SM_comm bound to :data:`moesym.numbers.bindings.COMM_SMS`).

    >>> sm_share(A2AMode.DEEPEP_LL)
    0
    >>> sm_share(A2AMode.DEEPEP_NORMAL)
    N_SM_comm/N_SM
    """
    if mode in (A2AMode.DEEPEP_LL, A2AMode.RING_MCAST):  # a mesh's Ethernet cores move the data
        return sp.Integer(0)
    return S.comm_sms / S.sms


def layer_time(compute_mb, dispatch_mb, combine_mb, n, deployment, workload, shared_mb=0) -> sp.Expr:
    """One layer's time for the whole per-GPU batch from per-micro-batch compute (shared expert
    ``shared_mb`` included in ``compute_mb``), dispatch and combine, under the deployment's
    all-to-all mode (auto: deepep-ll for decode, deepep-normal for prefill)."""
    mode = deployment.resolved_a2a(workload.phase)
    phi = sm_share(mode)
    d, b = sym(dispatch_mb), sym(combine_mb)
    if d == 0 and b == 0:  # nothing to overlap (EP = 1 or a dense layer)
        return sym(n) * sym(compute_mb)
    if mode is A2AMode.DEEPEP_LL:
        return free_comm_layer(compute_mb, d, b, n, shared_mb)
    return pipelined(compute_mb, d, b, n, phi, shared_mb)


def free_comm_layer(c, d, b, n, shared=0) -> sp.Expr:
    """DeepEP low-latency with n >= 2 micro-batches (seed 000 section 5.3, mode 2).

    The low-latency kernels hold no SMs and their receive completes in the background, so one
    micro-batch's dispatch and combine run under the other micro-batches' compute across layer
    boundaries: the steady state of a layer is n max(c, d + b), and the pipeline's start-up and
    drain (d + b of one micro-batch) are paid once per step (:func:`step_edges`), not per layer.
    With n = 1 nothing hides the communication except the shared expert under the dispatch.

    >>> import sympy as sp
    >>> c, d, b = sp.symbols("c d b", positive=True)
    >>> free_comm_layer(c, d, b, 2)
    2*Max(c, b + d)
    """
    c, d, b, n, s = (sym(x) for x in (c, d, b, n, shared))
    one = c - s + stage(s, d) + b if s != 0 else c + d + b
    many = n * smax(c, d + b)
    if n.is_number:
        return one if n == 1 else many
    return sp.Piecewise((one, sp.Eq(n, 1)), (many, True))


def step_edges(dispatch_mb, combine_mb, n, deployment, workload) -> sp.Expr:
    """Once-per-step start-up and drain of a pipeline that runs across layers (DeepEP
    low-latency with n >= 2: one micro-batch's dispatch and combine); 0 otherwise."""
    mode = deployment.resolved_a2a(workload.phase)
    d, b, n = sym(dispatch_mb), sym(combine_mb), sym(n)
    if mode is not A2AMode.DEEPEP_LL or (d == 0 and b == 0):
        return sp.Integer(0)
    if n.is_number:
        return sp.Integer(0) if n == 1 else d + b
    return sp.Piecewise((0, sp.Eq(n, 1)), (d + b, True))

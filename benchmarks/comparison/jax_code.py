"""JAX's side of each row: the NumPy-style expression a JAX user would write,
under ``jax.jit``, on arrays already on the CPU device.  Gradients are
``jax.vjp`` of the forward under the same ``jit`` (XLA recomputes the
forward's statistics inside it, as a JAX training step does).  JAX arrays
are immutable: every call allocates its outputs.

Imported only in the JAX worker processes (jax_worker), never by the
process that runs the comparison.
"""
from .inputs import EPS, GROUPS, MOMENTUM


def _forwards(jnp, lax, inp):
    """The family's forward as a function of (x, gamma[, beta]) with the
    parameters in keepdims layout."""
    a = inp.axes

    def layer_norm(x, g, b):
        m = jnp.mean(x, a, keepdims=True)
        v = jnp.var(x, a, keepdims=True)
        return (x - m) * lax.rsqrt(v + EPS) * g + b

    def rms_norm(x, g):
        return x * lax.rsqrt(jnp.mean(x * x, a, keepdims=True) + EPS) * g

    def group_norm(x, g, b):   # channels on axis 1
        n, c = x.shape[:2]
        xs = x.reshape((n, GROUPS, c // GROUPS) + x.shape[2:])
        inner = tuple(range(2, xs.ndim))
        m = jnp.mean(xs, inner, keepdims=True)
        v = jnp.var(xs, inner, keepdims=True)
        return ((xs - m) * lax.rsqrt(v + EPS)).reshape(x.shape) * g + b

    # batch_norm's training forward is layer_norm's expression over the
    # batch axes (the parameters run along the kept axes instead).
    return {"layer_norm": layer_norm, "rms_norm": rms_norm, "group_norm": group_norm,
            "batch_norm": layer_norm}


def _batch_norm_training(jnp, lax, inp):
    a = inp.axes
    n = inp.x.size // inp.gamma.size

    def batch_norm(x, g, b, run_m, run_v):
        m = jnp.mean(x, a, keepdims=True)
        v = jnp.var(x, a, keepdims=True)
        y = (x - m) * lax.rsqrt(v + EPS) * g + b
        return (y, (1 - MOMENTUM) * run_m + MOMENTUM * m,
                (1 - MOMENTUM) * run_v + MOMENTUM * v * (n / (n - 1)))
    return batch_norm


def function_of(jax, inp):
    """(the function, the NumPy arguments it takes) for inp.op."""
    jnp, lax = jax.numpy, jax.lax
    op, bc = inp.op, inp.broadcast
    if op.startswith("group_norm") and inp.axis % inp.x.ndim != 1:
        raise NotImplementedError("the JAX code here takes channels on axis 1")
    params = tuple(bc(p) for p in (inp.gamma, inp.beta) if p is not None)
    if op == "mean_var":
        return (lambda x: (jnp.mean(x, inp.axes), jnp.var(x, inp.axes))), (inp.x,)
    if op == "batch_norm":
        return (_batch_norm_training(jnp, lax, inp),
                (inp.x,) + params + (bc(inp.running_mean), bc(inp.running_var)))
    if op == "batch_norm_eval":
        def eval_norm(x, g, b, m, v):
            return (x - m) * lax.rsqrt(v + EPS) * g + b
        return eval_norm, (inp.x,) + params + (bc(inp.running_mean), bc(inp.running_var))
    forward = _forwards(jnp, lax, inp)[op.replace("_backward", "")]
    if not op.endswith("_backward"):
        return forward, (inp.x,) + params

    def gradients(dy, x, *params):
        _, pull = jax.vjp(forward, x, *params)
        return pull(dy)
    return gradients, (inp.dy, inp.x) + params


def build(jax, inp):
    """(jitted function, its arguments on the CPU device) for inp.op."""
    fn, args = function_of(jax, inp)
    return jax.jit(fn), tuple(jax.device_put(a) for a in args)

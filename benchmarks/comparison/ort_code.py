"""ONNX Runtime's side of each row: a small ONNX model of the op, built with
the ``onnx`` package, run on the CPU execution provider through IOBinding,
with x bound in place and the outputs bound to arrays allocated once.

ONNX normalizes trailing axes (LayerNormalization, RMSNormalization) or
every axis but 1 (BatchNormalization); other layouts get Transpose nodes
around the op, as a model exported for them would.  ONNX has no variance
operator: mean_var is the graph a user writes (ReduceMean, Sub, Mul,
ReduceMean).  Gradients are not part of ONNX Runtime's inference package.
"""
import numpy as np

from .inputs import EPS, MOMENTUM

OPSET = 23          # RMSNormalization is new in 23
IR_VERSION = 11     # the IR version of opset 23 (newer onnx packages write a
                    # newer one by default, which ONNX Runtime may refuse)


def load():
    """(onnxruntime, onnx); ImportError when either is absent."""
    import onnxruntime
    import onnx
    return onnxruntime, onnx


class _Graph:
    """A graph being built: nodes, parameters (initializers) and outputs."""

    def __init__(self, onnx, inp):
        self.onnx, self.inp = onnx, inp
        self.elem = onnx.helper.np_dtype_to_tensor_dtype(inp.dtype)
        self.nodes, self.inits, self.outputs = [], [], []
        self.count = 0

    def name(self, stem):
        self.count += 1
        return f"{stem}{self.count}"

    def const(self, array, stem="c"):
        name = self.name(stem)
        self.inits.append(self.onnx.numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op, inputs, n_out=1, **attrs):
        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(self.onnx.helper.make_node(op, list(inputs), outs, **attrs))
        return outs[0] if n_out == 1 else outs

    def transpose(self, value, perm):
        if perm == tuple(range(len(perm))):
            return value
        return self.node("Transpose", [value], perm=list(perm))

    def output(self, value, shape):
        self.outputs.append((value, shape))

    def model_bytes(self):
        h = self.onnx.helper
        graph = h.make_graph(
            self.nodes, "fastnorm_compare",
            [h.make_tensor_value_info("x", self.elem, list(self.inp.x.shape))],
            [h.make_tensor_value_info(v, self.elem, list(s)) for v, s in self.outputs],
            self.inits)
        model = h.make_model(graph, opset_imports=[h.make_opsetid("", OPSET)],
                             ir_version=IR_VERSION)
        return model.SerializeToString()


def _inverse(perm):
    return tuple(int(i) for i in np.argsort(perm))


def _trailing_norm(g, inp, rms):
    perm = inp.kept + inp.axes
    xt = g.transpose("x", perm)
    params = [g.const(inp.gamma)] + ([] if rms else [g.const(inp.beta)])
    op = "RMSNormalization" if rms else "LayerNormalization"
    y = g.node(op, [xt] + params, axis=len(inp.kept), epsilon=EPS)
    g.output(g.transpose(y, _inverse(perm)), inp.x.shape)


def _batch_norm(g, inp, training):
    if len(inp.kept) != 1:
        raise NotImplementedError("batch norm over all but more than one axis")
    perm = (inp.axes[0],) + inp.kept + inp.axes[1:]
    xt = g.transpose("x", perm)
    params = [g.const(a) for a in (inp.gamma, inp.beta, inp.running_mean, inp.running_var)]
    # ONNX's momentum weights the old running value: 1 - PyTorch's.
    outs = g.node("BatchNormalization", [xt] + params, n_out=3 if training else 1,
                  epsilon=EPS, momentum=1.0 - MOMENTUM, training_mode=int(training))
    y = outs[0] if training else outs
    g.output(g.transpose(y, _inverse(perm)), inp.x.shape)
    if training:
        for stat in outs[1:]:
            g.output(stat, inp.gamma.shape)


def _mean_var(g, inp):
    axes = g.const(np.array(inp.axes, np.int64), "axes")
    m = g.node("ReduceMean", ["x", axes], keepdims=1)
    d = g.node("Sub", ["x", m])
    var = g.node("ReduceMean", [g.node("Mul", [d, d]), axes], keepdims=0)
    kept = tuple(inp.x.shape[i] for i in inp.kept)
    g.output(g.node("Squeeze", [m, axes]), kept)
    g.output(var, kept)


def model_of(onnx, inp):
    """The serialized model of inp.op and its outputs' (name, shape)."""
    g = _Graph(onnx, inp)
    op = inp.op
    if op.endswith("_backward"):
        raise NotImplementedError("ONNX Runtime's inference package has no gradient operators")
    if op in ("layer_norm", "rms_norm"):
        _trailing_norm(g, inp, rms=op == "rms_norm")
    elif op in ("batch_norm", "batch_norm_eval"):
        _batch_norm(g, inp, training=op == "batch_norm")
    elif op == "mean_var":
        _mean_var(g, inp)
    else:
        raise NotImplementedError(op)
    return g.model_bytes(), g.outputs


def session(ort, model, threads):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    # Idle pool threads sleep rather than spin: on a machine with as many
    # cores as threads, a spinning thread would take a core from the next
    # column timed (fastnorm's and PyTorch's OpenMP teams sleep after a
    # short spin too).
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.log_severity_level = 3
    return ort.InferenceSession(model, sess_options=opts, providers=["CPUExecutionProvider"])


def build(ort, onnx, inp, threads, outputs=None):
    """A zero-argument callable that runs the model of inp.op with `threads`
    intra-op threads and returns its outputs (arrays bound once; pass the
    `outputs` of an earlier build to share them).  Returns (call, outputs)."""
    model, outs = model_of(onnx, inp)
    sess = session(ort, model, threads)
    if outputs is None:
        outputs = tuple(np.empty(shape, inp.dtype) for _, shape in outs)
    io = sess.io_binding()
    x_value = ort.OrtValue.ortvalue_from_numpy(inp.x)   # x's memory, no copy
    io.bind_ortvalue_input("x", x_value)
    bound = [ort.OrtValue.ortvalue_from_numpy(a) for a in outputs]
    for (name, _), value in zip(outs, bound):
        io.bind_ortvalue_output(name, value)

    def call():
        sess.run_with_iobinding(io)
        return outputs
    call.keep_alive = (x_value, bound)   # the OrtValues must outlive the binding
    return call, outputs

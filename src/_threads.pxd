# How the kernels' parallel loops share their work out among the threads.
#
# Their loops say schedule="runtime"; each call picks the schedule first.
# Small calls split the work the same way every time (static): repeated
# calls on arrays that fit the caches (a training step, a batch loop) find
# each thread's part where that thread left it, in its own core's L2.
# Taken as threads come free, the parts wander from core to core with the
# call: in cache, one thread against two, (256, 1024) float32 on a 2-core
# Xeon with 2 MiB of L2 a core: layer_norm 1.42 -> 2.10, rms_norm 1.73 ->
# 1.98, layer_norm_backward 1.60 -> 1.85, batch_norm over (2048, 128) 1.36
# -> 1.69.  Larger calls stream from memory, where nothing is left to
# find, and a static split waits for its slowest core: two threads, time /
# a copy, layer_norm over rows of (16384, 4096) float32 0.86 taken guided
# against 0.91 split statically, over the last two axes of (64, 196, 768)
# 0.51 against 0.56.  Gradients take their blocks one at a time instead
# (dynamic): layer_norm_backward over rows of (8192, 1024) and (16384,
# 4096) float32, two threads, 0.84 and 1.47 against 0.91 and 1.55 guided.

cdef extern from "fastnorm_simd.h" nogil:
    void fn_set_schedule(int same_split, int guided)

cdef enum:
    # Calls on x of at most this many bytes split their work statically.
    SAME_SPLIT_BYTES = 4 << 20


cdef inline void schedule_for(Py_ssize_t x_bytes, bint guided) noexcept nogil:
    """Set the schedule of this thread's next parallel loops for a call on
    x_bytes bytes of x: static up to SAME_SPLIT_BYTES, else guided or
    dynamic."""
    fn_set_schedule(x_bytes <= SAME_SPLIT_BYTES, guided)

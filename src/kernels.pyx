# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, nonecheck=False, freethreading_compatible=True
#
# The kernels, compiled once per instruction-set level as
# fastnorm._kernels_<level>: the forward schedules (forward.pxi), the
# gradients (backward.pxi) and their entry points, on the planner
# (plan.pxd), the statistics core (moments.pxd) and the vector primitives
# (simd.h).

from cython.parallel cimport parallel, prange
from libc.string cimport memcpy
from libc.math cimport sqrt, fabs, NAN
from libc.float cimport DBL_MAX
cimport numpy as cnp

from scratch cimport FN_KEEP_MIN, fn_calloc, fn_free, fn_malloc
from simd cimport *
from plan cimport *
from moments cimport *
from fetch cimport *

cnp.import_array()

include "forward.pxi"
include "backward.pxi"

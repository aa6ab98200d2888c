# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# Scratch memory kept from one call to the next (see scratch.h):
# the kernels' malloc, calloc and free.

cdef extern from "scratch.h" nogil:
    size_t FN_KEEP_MIN
    void* fn_malloc(size_t size)
    void* fn_calloc(size_t count, size_t size)
    void fn_free(void* p)

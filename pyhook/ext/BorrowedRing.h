// The extension's half of the failure ring's borrowed entries (recorder/FailureRing.h,
// keepBorrowed): a host module output kept by the native ring as its address and hook-time
// hash instead of a copy is held here, a detach()ed alias (same storage and version counter, no
// autograd graph), until the native ring's floor has passed its step, i.e. until the ring has
// evicted it and can no longer read it. The references live in process-wide lists, never in a
// hooks object that may be collected while the ring still points at the bytes.
//
// Outputs changed in place after their hook (BatchNorm's output, then ReLU(inplace=True)) would
// not hash as at their hook at a failure and be left out: a held tensor whose `_version` moved
// by the time its step is over marks its module path, whose outputs are copied from then on.
#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstdint>

namespace dlrr::pyext {

// 1: outputs of `path` (bytes) may be borrowed; 0: copied (changed in place before); -1: error.
int borrowable(PyObject* path);
// Holds `tensor` for `step` (the step the native ring borrowed it under): its detach()ed alias,
// or `tensor` itself when `own` (a contiguous copy nobody else sees). 0, or -1 with an exception.
int holdBorrowed(PyObject* tensor, bool own, PyObject* path, int64_t step);
// After a borrow answered `floor` in step `step`: lets go of the steps below the floor and
// checks the versions of the steps before `step` once (moved: the path is copied from now on).
// 0, or -1 with an exception.
int releaseBorrowed(int64_t floor, int64_t step);
// How many tensors are held now (tests).
Py_ssize_t heldBorrowed();
// The module paths learnt to be changed in place (a set of bytes, borrowed reference; tests).
PyObject* eagerPaths();

int initBorrowedRing();  // at module init: 0, or -1 with an exception

}  // namespace dlrr::pyext

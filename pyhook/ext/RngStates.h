// _dlrr_native.RngStates: a batch delivery's RNG states (dlrr_hook/rng.py, RngCapture's
// snapshot() then write()) read and written in C, one dlrr_rng_states call as before; and
// _dlrr_native.RngSnapshot, the same states taken now and written later (an optimizer-counted step).
#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

namespace dlrr::pyext {

// Adds the RngStates and RngSnapshot types to the module; 0, or -1 with an exception set.
int addRngStates(PyObject* module);

}  // namespace dlrr::pyext

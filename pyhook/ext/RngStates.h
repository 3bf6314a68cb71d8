// _dlrr_native.RngStates: a batch delivery's RNG states (dlrr_hook/rng.py, RngCapture's
// snapshot() then write()) read and written in C, one dlrr_rng_states call as before.
#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

namespace dlrr::pyext {

// Adds the RngStates type to the module; 0, or -1 with an exception set.
int addRngStates(PyObject* module);

}  // namespace dlrr::pyext

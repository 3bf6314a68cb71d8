// _dlrr_native.TensorListDigest: a step's gradient and parameter digests (dlrr_hook/session.py,
// _after_backward and _digest_parameters) gathered in C into one dlrr_digest_many call.
#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

namespace dlrr::pyext {

// Adds the TensorListDigest type to the module; 0, or -1 with an exception set.
int addTensorListDigest(PyObject* module);

}  // namespace dlrr::pyext

// _dlrr_native.ValueWriter: the batch value tree (dlrr_hook/values.py ValueWriter.write) walked
// in C.
#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

namespace dlrr::pyext {

// Adds the ValueWriter type to the module; 0, or -1 with an exception set.
int addValueWriter(PyObject* module);

}  // namespace dlrr::pyext

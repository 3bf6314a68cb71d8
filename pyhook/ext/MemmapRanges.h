// _dlrr_native.MemmapRanges: np.memmap.__getitem__ wrapped in C, reporting the byte ranges of the
// mapping a job slices (dlrr_hook/files.py, FileCapture._used) through dlrr_file_range's address.
#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

namespace dlrr::pyext {

// Adds the MemmapRanges type to the module; 0, or -1 with an exception set.
int addMemmapRanges(PyObject* module);

}  // namespace dlrr::pyext

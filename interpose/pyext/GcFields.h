// The garbage-collector slots of _dlrr_native's heap types (ModuleHooks, TensorListDigest):
// each keeps its owned references in consecutive PyObject* fields that Fields(obj, n) returns
// (the first, and their count in n); traverse visits them, clear drops them, dealloc frees.
#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

namespace dlrr::pyext {

template <typename T, PyObject** (*Fields)(T*, int&)>
int traverseFields(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));  // a heap type
  int n = 0;
  PyObject** f = Fields(reinterpret_cast<T*>(self), n);
  for (int i = 0; i < n; ++i) Py_VISIT(f[i]);
  return 0;
}

template <typename T, PyObject** (*Fields)(T*, int&)>
int clearFields(PyObject* self) {
  int n = 0;
  PyObject** f = Fields(reinterpret_cast<T*>(self), n);
  for (int i = 0; i < n; ++i) Py_CLEAR(f[i]);
  return 0;
}

template <typename T, PyObject** (*Fields)(T*, int&)>
void deallocFields(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  clearFields<T, Fields>(self);
  type->tp_free(self);
  Py_DECREF(type);
}

}  // namespace dlrr::pyext

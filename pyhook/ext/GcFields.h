// _dlrr_native's heap types (ModuleHooks, TensorListDigest, ValueWriter, RngStates): each keeps
// its owned references in consecutive PyObject* fields that Fields(obj, n) returns (the first,
// and their count in n); traverse visits them, clear drops them, dealloc frees. newHeapType
// makes such a type; intern makes the attribute names they read at every call.
#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

namespace dlrr::pyext {

// The consecutive PyObject* fields of `obj` from the one at byte offset `first` (offsetof),
// addressed from the object itself as CPython's member tables do: indexing from the first
// field's own address would step outside that field.
template <typename T>
PyObject** fieldsFrom(T* obj, size_t first) {
  return reinterpret_cast<PyObject**>(reinterpret_cast<char*>(obj) + first);
}

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

// A garbage-collected heap type of T named `name` (a static string: the type keeps pointing
// at it), with `init` and the static `methods`; nullptr with an exception set on failure.
template <typename T, PyObject** (*Fields)(T*, int&)>
PyObject* newHeapType(const char* name, const char* doc, initproc init, PyMethodDef* methods) {
  PyType_Slot slots[] = {{Py_tp_doc, const_cast<char*>(doc)},
                         {Py_tp_new, reinterpret_cast<void*>(PyType_GenericNew)},
                         {Py_tp_init, reinterpret_cast<void*>(init)},
                         {Py_tp_traverse, reinterpret_cast<void*>(traverseFields<T, Fields>)},
                         {Py_tp_clear, reinterpret_cast<void*>(clearFields<T, Fields>)},
                         {Py_tp_dealloc, reinterpret_cast<void*>(deallocFields<T, Fields>)},
                         {Py_tp_methods, methods},
                         {0, nullptr}};
  PyType_Spec spec = {name, static_cast<int>(sizeof(T)), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, slots};
  return PyType_FromSpec(&spec);  // copies the slots and the doc
}

// Adds `type` (a new reference, or nullptr after a failure) to `module` as `name`; -1 on failure.
inline int addType(PyObject* module, const char* name, PyObject* type) {
  if (!type) return -1;
  if (PyModule_AddObject(module, name, type) < 0) {  // steals on success only
    Py_DECREF(type);
    return -1;
  }
  return 0;
}

// Interns `text` into `slot` once; false (an exception set) on failure.
inline bool intern(PyObject*& slot, const char* text) {
  slot = PyUnicode_InternFromString(text);
  return slot != nullptr;
}

}  // namespace dlrr::pyext

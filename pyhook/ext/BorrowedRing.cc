#include "BorrowedRing.h"

namespace dlrr::pyext {
namespace {

PyObject* groups = nullptr;  // list of [step (int), [(alias, version, path), ...], checked (bool)]
PyObject* eager = nullptr;   // set of module paths (bytes) copied, not borrowed
PyObject* detachName = nullptr;
PyObject* versionName = nullptr;

// The held tensors of `group` whose version moved since their hook: their paths become eager.
int checkVersions(PyObject* group) {
  if (PyList_GET_ITEM(group, 2) == Py_True) return 0;
  PyObject* entries = PyList_GET_ITEM(group, 1);
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(entries); ++i) {
    PyObject* e = PyList_GET_ITEM(entries, i);
    PyObject* version = PyTuple_GET_ITEM(e, 1);
    if (version == Py_None) continue;  // our own copy, or an inference tensor (no version counter)
    PyObject* now = PyObject_GetAttr(PyTuple_GET_ITEM(e, 0), versionName);
    if (!now) return -1;
    int same = PyObject_RichCompareBool(now, version, Py_EQ);
    Py_DECREF(now);
    if (same < 0 || (!same && PySet_Add(eager, PyTuple_GET_ITEM(e, 2)) < 0)) return -1;
  }
  return PyList_SetItem(group, 2, Py_NewRef(Py_True));
}

}  // namespace

int borrowable(PyObject* path) {
  int in = PySet_Contains(eager, path);
  return in < 0 ? -1 : !in;
}

int holdBorrowed(PyObject* tensor, bool own, PyObject* path, int64_t step) {
  PyObject* alias = nullptr;
  PyObject* version = nullptr;
  if (own) {
    alias = Py_NewRef(tensor);
    version = Py_NewRef(Py_None);
  } else {
    PyObject* self = tensor;
    alias = PyObject_VectorcallMethod(detachName, &self, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr);
    if (!alias) {  // the ring already points at its bytes: hold the tensor itself, graph and all
      PyErr_Clear();
      alias = Py_NewRef(tensor);
    }
    version = PyObject_GetAttr(alias, versionName);
    if (!version && PyErr_ExceptionMatches(PyExc_RuntimeError)) {
      // An inference tensor has no version counter: not learnt, the failure's hash check alone.
      PyErr_Clear();
      version = Py_NewRef(Py_None);
    }
  }
  PyObject* entry = version ? PyTuple_Pack(3, alias, version, path) : nullptr;
  Py_XDECREF(alias);
  Py_XDECREF(version);
  if (!entry) return -1;
  // The step's group: the last one in the steady state.
  PyObject* group = nullptr;
  for (Py_ssize_t i = PyList_GET_SIZE(groups); i-- > 0 && !group;) {
    PyObject* g = PyList_GET_ITEM(groups, i);
    long long s = PyLong_AsLongLong(PyList_GET_ITEM(g, 0));
    if (s == step) group = g;
  }
  int rc = 0;
  if (!group) {
    PyObject* s = PyLong_FromLongLong(step);
    PyObject* entries = s ? PyList_New(0) : nullptr;
    group = entries ? PyList_New(3) : nullptr;
    if (group) {
      PyList_SET_ITEM(group, 0, s);
      PyList_SET_ITEM(group, 1, entries);
      PyList_SET_ITEM(group, 2, Py_NewRef(Py_False));
      rc = PyList_Append(groups, group);
      Py_DECREF(group);
    } else {
      Py_XDECREF(s);
      Py_XDECREF(entries);
      rc = -1;
    }
  }
  if (rc == 0) rc = PyList_Append(PyList_GET_ITEM(group, 1), entry);
  Py_DECREF(entry);
  return rc;
}

int releaseBorrowed(int64_t floor, int64_t step) {
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(groups);) {
    PyObject* g = PyList_GET_ITEM(groups, i);
    long long s = PyLong_AsLongLong(PyList_GET_ITEM(g, 0));
    if (s < step && checkVersions(g) < 0) return -1;
    if (s < floor) {  // evicted by the native ring: never read again
      if (PyList_SetSlice(groups, i, i + 1, nullptr) < 0) return -1;
      continue;
    }
    ++i;
  }
  return 0;
}

Py_ssize_t heldBorrowed() {
  Py_ssize_t n = 0;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(groups); ++i)
    n += PyList_GET_SIZE(PyList_GET_ITEM(PyList_GET_ITEM(groups, i), 1));
  return n;
}

PyObject* eagerPaths() { return eager; }

int initBorrowedRing() {
  if (!groups) groups = PyList_New(0);
  if (!eager) eager = PySet_New(nullptr);
  if (!detachName) detachName = PyUnicode_InternFromString("detach");
  if (!versionName) versionName = PyUnicode_InternFromString("_version");
  return groups && eager && detachName && versionName ? 0 : -1;
}

}  // namespace dlrr::pyext

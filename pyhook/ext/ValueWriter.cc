// _dlrr_native.ValueWriter: the depth-first dlrr_val_* calls of a batch (dlrr_hook/values.py,
// ValueWriter.write) made from C. The Python walk costs a dispatch, a frame and a ctypes crossing
// per value; here exact built-in values (None, bool, int within int64, float, str, bytes, list,
// tuple, dict with str keys) and exact torch.Tensor that is dense, contiguous, on the CPU and of a
// plain dtype the marshal has cached go to the library's functions through their addresses (the
// preloaded library's symbols, or a test double's ctypes callbacks), with the arguments the Python
// walk gives them.
//
// Any other value (numpy values, subclasses, Mappings, namedtuples, dicts with a key that is not
// an exact str or does not encode to UTF-8 as is, other tensors, ints beyond int64, values nested
// deeper than max_depth) goes to the Python writer's one-value write (`fallback(value, depth)`),
// which writes exactly one value: the calls stay the Python walk's, in its order. An exception it
// raises ends the walk there, as in Python.
//
// The GIL stays held for a tensor below 1 MiB (a batch's, typically): handing it over and back
// would cost more than it frees, and another thread waiting for it could keep it for a switch
// interval. A larger tensor (a snapshot's parameters) is hashed and copied without it, as the
// ctypes call does: a 64 MiB one held it for ~200 ms while another thread waited.
// Every object the library reads (strings, bytes, tensors) is referenced by the walk until its
// call returns: containers are walked over a snapshot of their items (a list's copy, a dict's
// items), as the Python walk does, so a fallback that changes them changes nothing here.
#include "ValueWriter.h"

#include <cstdint>

#include "DenseTensor.h"
#include "GcFields.h"
#include "dlrr/dlrr.h"

namespace dlrr::pyext {
namespace {

// The dlrr_val_* functions the walk calls, typed as dlrr.h declares them; dlrr_val_opaque is
// left to the fallback.
struct Functions {
  decltype(&dlrr_val_list) list;
  decltype(&dlrr_val_tuple) tuple;
  decltype(&dlrr_val_dict) dict;
  decltype(&dlrr_val_key) key;
  decltype(&dlrr_val_none) none;
  decltype(&dlrr_val_bool) boolean;
  decltype(&dlrr_val_int) integer;
  decltype(&dlrr_val_float) real;
  decltype(&dlrr_val_str) str;
  decltype(&dlrr_val_bytes) bytes;
  decltype(&dlrr_val_tensor) tensor;
};

// The C names of Functions' members, in their order: the keys of the `functions` argument.
constexpr const char* kFunctionNames[] = {"dlrr_val_list", "dlrr_val_tuple", "dlrr_val_dict",  "dlrr_val_key",
                                          "dlrr_val_none", "dlrr_val_bool",  "dlrr_val_int",   "dlrr_val_float",
                                          "dlrr_val_str",  "dlrr_val_bytes", "dlrr_val_tensor"};
constexpr int kFunctionCount = sizeof(kFunctionNames) / sizeof(kFunctionNames[0]);
static_assert(sizeof(Functions) == kFunctionCount * sizeof(void (*)()));

constexpr uint64_t kReleaseGilBytes = 1 << 20;

PyObject* requiresGradName;  // interned at module init

// What the walk reads; every reference is owned.
struct ValueWriter {
  PyObject_HEAD PyObject* tensorType;  // torch.Tensor: only exact instances are read here
  PyObject* strided;                   // torch.strided
  PyObject* dtypes;                    // TensorMarshal._dtypes: dtype -> (name bytes, size, special)
  PyObject* cpuDevice;                 // the device name bytes of a CPU tensor (TensorMarshal.device_name)
  PyObject* fallback;                  // fallback(value, depth): the Python writer, one value
  Functions fn;
  long maxDepth;
};

PyObject** fields(ValueWriter* w, int& n) {
  static_assert(offsetof(ValueWriter, fallback) - offsetof(ValueWriter, tensorType) == 4 * sizeof(PyObject*));
  n = 5;
  return dlrr::pyext::fieldsFrom(w, offsetof(ValueWriter, tensorType));
}

int writeValue(ValueWriter* w, PyObject* value, long depth);

// The Python writer writes `value`: 0, or -1 with its exception set.
int fallback(ValueWriter* w, PyObject* value, long depth) {
  PyObject* write = Py_NewRef(w->fallback);  // held: the Python code it runs could re-init the walker
  PyObject* d = PyLong_FromLong(depth);
  PyObject* r = d ? PyObject_CallFunctionObjArgs(write, value, d, nullptr) : nullptr;
  Py_XDECREF(d);
  Py_DECREF(write);
  if (!r) return -1;
  Py_DECREF(r);
  return 0;
}

// The children of a list or tuple the caller holds a reference to.
int writeItems(ValueWriter* w, PyObject* sequence, long depth) {
  PyObject** items = PySequence_Fast_ITEMS(sequence);
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(sequence); ++i)
    if (writeValue(w, items[i], depth + 1) < 0) return -1;
  return 0;
}

int writeDict(ValueWriter* w, PyObject* value, long depth) {
  PyObject* items = PyDict_Items(value);  // list(value.items()), as the Python walk takes it
  if (!items) return -1;
  const Py_ssize_t n = PyList_GET_SIZE(items);
  bool plainKeys = true;  // every key an exact str with UTF-8 as is; else Python writes the dict
  for (Py_ssize_t i = 0; i < n && plainKeys; ++i) {
    PyObject* key = PyTuple_GET_ITEM(PyList_GET_ITEM(items, i), 0);
    plainKeys = PyUnicode_CheckExact(key) && PyUnicode_AsUTF8AndSize(key, nullptr) != nullptr;
  }
  int rc = 0;
  if (!plainKeys) {
    PyErr_Clear();  // a lone surrogate: the Python writer encodes it (surrogatepass)
    rc = fallback(w, value, depth);
  } else {
    w->fn.dict(static_cast<uint32_t>(n));
    for (Py_ssize_t i = 0; i < n && rc == 0; ++i) {
      PyObject* pair = PyList_GET_ITEM(items, i);
      w->fn.key(PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(pair, 0), nullptr));  // cached by the check above
      rc = writeValue(w, PyTuple_GET_ITEM(pair, 1), depth + 1);
    }
  }
  Py_DECREF(items);
  return rc;
}

int writeTensor(ValueWriter* w, PyObject* value, long depth) {
  DenseTensor t;
  PyObject* grad = t.read(value, w->dtypes, w->strided) ? PyObject_GetAttr(value, requiresGradName) : nullptr;
  if (!grad || !PyBool_Check(grad)) {  // anything unusual: the Python writer decides
    Py_XDECREF(grad);
    PyErr_Clear();
    return fallback(w, value, depth);
  }
  const int requiresGrad = grad == Py_True ? 1 : 0;
  Py_DECREF(grad);
  // `value` is held by the caller, the dtype name by `t`; the device name and the function are
  // taken here, since another thread may re-init the walker while the GIL is released.
  PyObject* device = Py_NewRef(w->cpuDevice);
  const auto tensor = w->fn.tensor;
  if (t.nbytes() >= kReleaseGilBytes) {
    Py_BEGIN_ALLOW_THREADS tensor(t.dtype(), t.elemSize(), t.ndim(), t.shape(), t.data(), t.nbytes(),
                                  PyBytes_AS_STRING(device), requiresGrad);
    Py_END_ALLOW_THREADS
  } else {
    tensor(t.dtype(), t.elemSize(), t.ndim(), t.shape(), t.data(), t.nbytes(), PyBytes_AS_STRING(device), requiresGrad);
  }
  Py_DECREF(device);
  return 0;
}

// One value and its children: 0, or -1 with an exception set.
int writeValue(ValueWriter* w, PyObject* value, long depth) {
  if (depth > w->maxDepth) return fallback(w, value, depth);  // "(nested too deep)"
  PyTypeObject* type = Py_TYPE(value);
  if (value == Py_None) {
    w->fn.none();
  } else if (type == &PyBool_Type) {
    w->fn.boolean(value == Py_True ? 1 : 0);
  } else if (type == &PyLong_Type) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow) return fallback(w, value, depth);  // "int (beyond int64)"
    w->fn.integer(v);
  } else if (type == &PyFloat_Type) {
    w->fn.real(PyFloat_AS_DOUBLE(value));
  } else if (type == &PyUnicode_Type) {
    Py_ssize_t n = 0;
    const char* s = PyUnicode_AsUTF8AndSize(value, &n);
    if (!s) {
      PyErr_Clear();  // a lone surrogate: the Python writer encodes it (surrogatepass)
      return fallback(w, value, depth);
    }
    w->fn.str(s, static_cast<uint64_t>(n));
  } else if (type == &PyBytes_Type) {
    w->fn.bytes(PyBytes_AS_STRING(value), static_cast<uint64_t>(PyBytes_GET_SIZE(value)));
  } else if (type == &PyTuple_Type) {
    w->fn.tuple(static_cast<uint32_t>(PyTuple_GET_SIZE(value)));
    Py_INCREF(value);  // the caller's reference could go with a fallback's changes
    const int rc = writeItems(w, value, depth);
    Py_DECREF(value);
    return rc;
  } else if (type == &PyList_Type) {
    PyObject* items = PyList_GetSlice(value, 0, PY_SSIZE_T_MAX);  // list(value)
    if (!items) return -1;
    w->fn.list(static_cast<uint32_t>(PyList_GET_SIZE(items)));
    const int rc = writeItems(w, items, depth);
    Py_DECREF(items);
    return rc;
  } else if (type == &PyDict_Type) {
    return writeDict(w, value, depth);
  } else if (reinterpret_cast<PyObject*>(type) == w->tensorType) {
    return writeTensor(w, value, depth);
  } else {
    return fallback(w, value, depth);
  }
  return 0;
}

// write(value, depth=0): the calls of one value, as ValueWriter.write makes them.
PyObject* write(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  auto* w = reinterpret_cast<ValueWriter*>(self);
  if (!w->fallback) {
    PyErr_SetString(PyExc_RuntimeError, "ValueWriter was not initialised");
    return nullptr;
  }
  if (nargs < 1 || nargs > 2) {
    PyErr_SetString(PyExc_TypeError, "write(value, depth=0)");
    return nullptr;
  }
  long depth = 0;
  if (nargs == 2) {
    depth = PyLong_AsLong(args[1]);
    if (depth == -1 && PyErr_Occurred()) return nullptr;
  }
  if (writeValue(w, args[0], depth) < 0) return nullptr;
  Py_RETURN_NONE;
}

int init(PyObject* self, PyObject* args, PyObject* kwargs) {
  auto* w = reinterpret_cast<ValueWriter*>(self);
  static const char* keywords[] = {"functions",  "tensor_type", "strided",  "dtypes",
                                   "cpu_device", "max_depth",   "fallback", nullptr};
  PyObject* functions = nullptr;
  PyObject* o[5] = {};
  long maxDepth = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O!OO!O!lO", const_cast<char**>(keywords), &PyDict_Type, &functions,
                                   &PyType_Type, &o[0], &o[1], &PyDict_Type, &o[2], &PyBytes_Type, &o[3], &maxDepth,
                                   &o[4]))
    return -1;
  if (!PyCallable_Check(o[4]) || maxDepth < 0) {
    PyErr_SetString(PyExc_ValueError, "fallback must be callable and max_depth not negative");
    return -1;
  }
  Functions fn{};
  auto* slots = reinterpret_cast<uintptr_t*>(&fn);
  for (int i = 0; i < kFunctionCount; ++i) {
    PyObject* address = PyDict_GetItemString(functions, kFunctionNames[i]);  // borrowed
    slots[i] = address ? static_cast<uintptr_t>(PyLong_AsUnsignedLongLong(address)) : 0;
    if (PyErr_Occurred()) return -1;
    if (!slots[i]) {
      PyErr_Format(PyExc_ValueError, "functions lacks the address of %s", kFunctionNames[i]);
      return -1;
    }
  }
  int n = 0;
  PyObject** f = fields(w, n);
  for (int i = 0; i < n; ++i) Py_XSETREF(f[i], Py_NewRef(o[i]));
  w->fn = fn;
  w->maxDepth = maxDepth;
  return 0;
}

PyMethodDef methods[] = {{"write", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(write)), METH_FASTCALL,
                          "write(value, depth=0): the dlrr_val_* calls of one value"},
                         {nullptr, nullptr, 0, nullptr}};

}  // namespace

int addValueWriter(PyObject* module) {
  requiresGradName = PyUnicode_InternFromString("requires_grad");
  if (!requiresGradName || initDenseTensorNames() < 0) return -1;
  return addType(module, "ValueWriter",
                 newHeapType<ValueWriter, fields>("_dlrr_native.ValueWriter",
                                                  "ValueWriter(functions, tensor_type, strided, dtypes, cpu_device, "
                                                  "max_depth, fallback): a batch's dlrr_val_* calls from C",
                                                  init, methods));
}

}  // namespace dlrr::pyext

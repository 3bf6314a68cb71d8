// _dlrr_native.MemmapRanges: np.memmap.__getitem__ as a C callable that reports the bytes of the
// mapping a job slices, FileCapture's Python wrapper and _used (dlrr_hook/files.py) without a
// Python frame: ~3 us a window in Python, 32 windows a step in a nanoGPT-style loop (issue 33).
//
// A call runs numpy's own __getitem__ first, then, when the recorder is active and the thread
// is not inside a DataLoader fetch (FileCapture._paused), works out the range as _used does and
// calls dlrr_file_range through its address (the preloaded library's symbol or a test double's
// ctypes callback) with the same arguments. The mapping's facts come from FileCapture itself
// (its one-mapping cache `_last`, filled by its `_facts_of`), so both paths share one cache and
// never keep more than one map alive. What this cannot decide exactly (an index or facts of an
// unexpected type, an overflow, an error other than a missing `_mmap`) goes to the Python _used,
// as does everything when the hook finds numpy's array layout other than the one read here.
// Errors never reach the job, as in the Python wrapper; a BaseException that is not an
// Exception (KeyboardInterrupt raised by a signal handler in _facts_of) does, as there.
#include "MemmapRanges.h"

#include <structmember.h>

#include <cstddef>
#include <cstdint>

#include "GcFields.h"

namespace dlrr::pyext {
namespace {

using FileRangeFn = void (*)(const char*, uint64_t, const void*, uint64_t);

constexpr int kCContiguous = 0x0001;  // NPY_ARRAY_C_CONTIGUOUS

// The leading fields of numpy's PyArrayObject_fields (ndarraytypes.h), the same in NumPy 1.x
// and 2.x. The hook checks them against probes' __array_interface__ (read()) before use.
struct ArrayFields {
  PyObject_HEAD char* data;
  int nd;
  Py_ssize_t* dimensions;
  Py_ssize_t* strides;
  PyObject* base;
  PyObject* descr;
  int flags;
};

struct Names {
  PyObject* active;
  PyObject* mmap;
  PyObject* last;
  PyObject* factsOf;
  PyObject* itemsize;
  PyObject* used;
  PyObject* ndarray;
  PyObject* integer;
};
Names names;

struct MemmapRanges {
  PyObject_HEAD vectorcallfunc vectorcall;
  PyObject* rec;       // owned references, consecutive (fields()): the Session (.active)
  PyObject* capture;   // the FileCapture (._last, ._facts_of)
  PyObject* paused;    // its dict of threads inside a fetch
  PyObject* original;  // numpy's memmap.__getitem__
  PyObject* used;      // capture._used: the Python path
  PyObject* numpy;
  PyObject* ndarray;  // numpy.ndarray
  PyObject* integer;  // numpy.integer
  PyObject* descr;    // the last dtype seen, whose itemsize is `itemsize`
  PyObject* dict;     // what functools.update_wrapper sets
  Py_ssize_t itemsize;
  Py_ssize_t pythonPath;  // calls handed to the Python _used (read by the tests)
  FileRangeFn fileRange;
};

PyObject** fields(MemmapRanges* m, int& n) {
  static_assert(offsetof(MemmapRanges, dict) - offsetof(MemmapRanges, rec) == 9 * sizeof(PyObject*));
  n = 10;
  return fieldsFrom(m, offsetof(MemmapRanges, rec));
}

// What _used does with a call: decided here (reported, or nothing to report), the Python path's,
// or an exception to pass on (not an Exception: the Python wrapper does not catch it either).
enum class Outcome { done, python, raise };

// After a failed call: the Python path for an Exception (cleared), else raise.
Outcome failed() {
  if (PyErr_ExceptionMatches(PyExc_Exception)) {
    PyErr_Clear();
    return Outcome::python;
  }
  return Outcome::raise;
}

// The itemsize of `descr` (a dtype), kept for the last one: arrays of one file share theirs.
bool itemsizeOf(MemmapRanges* m, PyObject* descr, int64_t& out) {
  if (descr != m->descr) {
    PyObject* value = PyObject_GetAttr(descr, names.itemsize);
    if (!value) return false;
    Py_ssize_t size = PyLong_AsSsize_t(value);
    Py_DECREF(value);
    if (size == -1 && PyErr_Occurred()) return false;
    Py_XSETREF(m->descr, Py_NewRef(descr));
    m->itemsize = size;
  }
  out = m->itemsize;
  return true;
}

bool isInstance(PyObject* o, PyObject* type) { return PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject*>(type)); }

// [lo, hi) of the bytes `result` views: its data and nbytes when C-contiguous, numpy's
// byte_bounds otherwise (the span of a strided view). False when a figure overflows int64.
bool arrayBounds(const ArrayFields* a, int64_t itemsize, int64_t& lo, int64_t& hi) {
  auto data = reinterpret_cast<uintptr_t>(a->data);
  if (data > static_cast<uintptr_t>(INT64_MAX)) return false;
  lo = hi = static_cast<int64_t>(data);
  if (a->flags & kCContiguous) {
    int64_t bytes = itemsize;
    for (int i = 0; i < a->nd; ++i)
      if (__builtin_mul_overflow(bytes, static_cast<int64_t>(a->dimensions[i]), &bytes)) return false;
    return !__builtin_add_overflow(lo, bytes, &hi);
  }
  for (int i = 0; i < a->nd; ++i) {
    int64_t span = 0;
    int64_t stride = a->strides[i];
    if (__builtin_mul_overflow(static_cast<int64_t>(a->dimensions[i]) - 1, stride, &span)) return false;
    if (__builtin_add_overflow(stride < 0 ? lo : hi, span, stride < 0 ? &lo : &hi)) return false;
  }
  return !__builtin_add_overflow(hi, itemsize, &hi);
}

// [lo, hi) of element `index` of the 1-D `array` (a scalar result): _used's
// data + int(index) % max(len, 1) * strides[0], one item long.
Outcome elementBounds(MemmapRanges* m, PyObject* array, PyObject* index, int64_t& lo, int64_t& hi) {
  const auto* a = reinterpret_cast<const ArrayFields*>(array);
  PyObject* asInt = PyNumber_Long(index);
  if (!asInt) return failed();
  int overflow = 0;
  long long i = PyLong_AsLongLongAndOverflow(asInt, &overflow);
  Py_DECREF(asInt);
  if (overflow) return Outcome::python;
  if (i == -1 && PyErr_Occurred()) return failed();
  int64_t itemsize = 0;
  if (!itemsizeOf(m, a->descr, itemsize)) return failed();
  auto data = reinterpret_cast<uintptr_t>(a->data);
  if (data > static_cast<uintptr_t>(INT64_MAX)) return Outcome::python;
  int64_t length = a->dimensions[0] > 1 ? a->dimensions[0] : 1;
  int64_t item = i % length;
  if (item < 0) item += length;  // Python's modulo: the sign of the divisor
  int64_t offset = 0;
  if (__builtin_mul_overflow(item, static_cast<int64_t>(a->strides[0]), &offset) ||
      __builtin_add_overflow(static_cast<int64_t>(data), offset, &lo) || __builtin_add_overflow(lo, itemsize, &hi))
    return Outcome::python;
  return Outcome::done;
}

// An int of the facts tuple into `out`; false when it is not one that fits.
bool factInt(PyObject* o, int64_t& out) {
  if (!PyLong_Check(o)) return false;
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
  if (overflow || (v == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return false;
  }
  out = v;
  return true;
}

// The facts of mapping `mm` (a new reference): FileCapture's cached ones when `_last` is of
// `mm`, else its _facts_of's (which caches them in `_last`); nullptr on error.
PyObject* factsOf(MemmapRanges* m, PyObject* array, PyObject* mm) {
  PyObject* last = PyObject_GetAttr(m->capture, names.last);
  if (!last) return nullptr;
  if (PyTuple_Check(last) && PyTuple_GET_SIZE(last) == 2 && PyTuple_GET_ITEM(last, 0) == mm) {
    PyObject* facts = Py_NewRef(PyTuple_GET_ITEM(last, 1));
    Py_DECREF(last);
    return facts;
  }
  Py_DECREF(last);
  PyObject* args[] = {m->capture, array, mm, m->numpy};
  return PyObject_VectorcallMethod(names.factsOf, args, 4, nullptr);
}

// FileCapture._used(array, index, result, numpy) in C, or the outcome that says who does it.
Outcome usedHere(MemmapRanges* m, PyObject* array, PyObject* index, PyObject* result) {
  if (!isInstance(array, m->ndarray)) return Outcome::python;  // the fields below are an ndarray's
  PyObject* mm = PyObject_GetAttr(array, names.mmap);
  if (!mm) {
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return failed();
    PyErr_Clear();  // getattr(array, "_mmap", None)
    return Outcome::done;
  }
  if (mm == Py_None) {  // a memmap-typed copy (astype, arithmetic): no mapping behind it
    Py_DECREF(mm);
    return Outcome::done;
  }
  PyObject* facts = factsOf(m, array, mm);
  Py_DECREF(mm);
  if (!facts) return failed();
  struct Decref {
    PyObject* o;
    ~Decref() { Py_DECREF(o); }
  } keep{facts};
  if (facts == Py_None) return Outcome::done;  // an anonymous mapping
  int64_t fileStart = 0, base = 0, size = 0;
  if (!PyTuple_Check(facts) || PyTuple_GET_SIZE(facts) != 4 || !PyBytes_Check(PyTuple_GET_ITEM(facts, 0)) ||
      !factInt(PyTuple_GET_ITEM(facts, 1), fileStart) || !factInt(PyTuple_GET_ITEM(facts, 2), base) ||
      !factInt(PyTuple_GET_ITEM(facts, 3), size))
    return Outcome::python;
  int64_t lo = 0, hi = 0;
  if (isInstance(result, m->ndarray)) {
    const auto* a = reinterpret_cast<const ArrayFields*>(result);
    int64_t itemsize = 0;
    if (!itemsizeOf(m, a->descr, itemsize)) return failed();
    if (!arrayBounds(a, itemsize, lo, hi)) return Outcome::python;
  } else if ((PyLong_Check(index) || isInstance(index, m->integer)) &&
             reinterpret_cast<const ArrayFields*>(array)->nd == 1) {
    Outcome o = elementBounds(m, array, index, lo, hi);
    if (o != Outcome::done) return o;
  } else {
    return Outcome::done;
  }
  int64_t end = 0, offset = 0;
  if (__builtin_add_overflow(base, size, &end)) return Outcome::python;
  if (lo < base || hi > end || hi <= lo) return Outcome::done;  // a copy (fancy indexing)
  if (__builtin_add_overflow(fileStart, lo - base, &offset) || offset < 0) return Outcome::python;
  m->fileRange(PyBytes_AS_STRING(PyTuple_GET_ITEM(facts, 0)), static_cast<uint64_t>(offset),
               reinterpret_cast<const void*>(static_cast<uintptr_t>(lo)), static_cast<uint64_t>(hi - lo));
  return Outcome::done;
}

// Reports what `result` (array[index]) used; false with an exception to pass on to the job.
bool record(MemmapRanges* m, PyObject* array, PyObject* index, PyObject* result) {
  Outcome o = usedHere(m, array, index, result);
  if (o == Outcome::python) {
    ++m->pythonPath;
    PyObject* args[] = {array, index, result, m->numpy};
    PyObject* r = PyObject_Vectorcall(m->used, args, 4, nullptr);
    if (r) {
      Py_DECREF(r);
      return true;
    }
    o = failed();
  }
  if (o == Outcome::raise) return false;
  PyErr_Clear();  // never the job's problem
  return true;
}

PyObject* notInitialised() {
  PyErr_SetString(PyExc_RuntimeError, "MemmapRanges was not initialised");
  return nullptr;
}

// The wrapper: numpy's __getitem__, then the range when recording and not in a fetch.
PyObject* getitem(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* m = reinterpret_cast<MemmapRanges*>(self);
  if (!m->original) return notInitialised();
  if (PyVectorcall_NARGS(nargsf) != 2 || (kwnames && PyTuple_GET_SIZE(kwnames))) {
    PyErr_SetString(PyExc_TypeError, "__getitem__(self, index)");
    return nullptr;
  }
  PyObject* result = PyObject_Vectorcall(m->original, args, nargsf, nullptr);
  if (!result) return nullptr;
  PyObject* activeObject = PyObject_GetAttr(m->rec, names.active);
  int active = activeObject ? PyObject_IsTrue(activeObject) : -1;
  Py_XDECREF(activeObject);
  if (active > 0 && PyDict_GET_SIZE(m->paused)) {  // threading.get_ident() in paused
    PyObject* thread = PyLong_FromUnsignedLong(PyThread_get_thread_ident());
    int in = thread ? PyDict_Contains(m->paused, thread) : -1;
    Py_XDECREF(thread);
    active = in < 0 ? -1 : !in;
  }
  if (active > 0 && !record(m, args[0], args[1], result)) {
    Py_DECREF(result);
    return nullptr;
  }
  if (active < 0) PyErr_Clear();  // the recorder's own state unreadable: nothing recorded
  return result;
}

// used(array, index, result): FileCapture._used's work alone (what a Python wrapper would call).
PyObject* used(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  auto* m = reinterpret_cast<MemmapRanges*>(self);
  if (!m->original) return notInitialised();
  if (nargs != 3) {
    PyErr_SetString(PyExc_TypeError, "used(array, index, result)");
    return nullptr;
  }
  if (!record(m, args[0], args[1], args[2])) return nullptr;
  Py_RETURN_NONE;
}

// read(array): (data, shape, strides, c_contiguous, itemsize) through the layout read above,
// for the hook to compare with numpy's own account before using this type.
PyObject* read(PyObject* self, PyObject* array) {
  auto* m = reinterpret_cast<MemmapRanges*>(self);
  if (!m->original) return notInitialised();
  if (!isInstance(array, m->ndarray)) {
    PyErr_SetString(PyExc_TypeError, "read() takes an ndarray");
    return nullptr;
  }
  const auto* a = reinterpret_cast<const ArrayFields*>(array);
  int64_t itemsize = 0;
  if (a->nd < 0 || a->nd > 64 || !itemsizeOf(m, a->descr, itemsize)) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "not numpy's array layout");
    return nullptr;
  }
  PyObject* shape = PyTuple_New(a->nd);
  PyObject* strides = shape ? PyTuple_New(a->nd) : nullptr;
  for (int i = 0; strides && i < a->nd; ++i) {
    PyObject* n = PyLong_FromSsize_t(a->dimensions[i]);
    PyObject* s = PyLong_FromSsize_t(a->strides[i]);
    if (n) PyTuple_SET_ITEM(shape, i, n);
    if (s) PyTuple_SET_ITEM(strides, i, s);
    if (!n || !s) Py_CLEAR(strides);
  }
  if (!strides) {
    Py_XDECREF(shape);
    return nullptr;
  }
  return Py_BuildValue("(KNNOL)", static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(a->data)), shape, strides,
                       (a->flags & kCContiguous) ? Py_True : Py_False, static_cast<long long>(itemsize));
}

// A method of memmap: bound to the array it is read from, itself when read from the class.
PyObject* bind(PyObject* self, PyObject* obj, PyObject* /*type*/) {
  if (!obj || obj == Py_None) return Py_NewRef(self);
  return PyMethod_New(self, obj);
}

int init(PyObject* self, PyObject* args, PyObject* kwargs) {
  auto* m = reinterpret_cast<MemmapRanges*>(self);
  static const char* keywords[] = {"file_range_address", "rec", "capture", "paused", "original", "numpy", nullptr};
  unsigned long long fileRange = 0;
  PyObject *rec = nullptr, *capture = nullptr, *paused = nullptr, *original = nullptr, *numpy = nullptr;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "KOOO!OO", const_cast<char**>(keywords), &fileRange, &rec, &capture,
                                   &PyDict_Type, &paused, &original, &numpy))
    return -1;
  if (!fileRange) {
    PyErr_SetString(PyExc_ValueError, "file_range_address must be set");
    return -1;
  }
  PyObject* usedMethod = PyObject_GetAttr(capture, names.used);
  PyObject* ndarray = usedMethod ? PyObject_GetAttr(numpy, names.ndarray) : nullptr;
  PyObject* integer = ndarray ? PyObject_GetAttr(numpy, names.integer) : nullptr;
  if (integer && (!PyType_Check(ndarray) || !PyType_Check(integer))) {
    PyErr_SetString(PyExc_TypeError, "numpy.ndarray and numpy.integer must be types");
    Py_CLEAR(integer);
  }
  if (!integer) {
    Py_XDECREF(usedMethod);
    Py_XDECREF(ndarray);
    return -1;
  }
  int n = 0;
  PyObject** f = fields(m, n);
  for (int i = 0; i < n - 1; ++i) Py_CLEAR(f[i]);  // not the instance dict
  m->rec = Py_NewRef(rec);
  m->capture = Py_NewRef(capture);
  m->paused = Py_NewRef(paused);
  m->original = Py_NewRef(original);
  m->used = usedMethod;
  m->numpy = Py_NewRef(numpy);
  m->ndarray = ndarray;
  m->integer = integer;
  m->itemsize = 0;
  m->pythonPath = 0;
  m->fileRange = reinterpret_cast<FileRangeFn>(static_cast<uintptr_t>(fileRange));
  m->vectorcall = getitem;
  return 0;
}

PyMethodDef methods[] = {
    {"used", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(used)), METH_FASTCALL,
     "used(array, index, result): report the bytes of the mapping result = array[index] used"},
    {"read", read, METH_O, "read(array): (data, shape, strides, c_contiguous, itemsize) as read here"},
    {nullptr, nullptr, 0, nullptr}};

PyMemberDef members[] = {{"__vectorcalloffset__", T_PYSSIZET, offsetof(MemmapRanges, vectorcall), READONLY, nullptr},
                         {"__dictoffset__", T_PYSSIZET, offsetof(MemmapRanges, dict), READONLY, nullptr},
                         {"python_path", T_PYSSIZET, offsetof(MemmapRanges, pythonPath), READONLY,
                          "calls handed to FileCapture._used (not decided here)"},
                         {nullptr, 0, 0, 0, nullptr}};

PyGetSetDef getset[] = {{"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, nullptr, nullptr},
                        {nullptr, nullptr, nullptr, nullptr, nullptr}};

}  // namespace

int addMemmapRanges(PyObject* module) {
  if (!intern(names.active, "active") || !intern(names.mmap, "_mmap") || !intern(names.last, "_last") ||
      !intern(names.factsOf, "_facts_of") || !intern(names.itemsize, "itemsize") || !intern(names.used, "_used") ||
      !intern(names.ndarray, "ndarray") || !intern(names.integer, "integer"))
    return -1;
  static const char doc[] =
      "MemmapRanges(file_range_address, rec, capture, paused, original, numpy): np.memmap.__getitem__ "
      "reporting the mapping's bytes a result uses (FileCapture)";
  PyType_Slot slots[] = {{Py_tp_doc, const_cast<char*>(doc)},
                         {Py_tp_new, reinterpret_cast<void*>(PyType_GenericNew)},
                         {Py_tp_init, reinterpret_cast<void*>(init)},
                         {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
                         {Py_tp_descr_get, reinterpret_cast<void*>(bind)},
                         {Py_tp_traverse, reinterpret_cast<void*>(traverseFields<MemmapRanges, fields>)},
                         {Py_tp_clear, reinterpret_cast<void*>(clearFields<MemmapRanges, fields>)},
                         {Py_tp_dealloc, reinterpret_cast<void*>(deallocFields<MemmapRanges, fields>)},
                         {Py_tp_methods, methods},
                         {Py_tp_members, members},
                         {Py_tp_getset, getset},
                         {0, nullptr}};
  PyType_Spec spec = {
      "_dlrr_native.MemmapRanges", static_cast<int>(sizeof(MemmapRanges)), 0,
      Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR, slots};
  return addType(module, "MemmapRanges", PyType_FromSpec(&spec));
}

}  // namespace dlrr::pyext

// _dlrr_native.TensorListDigest: the per-tensor loop of a step's gradient digests (after
// backward) and parameter digests (after optimizer.step()) in C. The Python loop it replaces
// (dlrr_hook/session.py) costs a TensorMarshal.prepare and a DigestBatch.add (struct packing) per
// tensor; here each dense contiguous CPU tensor of a cached dtype becomes a dlrr_digest_item_t in
// a C array, and the array goes to dlrr_digest_many through its address (the preloaded
// library's symbol, or a test double's ctypes callback), one call per point as before.
//
// Every other tensor (not on the CPU, not contiguous, not strided, a dtype not seen yet or a
// complex/quantized one, a tensor subclass other than Parameter) goes to the Python fallback the
// hook hands over, which digests it as the Python loop does; the items gathered before it are
// digested first, so the events keep the loop's order. The per-name call counters and the
// names of unnamed optimizer parameters ("optimizer%d.group%d.%d") are the loop's.
#include "TensorListDigest.h"

#include <algorithm>
#include <cstdint>
#include <new>
#include <vector>

#include "DenseTensor.h"
#include "GcFields.h"
#include "dlrr/dlrr.h"

namespace dlrr::pyext {
namespace {

using DigestManyFn = int (*)(int, uint32_t, const dlrr_digest_item_t*);

constexpr uint64_t kReleaseGilBytes = 1 << 16;  // hash large totals without the GIL, as ctypes does

struct Names {
  PyObject* grad;
  PyObject* params;
};
Names names;

// What the two methods read; every reference is owned.
struct TensorListDigest {
  PyObject_HEAD PyObject* dtypes;  // TensorMarshal._dtypes: dtype -> (name bytes, size, special)
  PyObject* tensorTypes;           // tuple of the exact types digested here (torch.Tensor, Parameter)
  PyObject* strided;               // torch.strided
  PyObject* fallback;              // fallback(kind, name, call_index, tensor): the Python path
  DigestManyFn many;
};

PyObject** fields(TensorListDigest* d, int& n) {
  static_assert(offsetof(TensorListDigest, fallback) - offsetof(TensorListDigest, dtypes) == 3 * sizeof(PyObject*));
  n = 4;
  return dlrr::pyext::fieldsFrom(d, offsetof(TensorListDigest, dtypes));
}

// The items of one dlrr_digest_many, with a reference to every object they point into (names,
// dtype names, tensors) until the call returns.
class Pending {
 public:
  Pending() = default;
  Pending(const Pending&) = delete;
  Pending& operator=(const Pending&) = delete;
  ~Pending() { drop(); }

  // Takes the three references (owned) whatever it returns; false on a memory error (set).
  bool add(PyObject* name, PyObject* dtypeName, PyObject* tensor, const int64_t* shape, int ndim, uint64_t data,
           uint64_t nbytes, uint32_t callIndex) {
    try {  // room first: the pushes below cannot throw, and the vectors stay aligned
      room(refs_, 3);
      room(items_, 1);
      room(shapeAt_, 1);
      room(dims_, static_cast<size_t>(ndim));
    } catch (const std::bad_alloc&) {
      Py_DECREF(name);
      Py_DECREF(dtypeName);
      Py_DECREF(tensor);
      PyErr_NoMemory();
      return false;
    }
    refs_.push_back(name);
    refs_.push_back(dtypeName);
    refs_.push_back(tensor);
    dlrr_digest_item_t item{};
    item.path = PyBytes_AS_STRING(name);
    item.dtype = PyBytes_AS_STRING(dtypeName);
    item.data = reinterpret_cast<const void*>(static_cast<uintptr_t>(data));
    item.nbytes = nbytes;
    item.call_index = callIndex;
    item.ndim = ndim;
    items_.push_back(item);
    shapeAt_.push_back(dims_.size());
    dims_.insert(dims_.end(), shape, shape + ndim);
    bytes_ += nbytes;
    return true;
  }

  // One dlrr_digest_many for the items gathered; an exception being raised is kept as it is.
  void flush(DigestManyFn many, int kind) {
    if (items_.empty()) return;
    for (size_t i = 0; i < items_.size(); ++i) items_[i].shape = dims_.data() + shapeAt_[i];
#if PY_VERSION_HEX >= 0x030C0000
    PyObject* raised = PyErr_GetRaisedException();  // a test double's callback runs Python code
#else
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);  // a test double's callback runs Python code
#endif
    auto n = static_cast<uint32_t>(items_.size());
    if (bytes_ >= kReleaseGilBytes) {
      Py_BEGIN_ALLOW_THREADS many(kind, n, items_.data());
      Py_END_ALLOW_THREADS
    } else {
      many(kind, n, items_.data());
    }
    drop();
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(raised);
#else
    PyErr_Restore(type, value, tb);
#endif
  }

 private:
  // Capacity for `extra` more, doubling (a reserve of the exact size would copy at every add).
  template <typename T>
  static void room(std::vector<T>& v, size_t extra) {
    if (v.size() + extra > v.capacity()) v.reserve(std::max(v.size() + extra, std::max<size_t>(16, 2 * v.capacity())));
  }

  void drop() {
    items_.clear();
    shapeAt_.clear();
    dims_.clear();
    bytes_ = 0;
    std::vector<PyObject*> refs;
    refs.swap(refs_);  // a tensor's dealloc could re-enter: nothing of ours is touched then
    for (PyObject* o : refs) Py_DECREF(o);
  }

  std::vector<dlrr_digest_item_t> items_;
  std::vector<size_t> shapeAt_;  // items' shapes in dims_ (pointers once dims_ stops growing)
  std::vector<int64_t> dims_;
  std::vector<PyObject*> refs_;
  uint64_t bytes_ = 0;
};

// calls.get(name, 0), and calls[name] = that + 1: the loop's per-name counter; -1 on error.
long long nextCall(PyObject* calls, PyObject* name) {
  PyObject* count = PyDict_GetItemWithError(calls, name);
  if (!count && PyErr_Occurred()) return -1;
  long long callIndex = count ? PyLong_AsLongLong(count) : 0;
  if (callIndex < 0) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "negative call count");
    return -1;
  }
  PyObject* next = PyLong_FromLongLong(callIndex + 1);
  if (!next || PyDict_SetItem(calls, name, next) < 0) {
    Py_XDECREF(next);
    return -1;
  }
  Py_DECREF(next);
  return callIndex;
}

// A dense contiguous CPU tensor of a cached plain dtype into `pending`: 1 gathered, 0 not this
// case (nothing done, no error set: the Python path decides), -1 error (set).
int gather(TensorListDigest* d, Pending& pending, PyObject* name, uint32_t callIndex, PyObject* tensor) {
  if (!PyBytes_Check(name) || !PyTuple_Check(d->tensorTypes)) return 0;
  bool known = false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(d->tensorTypes) && !known; ++i)
    known = Py_TYPE(tensor) == reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(d->tensorTypes, i));
  if (!known) return 0;
  DenseTensor t;
  if (!t.read(tensor, d->dtypes, d->strided)) return 0;
  return pending.add(Py_NewRef(name), t.dtypeRef(), Py_NewRef(tensor), t.shape(), t.ndim(), t.dataAddress(), t.nbytes(),
                     callIndex)
             ? 1
             : -1;
}

// One tensor of the loop: counted, then gathered or (after the items before it) handed to the
// Python fallback. 0, or -1 with an exception set.
int digestOne(TensorListDigest* d, Pending& pending, int kind, PyObject* calls, PyObject* name, PyObject* tensor) {
  long long callIndex = nextCall(calls, name);
  if (callIndex < 0) return -1;
  int rc = gather(d, pending, name, static_cast<uint32_t>(callIndex), tensor);
  if (rc != 0) return rc < 0 ? -1 : 0;
  pending.flush(d->many, kind);  // the events stay in the loop's order
  PyObject* r = PyObject_CallFunction(d->fallback, "iOLO", kind, name, callIndex, tensor);
  if (!r) return -1;
  Py_DECREF(r);
  return 0;
}

bool parseKind(PyObject* arg, int& kind) {
  long k = PyLong_AsLong(arg);
  if (k == -1 && PyErr_Occurred()) return false;
  kind = static_cast<int>(k);
  return true;
}

// gradients(kind, params, calls): params [(name bytes, parameter)]; each .grad not None.
PyObject* gradients(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  auto* d = reinterpret_cast<TensorListDigest*>(self);
  int kind = 0;
  if (nargs != 3 || !PyDict_Check(args[2])) {
    PyErr_SetString(PyExc_TypeError, "gradients(kind, params, calls: dict)");
    return nullptr;
  }
  if (!parseKind(args[0], kind)) return nullptr;
  PyObject* params = PySequence_Fast(args[1], "params must be a sequence");
  if (!params) return nullptr;
  Pending pending;
  bool ok = true;
  for (Py_ssize_t i = 0; ok && i < PySequence_Fast_GET_SIZE(params); ++i) {
    PyObject* pair = PySequence_Fast_GET_ITEM(params, i);
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
      PyErr_SetString(PyExc_TypeError, "params holds (name, parameter) pairs");
      ok = false;
      break;
    }
    PyObject* name = PyTuple_GET_ITEM(pair, 0);
    PyObject* grad = PyObject_GetAttr(PyTuple_GET_ITEM(pair, 1), names.grad);
    if (!grad) {
      ok = false;
    } else if (grad != Py_None) {
      Py_INCREF(name);  // the pair is the caller's list's: a fallback could change it
      ok = digestOne(d, pending, kind, args[2], name, grad) == 0;
      Py_DECREF(name);
    }
    Py_XDECREF(grad);
  }
  pending.flush(d->many, kind);  // as the loop's `finally`
  Py_DECREF(params);
  if (!ok) return nullptr;
  Py_RETURN_NONE;
}

// parameters(kind, param_groups, names, number, calls): names {id(parameter): name bytes}; an
// unnamed parameter is "optimizer<number>.group<g>.<i>".
PyObject* parameters(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  auto* d = reinterpret_cast<TensorListDigest*>(self);
  int kind = 0;
  if (nargs != 5 || !PyDict_Check(args[2]) || !PyDict_Check(args[4])) {
    PyErr_SetString(PyExc_TypeError, "parameters(kind, param_groups, names: dict, number, calls: dict)");
    return nullptr;
  }
  if (!parseKind(args[0], kind)) return nullptr;
  long number = PyLong_AsLong(args[3]);
  if (number == -1 && PyErr_Occurred()) return nullptr;
  PyObject* groups = PySequence_Fast(args[1], "param_groups must be a sequence");
  if (!groups) return nullptr;
  Pending pending;
  bool ok = true;
  for (Py_ssize_t g = 0; ok && g < PySequence_Fast_GET_SIZE(groups); ++g) {
    PyObject* list = PyObject_GetItem(PySequence_Fast_GET_ITEM(groups, g), names.params);
    PyObject* params = list ? PySequence_Fast(list, "a group's params must be a sequence") : nullptr;
    Py_XDECREF(list);
    ok = params != nullptr;
    for (Py_ssize_t i = 0; ok && i < PySequence_Fast_GET_SIZE(params); ++i) {
      PyObject* param = Py_NewRef(PySequence_Fast_GET_ITEM(params, i));
      PyObject* key = PyLong_FromVoidPtr(param);  // id(param)
      PyObject* name = key ? PyDict_GetItemWithError(args[2], key) : nullptr;
      Py_XDECREF(key);
      if (name) {
        Py_INCREF(name);
      } else if (!PyErr_Occurred()) {
        name = PyBytes_FromFormat("optimizer%ld.group%zd.%zd", number, g, i);
      }
      ok = name && digestOne(d, pending, kind, args[4], name, param) == 0;
      Py_XDECREF(name);
      Py_DECREF(param);
    }
    Py_XDECREF(params);
  }
  pending.flush(d->many, kind);
  Py_DECREF(groups);
  if (!ok) return nullptr;
  Py_RETURN_NONE;
}

int init(PyObject* self, PyObject* args, PyObject* kwargs) {
  auto* d = reinterpret_cast<TensorListDigest*>(self);
  static const char* keywords[] = {"digest_many_address", "dtypes", "tensor_types", "strided", "fallback", nullptr};
  unsigned long long address = 0;
  PyObject* o[4] = {};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "KO!O!OO", const_cast<char**>(keywords), &address, &PyDict_Type, &o[0],
                                   &PyTuple_Type, &o[1], &o[2], &o[3]))
    return -1;
  if (!address || !PyCallable_Check(o[3])) {
    PyErr_SetString(PyExc_ValueError, "digest_many_address must be set and fallback callable");
    return -1;
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o[1]); ++i) {
    if (!PyType_Check(PyTuple_GET_ITEM(o[1], i))) {
      PyErr_SetString(PyExc_TypeError, "tensor_types must be a tuple of types");
      return -1;
    }
  }
  int n = 0;
  PyObject** f = fields(d, n);
  for (int i = 0; i < n; ++i) Py_XSETREF(f[i], Py_NewRef(o[i]));
  d->many = reinterpret_cast<DigestManyFn>(static_cast<uintptr_t>(address));
  return 0;
}

// A method called before init (no dlrr_digest_many to call) raises instead of crashing.
bool ready(PyObject* self) {
  if (reinterpret_cast<TensorListDigest*>(self)->fallback) return true;
  PyErr_SetString(PyExc_RuntimeError, "TensorListDigest was not initialised");
  return false;
}

PyObject* gradientsChecked(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  return ready(self) ? gradients(self, args, nargs) : nullptr;
}

PyObject* parametersChecked(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  return ready(self) ? parameters(self, args, nargs) : nullptr;
}

PyMethodDef methods[] = {
    {"gradients", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(gradientsChecked)), METH_FASTCALL,
     "gradients(kind, params, calls): digests each parameter's .grad that is not None"},
    {"parameters", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(parametersChecked)), METH_FASTCALL,
     "parameters(kind, param_groups, names, number, calls): digests an optimizer's parameters"},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

int addTensorListDigest(PyObject* module) {
  if (!intern(names.grad, "grad") || !intern(names.params, "params") || initDenseTensorNames() < 0) return -1;
  return addType(module, "TensorListDigest",
                 newHeapType<TensorListDigest, fields>("_dlrr_native.TensorListDigest",
                                                       "TensorListDigest(digest_many_address, dtypes, tensor_types, "
                                                       "strided, fallback): a step's gradient and parameter digests",
                                                       init, methods));
}

}  // namespace dlrr::pyext

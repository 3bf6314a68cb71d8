// _dlrr_native: the global module forward hooks of the Python hook (dlrr_hook/modules.py) as
// C functions, so that a module call costs no Python frame and no ctypes crossing in the common
// case: recorder active, not fetching a batch, path known, one dense contiguous CPU tensor out.
// That case is digested here through dlrr_digest's address (handed over by the hook: the
// preloaded library's symbol, or a test double's ctypes callback); everything else calls the
// Python functions the pure-Python hooks call (root bookkeeping, path naming, the output walk,
// GPU tensors, the failure snapshot), so both paths give the same events in the same order.
//
// The module's other types: TensorListDigest (TensorListDigest.cc) digests a step's gradients and
// parameters, ValueWriter (ValueWriter.cc) writes a batch's value tree, RngStates (RngStates.cc)
// writes a batch delivery's RNG states, MemmapRanges (MemmapRanges.cc) reports the np.memmap
// windows a job slices.
//
// Built per interpreter (the module's file name carries the ABI tag); the hook falls back to
// its Python hooks when this module cannot be imported.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstdint>
#include <cstring>
#include <iterator>

#include "BorrowedRing.h"
#include "DenseTensor.h"
#include "GcFields.h"
#include "MemmapRanges.h"
#include "ModuleTreeVersion.h"
#include "RngStates.h"
#include "TensorListDigest.h"
#include "ValueWriter.h"
#include "dlrr/dlrr.h"

namespace {

using dlrr::pyext::DenseTensor;
using dlrr::pyext::intern;
using dlrr::pyext::newHeapType;

using DigestFn = int (*)(int, const char*, uint32_t, uint32_t, const char*, int, const int64_t*, const void*, uint64_t,
                         int, dlrr_digest_t*);
using BorrowFn = int (*)(int, const char*, uint32_t, uint32_t, const char*, int, const int64_t*, const void*, uint64_t,
                         dlrr_digest_t*, int64_t*);

constexpr uint64_t kReleaseGilBytes = 1 << 16;  // hash large outputs without the GIL, as ctypes does

struct Names {
  PyObject* active;
  PyObject* dict;
  PyObject* stack;
  PyObject* depth;
  PyObject* layout;
  PyObject* isCpu;
  PyObject* detach;
  PyObject* contiguous;
};
Names names;

// The state one tracker's hooks read; every reference is owned.
struct ModuleHooks {
  PyObject_HEAD PyObject* rec;  // Recorder: .active
  PyObject* local;              // the tracker's threading.local (.stack)
  PyObject* fetch;              // modules._fetch (.depth)
  PyObject* isCompiling;        // torch.compiler.is_compiling or None
  PyObject* isGradEnabled;      // torch.is_grad_enabled
  PyObject* onRoot;             // on_root(module, grad_enabled)
  PyObject* onOutput;           // on_output(path, output): the Python path
  PyObject* pathOf;             // ModulePaths.path_of(module, parent, root)
  PyObject* paths;              // ModulePaths._paths: id(module) -> (weakref, path bytes)
  PyObject* calls;              // Recorder._module_calls: path -> calls in this step
  PyObject* tensorType;         // torch.Tensor: only exact instances take the native digest
  PyObject* strided;            // torch.strided
  PyObject* dtypes;             // TensorMarshal._dtypes: dtype -> (name bytes, size, special)
  PyObject* failureSnapshot;    // Recorder._failure_snapshot()
  PyObject* internalError;      // Recorder.internal_error(exc)
  PyObject* localDict;          // local's dict for the thread localOwner (a cache; null: none)
  PyObject* fetchDict;          // fetch's dict for the thread fetchOwner (a cache; null: none)
  DigestFn digest;              // null: every output goes to onOutput (replay)
  BorrowFn borrow;              // dlrr_digest_borrowed, or null: the ring copies (BorrowedRing.h)
  uint64_t localOwner;          // PyThreadState_GetID of the thread localDict belongs to
  uint64_t fetchOwner;
  dlrr::pyext::TensorGetters getters;  // torch.Tensor's getters for DenseTensor::read
  int keep;
  int digestOutputs;
};

PyObject** fields(ModuleHooks* h, int& n) {
  static_assert(offsetof(ModuleHooks, fetchDict) - offsetof(ModuleHooks, rec) == 16 * sizeof(PyObject*));
  n = 17;
  return dlrr::pyext::fieldsFrom(h, offsetof(ModuleHooks, rec));
}

// The exception being raised goes to Recorder.internal_error (capture off, reported once), as
// the Python hooks' `except Exception` does; never into the job.
void reportError(ModuleHooks* h) {
#if PY_VERSION_HEX >= 0x030C0000
  PyObject* exc = PyErr_GetRaisedException();
  if (!exc) return;
  if (!PyErr_GivenExceptionMatches(exc, PyExc_Exception)) {  // KeyboardInterrupt, SystemExit: the job's
    PyErr_SetRaisedException(exc);
    return;
  }
#else
  PyObject *type, *exc, *tb;
  PyErr_Fetch(&type, &exc, &tb);
  if (!type) return;
  if (!PyErr_GivenExceptionMatches(type, PyExc_Exception)) {
    PyErr_Restore(type, exc, tb);
    return;
  }
  PyErr_NormalizeException(&type, &exc, &tb);
  if (exc && tb) PyException_SetTraceback(exc, tb);
  Py_XDECREF(type);
  Py_XDECREF(tb);
  if (!exc) return;
#endif
  PyObject* r = PyObject_CallOneArg(h->internalError, exc);
  if (r)
    Py_DECREF(r);
  else
    PyErr_Clear();
  Py_DECREF(exc);
}

// The calling thread's dict of a threading.local (borrowed; null with an exception set). Kept
// with the id of the thread state it belongs to, which CPython never gives another thread (a
// thread's ident it does reuse), and which a fork child's thread keeps along with the dict:
// looking up `__dict__` cost ~190 instructions, four times a module call. The dict of a thread
// that has ended stays alive until another thread calls the hooks.
PyObject* threadDict(PyObject* local, PyObject*& cached, uint64_t& owner) {
  const uint64_t id = PyThreadState_GetID(PyThreadState_Get());
  if (cached && owner == id) return cached;
  PyObject* d = PyObject_GetAttr(local, names.dict);
  if (!d) return nullptr;
  if (!PyDict_Check(d)) {
    Py_DECREF(d);
    PyErr_SetString(PyExc_TypeError, "a threading.local's __dict__ is not a dict");
    return nullptr;
  }
  Py_XSETREF(cached, d);
  owner = id;
  return d;
}

// A thread-local's attribute without raising AttributeError when it is unset (borrowed or null;
// *dictOut the thread's dict, borrowed).
PyObject* localItem(PyObject* local, PyObject*& cached, uint64_t& owner, PyObject* name, PyObject** dictOut) {
  PyObject* d = threadDict(local, cached, owner);
  if (dictOut) *dictOut = d;
  return d ? PyDict_GetItemWithError(d, name) : nullptr;
}

// 1: the hooks do nothing now (capture off, compiling, fetching a batch); 0: go on; -1: error.
int skip(ModuleHooks* h) {
  PyObject* active = PyObject_GetAttr(h->rec, names.active);
  if (!active) return -1;
  int on = PyObject_IsTrue(active);
  Py_DECREF(active);
  if (on <= 0) return on < 0 ? -1 : 1;
  if (h->isCompiling != Py_None) {
    PyObject* c = PyObject_CallNoArgs(h->isCompiling);
    if (!c) return -1;
    int compiling = PyObject_IsTrue(c);
    Py_DECREF(c);
    if (compiling) return compiling < 0 ? -1 : 1;
  }
  PyObject* depth = localItem(h->fetch, h->fetchDict, h->fetchOwner, names.depth, nullptr);
  if (!depth) return PyErr_Occurred() ? -1 : 0;
  int fetching = PyObject_IsTrue(depth);
  return fetching < 0 ? -1 : fetching;
}

PyObject* pre(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  auto* h = reinterpret_cast<ModuleHooks*>(self);
  if (nargs < 1) {
    PyErr_SetString(PyExc_TypeError, "pre(module, args)");
    return nullptr;
  }
  PyObject* module = args[0];
  int s = skip(h);
  if (s == 1) Py_RETURN_NONE;
  if (s == 0) {
    PyObject* d = nullptr;
    PyObject* stack = localItem(h->local, h->localDict, h->localOwner, names.stack, &d);
    bool ok = d != nullptr && (stack || !PyErr_Occurred());
    if (ok && stack) {
      Py_INCREF(stack);  // on_root below may drop the thread's entry (the list stays ours)
    } else if (ok) {
      stack = PyList_New(0);
      ok = stack && PyDict_SetItem(d, names.stack, stack) == 0;
    }
    ok = ok && PyList_Check(stack);
    if (ok && PyList_GET_SIZE(stack) == 0) {
      PyObject* grad = PyObject_CallNoArgs(h->isGradEnabled);
      PyObject* r = grad ? PyObject_CallFunctionObjArgs(h->onRoot, module, grad, nullptr) : nullptr;
      Py_XDECREF(grad);
      ok = r != nullptr;
      Py_XDECREF(r);
    }
    ok = ok && PyList_Append(stack, module) == 0;
    Py_XDECREF(stack);
    if (ok) Py_RETURN_NONE;
  }
  reportError(h);
  if (PyErr_Occurred()) return nullptr;
  Py_RETURN_NONE;
}

// `tensor` read as TensorMarshal.prepare reads it: itself when DenseTensor::read takes it, else,
// for a strided CPU tensor that is not contiguous (MultiheadAttention's batch_first output),
// tensor.detach().contiguous(), handed back in *copy (owned; the bytes live while it does).
// false: not this case (nothing kept, no error set): the Python path decides.
bool readHost(ModuleHooks* h, PyObject* tensor, DenseTensor& t, PyObject** copy) {
  *copy = nullptr;
  if (Py_TYPE(tensor) != reinterpret_cast<PyTypeObject*>(h->tensorType)) return false;
  if (t.read(tensor, h->dtypes, h->strided, &h->getters)) return true;
  PyObject* layout = PyObject_GetAttr(tensor, names.layout);
  PyObject* cpu = layout == h->strided ? PyObject_GetAttr(tensor, names.isCpu) : nullptr;
  const bool host = cpu == Py_True;
  Py_XDECREF(layout);
  Py_XDECREF(cpu);
  PyObject* self = tensor;
  PyObject* detached =
      host ? PyObject_VectorcallMethod(names.detach, &self, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr) : nullptr;
  PyObject* c =
      detached ? PyObject_VectorcallMethod(names.contiguous, &detached, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr)
               : nullptr;
  Py_XDECREF(detached);
  if (c && Py_TYPE(c) == reinterpret_cast<PyTypeObject*>(h->tensorType) && c != tensor &&
      t.read(c, h->dtypes, h->strided, &h->getters)) {
    *copy = c;
    return true;
  }
  Py_XDECREF(c);
  PyErr_Clear();
  return false;
}

// Recorder._on_output's call count of `path`: the index of this call, or -1 with an exception set.
long long nextCall(ModuleHooks* h, PyObject* path) {
  PyObject* count = PyDict_GetItemWithError(h->calls, path);
  long long callIndex = count ? PyLong_AsLongLong(count) : 0;
  PyObject* next = (count || !PyErr_Occurred()) && callIndex >= 0 ? PyLong_FromLongLong(callIndex + 1) : nullptr;
  if (!next || PyDict_SetItem(h->calls, path, next) < 0) {
    Py_XDECREF(next);
    return -1;
  }
  Py_DECREF(next);
  return callIndex;
}

// Session._digest of one host tensor: dlrr_digest, then the failure snapshot at a non-finite
// value. Kept for the failure ring without a copy when it may be (BorrowedRing.h): `obj` is the
// tensor t was read from, `own` when it is the hook's own contiguous copy. 0, or -1 with an
// exception set.
int digestOne(ModuleHooks* h, PyObject* path, long long callIndex, uint32_t output, const DenseTensor& t, PyObject* obj,
              bool own) {
  const char* where = PyBytes_AS_STRING(path);
  dlrr_digest_t out{};
  int borrow = h->borrow && h->keep ? dlrr::pyext::borrowable(path) : 0;
  if (borrow < 0) return -1;
  int64_t lease[3] = {-1, 0, INT64_MIN};  // step, borrowed, floor
  const bool unlocked = t.nbytes() >= kReleaseGilBytes;
  PyThreadState* saved = unlocked ? PyEval_SaveThread() : nullptr;
  if (borrow)
    h->borrow(DLRR_DIGEST_MODULE_OUTPUT, where, static_cast<uint32_t>(callIndex), output, t.dtype(), t.ndim(),
              t.shape(), t.data(), t.nbytes(), &out, lease);
  else
    h->digest(DLRR_DIGEST_MODULE_OUTPUT, where, static_cast<uint32_t>(callIndex), output, t.dtype(), t.ndim(),
              t.shape(), t.data(), t.nbytes(), h->keep, &out);
  if (saved) PyEval_RestoreThread(saved);
  if (borrow) {
    // Held before anything is let go: the ring reads these bytes while the step is >= its floor.
    if (lease[1] && dlrr::pyext::holdBorrowed(obj, own, path, lease[0]) < 0) return -1;
    if (dlrr::pyext::releaseBorrowed(lease[2], lease[0]) < 0) return -1;
  }
  if (out.nan_count || out.inf_count) {
    PyObject* r = PyObject_CallNoArgs(h->failureSnapshot);
    if (!r) return -1;
    Py_DECREF(r);
  }
  return 0;
}

constexpr Py_ssize_t kMaxTupleOutputs = 8;

// The output's digest without Python: 1 done, 0 not this case (nothing done, no error set), -1
// error. Native: one tensor, or a flat tuple of tensors and Nones (Recorder._on_output's walk
// gives the same tensors the same indices), each one readHost takes. Every tensor is read
// before anything is counted or digested, so a tuple that is not this case is left whole to
// the Python path.
int digestDense(ModuleHooks* h, PyObject* path, PyObject* output) {
  if (!h->digest || !PyBytes_Check(path)) return 0;
  const bool tuple = PyTuple_CheckExact(output);
  const Py_ssize_t items = tuple ? PyTuple_GET_SIZE(output) : 1;
  if (items < 1 || items > kMaxTupleOutputs) return 0;
  DenseTensor ts[kMaxTupleOutputs];
  PyObject* objs[kMaxTupleOutputs] = {};  // what each was read from (borrowed)
  PyObject* copies[kMaxTupleOutputs] = {};
  int n = 0;
  bool ok = true;
  for (Py_ssize_t i = 0; i < items && ok; ++i) {
    PyObject* item = tuple ? PyTuple_GET_ITEM(output, i) : output;
    if (item == Py_None && tuple) continue;
    ok = readHost(h, item, ts[n], &copies[n]);
    if (ok) objs[n] = copies[n] ? copies[n] : item;
    if (ok) ++n;
  }
  int rc = ok && n > 0 ? 1 : 0;
  if (rc == 1) {
    long long callIndex = nextCall(h, path);
    if (callIndex < 0) rc = -1;
    for (int i = 0; i < n && rc == 1; ++i)
      if (digestOne(h, path, callIndex, static_cast<uint32_t>(i), ts[i], objs[i], copies[i] != nullptr) < 0) rc = -1;
  }
  for (int i = 0; i < n; ++i) Py_XDECREF(copies[i]);
  return rc;
}

// stack.pop() of a non-empty list, as list.pop does it (the size lowered, the item released
// last, when the list no longer holds it) without PyList_SetSlice's general path.
void popLast(PyObject* list) {
  const Py_ssize_t n = PyList_GET_SIZE(list);
  PyObject* item = PyList_GET_ITEM(list, n - 1);
  Py_SET_SIZE(reinterpret_cast<PyVarObject*>(list), n - 1);
  Py_DECREF(item);
}

// ModuleTracker's post hook body after the checks; 0 or -1 with an exception set.
int postBody(ModuleHooks* h, PyObject* module, PyObject* output) {
  PyObject* stack = localItem(h->local, h->localDict, h->localOwner, names.stack, nullptr);
  if (!stack) return PyErr_Occurred() ? -1 : 0;
  if (!PyList_Check(stack) || PyList_GET_SIZE(stack) == 0) return 0;
  Py_INCREF(stack);
  Py_ssize_t n = PyList_GET_SIZE(stack);
  if (PyList_GET_ITEM(stack, n - 1) == module) {
    popLast(stack);
  } else {  // a forward raised below us (1.x has no always_call): unwind to module
    while (n > 0) {
      bool found = PyList_GET_ITEM(stack, n - 1) == module;
      popLast(stack);
      --n;
      if (found) break;
    }
  }
  int rc = 0;
  if (h->digestOutputs && output != Py_None) {
    PyObject* path = nullptr;  // owned
    PyObject* key = PyLong_FromVoidPtr(module);
    PyObject* entry = key ? PyDict_GetItemWithError(h->paths, key) : nullptr;
    Py_XDECREF(key);
    if (entry && PyTuple_Check(entry) && PyTuple_GET_SIZE(entry) == 2) {
#if PY_VERSION_HEX >= 0x030D0000
      PyObject* target = nullptr;
      if (PyWeakref_GetRef(PyTuple_GET_ITEM(entry, 0), &target) < 0) PyErr_Clear();
      if (target == module) path = Py_NewRef(PyTuple_GET_ITEM(entry, 1));
      Py_XDECREF(target);
#else
      if (PyWeakref_GetObject(PyTuple_GET_ITEM(entry, 0)) == module) path = Py_NewRef(PyTuple_GET_ITEM(entry, 1));
#endif
    }
    if (!path && !PyErr_Occurred()) {
      n = PyList_GET_SIZE(stack);
      PyObject* parent = n ? PyList_GET_ITEM(stack, n - 1) : Py_None;
      PyObject* root = n ? PyList_GET_ITEM(stack, 0) : module;
      Py_INCREF(parent);
      Py_INCREF(root);
      path = PyObject_CallFunctionObjArgs(h->pathOf, module, parent, root, nullptr);
      Py_DECREF(parent);
      Py_DECREF(root);
    }
    if (!path) {
      rc = -1;
    } else {
      int done = digestDense(h, path, output);
      if (done == 0) {
        PyObject* r = PyObject_CallFunctionObjArgs(h->onOutput, path, output, nullptr);
        if (!r) done = -1;
        Py_XDECREF(r);
      }
      rc = done < 0 ? -1 : 0;
      Py_DECREF(path);
    }
  }
  Py_DECREF(stack);
  return rc;
}

PyObject* post(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  auto* h = reinterpret_cast<ModuleHooks*>(self);
  if (nargs < 3) {
    PyErr_SetString(PyExc_TypeError, "post(module, args, output)");
    return nullptr;
  }
  int s = skip(h);
  if (s == 1) Py_RETURN_NONE;
  if (s == 0 && postBody(h, args[0], args[2]) == 0) Py_RETURN_NONE;
  reportError(h);
  if (PyErr_Occurred()) return nullptr;
  Py_RETURN_NONE;
}

int init(PyObject* self, PyObject* args, PyObject* kwargs) {
  auto* h = reinterpret_cast<ModuleHooks*>(self);
  static const char* keywords[] = {"rec",
                                   "local",
                                   "fetch",
                                   "is_compiling",
                                   "is_grad_enabled",
                                   "on_root",
                                   "on_output",
                                   "path_of",
                                   "paths",
                                   "calls",
                                   "tensor_type",
                                   "strided",
                                   "dtypes",
                                   "failure_snapshot",
                                   "internal_error",
                                   "digest_address",
                                   "keep",
                                   "digest_outputs",
                                   "borrow_address",
                                   nullptr};
  PyObject* o[15] = {};
  unsigned long long address = 0, borrowAddress = 0;
  int keep = 0, digestOutputs = 1;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOOOOOOOOOOOKip|K", const_cast<char**>(keywords), &o[0], &o[1],
                                   &o[2], &o[3], &o[4], &o[5], &o[6], &o[7], &o[8], &o[9], &o[10], &o[11], &o[12],
                                   &o[13], &o[14], &address, &keep, &digestOutputs, &borrowAddress))
    return -1;
  if (!PyDict_Check(o[8]) || !PyDict_Check(o[9]) || !PyDict_Check(o[12]) || !PyType_Check(o[10])) {
    PyErr_SetString(PyExc_TypeError, "paths, calls and dtypes must be dicts, tensor_type a type");
    return -1;
  }
  int n = 0;
  PyObject** f = fields(h, n);
  static_assert(std::size(decltype(o){}) == 15);  // the fields from rec to internalError; then the caches
  for (int i = 0; i < n; ++i) Py_XSETREF(f[i], i < 15 ? Py_NewRef(o[i]) : nullptr);
  h->localOwner = h->fetchOwner = 0;
  h->getters = {};
  h->digest = reinterpret_cast<DigestFn>(static_cast<uintptr_t>(address));
  h->borrow = h->digest ? reinterpret_cast<BorrowFn>(static_cast<uintptr_t>(borrowAddress)) : nullptr;
  h->keep = keep;
  h->digestOutputs = digestOutputs;
  return 0;
}

// loss(tensor, call_index, output): one tensor passed to backward(), digested as
// Session._before_backward's Python path does (kind LOSS, path "loss", kept like a module
// output, the failure snapshot at a non-finite value). None when this is not the native case
// (nothing done: not an exact dense contiguous CPU tensor of a seen dtype, or replay); else the
// loss as a float when the tensor holds one float32 or float64 element, True when it holds one
// element of another dtype (the caller reads .item()), False when it holds several.
PyObject* loss(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  auto* h = reinterpret_cast<ModuleHooks*>(self);
  if (nargs != 3) {
    PyErr_SetString(PyExc_TypeError, "loss(tensor, call_index, output)");
    return nullptr;
  }
  const unsigned long long callIndex = PyLong_AsUnsignedLongLong(args[1]);
  const unsigned long long output = PyLong_AsUnsignedLongLong(args[2]);
  if (PyErr_Occurred()) return nullptr;
  if (!h->digest || Py_TYPE(args[0]) != reinterpret_cast<PyTypeObject*>(h->tensorType) || callIndex > UINT32_MAX ||
      output > UINT32_MAX)
    Py_RETURN_NONE;
  DenseTensor t;
  if (!t.read(args[0], h->dtypes, h->strided, &h->getters)) Py_RETURN_NONE;
  dlrr_digest_t out{};
  if (t.nbytes() >= kReleaseGilBytes) {
    Py_BEGIN_ALLOW_THREADS h->digest(DLRR_DIGEST_LOSS, "loss", static_cast<uint32_t>(callIndex),
                                     static_cast<uint32_t>(output), t.dtype(), t.ndim(), t.shape(), t.data(),
                                     t.nbytes(), h->keep, &out);
    Py_END_ALLOW_THREADS
  } else {
    h->digest(DLRR_DIGEST_LOSS, "loss", static_cast<uint32_t>(callIndex), static_cast<uint32_t>(output), t.dtype(),
              t.ndim(), t.shape(), t.data(), t.nbytes(), h->keep, &out);
  }
  if (out.nan_count || out.inf_count) {
    PyObject* r = PyObject_CallNoArgs(h->failureSnapshot);
    if (!r) return nullptr;
    Py_DECREF(r);
  }
  uint64_t numel = 1;
  for (int i = 0; i < t.ndim(); ++i) numel *= static_cast<uint64_t>(t.shape()[i]);
  if (numel != 1) Py_RETURN_FALSE;
  if (t.nbytes() == sizeof(float) && std::strcmp(t.dtype(), "float32") == 0) {
    float v;
    std::memcpy(&v, t.data(), sizeof v);
    return PyFloat_FromDouble(static_cast<double>(v));  // what float(tensor.item()) gives
  }
  if (t.nbytes() == sizeof(double) && std::strcmp(t.dtype(), "float64") == 0) {
    double v;
    std::memcpy(&v, t.data(), sizeof v);
    return PyFloat_FromDouble(v);
  }
  Py_RETURN_TRUE;
}

PyMethodDef methods[] = {{"pre", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(pre)), METH_FASTCALL,
                          "pre(module, args): the global forward pre-hook"},
                         {"loss", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(loss)), METH_FASTCALL,
                          "loss(tensor, call_index, output): a loss passed to backward() digested in C (None: not "
                          "the native case); its value when it has one element"},
                         {"post", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(post)), METH_FASTCALL,
                          "post(module, args, output): the global forward hook"},
                         {nullptr, nullptr, 0, nullptr}};

// borrowed_state(): (tensors held for the failure ring's borrowed entries, the set of module
// paths copied because they changed in place): what the tests check.
PyObject* borrowedState(PyObject*, PyObject*) {
  return Py_BuildValue("(nO)", dlrr::pyext::heldBorrowed(), dlrr::pyext::eagerPaths());
}

PyMethodDef moduleMethods[] = {{"borrowed_state", borrowedState, METH_NOARGS,
                                "(tensors held for the failure ring, module paths copied as changed in place)"},
                               {nullptr, nullptr, 0, nullptr}};

PyModuleDef moduleDef = {
    PyModuleDef_HEAD_INIT,
    "_dlrr_native",
    "dlrr's global module forward hooks, gradient/parameter digests and batch values in C (dlrr_hook)",
    -1,
    moduleMethods,
    nullptr,
    nullptr,
    nullptr,
    nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__dlrr_native(void) {
  if (!intern(names.active, "active") || !intern(names.dict, "__dict__") || !intern(names.stack, "stack") ||
      !intern(names.depth, "depth") || !intern(names.layout, "layout") || !intern(names.isCpu, "is_cpu") ||
      !intern(names.detach, "detach") || !intern(names.contiguous, "contiguous") ||
      dlrr::pyext::initDenseTensorNames() < 0 || dlrr::pyext::initBorrowedRing() < 0)
    return nullptr;
  PyObject* m = PyModule_Create(&moduleDef);
  if (!m) return nullptr;
  if (dlrr::pyext::addType(m, "ModuleHooks",
                           newHeapType<ModuleHooks, fields>("_dlrr_native.ModuleHooks",
                                                            "ModuleHooks(rec, local, fetch, ...): .pre and .post are "
                                                            "the global forward hooks",
                                                            init, methods)) < 0 ||
      dlrr::pyext::addTensorListDigest(m) < 0 || dlrr::pyext::addValueWriter(m) < 0 ||
      dlrr::pyext::addRngStates(m) < 0 || dlrr::pyext::addMemmapRanges(m) < 0 ||
      dlrr::pyext::addModuleTreeVersion(m) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}

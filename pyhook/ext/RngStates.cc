// _dlrr_native.RngStates: RngCapture.write(RngCapture.snapshot()) of a batch delivery in C.
//
// The Python path (dlrr_hook/rng.py) costs ~100 us per delivery in the cnn job: the numpy and
// random states read from memory and serialised with struct, then the dlrr_rng_item_t array
// packed item by item for dlrr_rng_states. Here the same bytes are built on the stack from the
// same memory, at the addresses rng.py's NumpyGlobalRng and PythonGlobalRng found and validated
// at start (configure() hands them over), and the same items go to dlrr_rng_states through its
// address (the preloaded library's symbol or a test double's ctypes callback), in the same
// order: torch CPU, CUDA devices (when CUDA is initialised), numpy, python.
//
// snapshot() takes the same states at one moment into an RngSnapshot whose write() makes that
// same call later, to dlrr_rng_states_queued (the writer thread not woken: the step commits on
// this thread): RngCapture.step_snapshot() and write_step(), an optimizer-counted step's states,
// taken where the previous step ended and written as the next one begins (steps.py).
//
// write() and snapshot() check, at every call, what the Python path checks (numpy's bit generator not
// replaced, sys.modules' random module and its getstate still the validated ones, no module
// newly imported) and return False / None before calling anything when one does not hold, or when
// the states are not the common case (a non-contiguous tensor, more than 8 items): the caller
// then takes the Python path, which handles it as before.
#include "RngStates.h"

#include <bit>
#include <cstdint>
#include <cstring>

#include "GcFields.h"
#include "dlrr/dlrr.h"

namespace dlrr::pyext {
namespace {

using RngStatesFn = void (*)(uint32_t, const dlrr_rng_item_t*);

constexpr int kMaxItems = 8;  // RngCapture._ITEMS: more goes one dlrr_rng_state per generator
constexpr size_t kKeyBytes = 624 * 4;
constexpr size_t kNumpyBytes = kKeyBytes + 4 + 4 + 8;       // rng.py NUMPY_STATE_SIZE
constexpr size_t kPythonBytes = 4 + kKeyBytes + 4 + 4 + 8;  // rng.py PYTHON_STATE_SIZE

struct Names {
  PyObject* getRngState;
  PyObject* isInitialized;
  PyObject* getRngStateAll;
  PyObject* isContiguous;
  PyObject* dataPtr;
  PyObject* numel;
  PyObject* elementSize;
  PyObject* bitGenerator;
  PyObject* getstate;
  PyObject* self;
  PyObject* gaussNext;
  PyObject* version;
  PyObject* numpy;
  PyObject* random;
};
Names names;

// A generator's source: absent (not imported: sys.modules is checked for it), slow (always the
// Python path) or fast (read from memory).
enum class Source { absent, slow, fast };

struct RngStates {
  PyObject_HEAD PyObject* torch;  // owned references, consecutive (fields())
  PyObject* cuda;                 // torch.cuda or None
  PyObject* rand;                 // numpy.random.mtrand._rand
  PyObject* bitgen;               // its _bit_generator as validated
  PyObject* randomModule;         // sys.modules["random"] as validated
  PyObject* inst;                 // random._inst
  RngStatesFn many;
  RngStatesFn queued;  // dlrr_rng_states_queued: an RngSnapshot's write (many where not given)
  Source numpy;
  Source python;
  uintptr_t keyAddress;    // numpy: 624 key words and int pos
  uintptr_t gaussAddress;  // numpy: aug_bitgen_t's {int has_gauss; double gauss}
  uintptr_t stateAddress;  // random: {int index; uint32_t state[624]}
};

PyObject** fields(RngStates* r, int& n) {
  static_assert(offsetof(RngStates, inst) - offsetof(RngStates, torch) == 5 * sizeof(PyObject*));
  n = 6;
  return dlrr::pyext::fieldsFrom(r, offsetof(RngStates, torch));
}

// One reading of every generator: the items of a dlrr_rng_states call and what they point at (the
// torch states' tensors, referenced until released; numpy's and random's bytes, built here).
struct Taken {
  PyObject* refs[kMaxItems];  // first: RngSnapshot's GC fields (fields of a zeroed object: null)
  dlrr_rng_item_t items[kMaxItems];
  int nRefs;
  int n;
  unsigned char numpyBytes[kNumpyBytes];
  unsigned char pythonBytes[kPythonBytes];
};

void release(Taken& t) {
  for (int i = 0; i < t.nRefs; ++i) Py_CLEAR(t.refs[i]);
  t.nRefs = 0;
}

bool callUnsigned(PyObject* o, PyObject* name, unsigned long long& out) {
  PyObject* r = PyObject_CallMethodNoArgs(o, name);
  if (!r) return false;
  out = PyLong_AsUnsignedLongLong(r);
  Py_DECREF(r);
  return !PyErr_Occurred();
}

bool callSigned(PyObject* o, PyObject* name, long long& out) {
  PyObject* r = PyObject_CallMethodNoArgs(o, name);
  if (!r) return false;
  out = PyLong_AsLongLong(r);
  Py_DECREF(r);
  return !PyErr_Occurred();
}

// Takes `tensor` (owned) into t's next item: 1 done, 0 not the common case, -1 error (set).
int addTensor(Taken& t, PyObject* tensor, int kind, int device) {
  if (t.nRefs >= kMaxItems || t.n >= kMaxItems) {
    Py_DECREF(tensor);
    return 0;
  }
  t.refs[t.nRefs++] = tensor;
  if (PyBytes_Check(tensor)) return 0;  // a state given as bytes: RngCapture.write's own case
  PyObject* contiguous = PyObject_CallMethodNoArgs(tensor, names.isContiguous);
  if (!contiguous) return -1;
  int isContiguous = PyObject_IsTrue(contiguous);
  Py_DECREF(contiguous);
  if (isContiguous <= 0) return isContiguous;  // a copy is the Python path's business
  unsigned long long data = 0;
  long long count = 0, size = 0;
  if (!callUnsigned(tensor, names.dataPtr, data) || !callSigned(tensor, names.numel, count) ||
      !callSigned(tensor, names.elementSize, size))
    return -1;
  t.items[t.n++] = dlrr_rng_item_t{reinterpret_cast<const void*>(static_cast<uintptr_t>(data)),
                                   static_cast<uint64_t>(count) * static_cast<uint64_t>(size), kind, device};
  return 1;
}

// sys.modules.get(name) (borrowed), nullptr for None as for no entry (an import blocked);
// false when sys.modules is not a dict (error cleared).
bool moduleNamed(PyObject* name, PyObject*& module) {
  PyObject* modules = PySys_GetObject("modules");  // borrowed; what `sys.modules` names now
  module = nullptr;
  if (!modules || !PyDict_Check(modules)) return false;
  module = PyDict_GetItemWithError(modules, name);
  if (!module && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  if (module == Py_None) module = nullptr;
  return true;
}

// `getattr(o, name) is expected`; an error is cleared (false).
bool attributeIs(PyObject* o, PyObject* name, PyObject* expected) {
  PyObject* value = PyObject_GetAttr(o, name);
  if (!value) {
    PyErr_Clear();
    return false;
  }
  bool same = value == expected;
  Py_DECREF(value);
  return same;
}

// numpy's state in rng.py's layout: 1 built, 0 not imported (no item), -1 the Python path.
int numpyState(RngStates* r, unsigned char* out) {
  if (r->numpy == Source::absent) {
    PyObject* module = nullptr;
    if (!moduleNamed(names.numpy, module)) return -1;
    return module ? -1 : 0;  // imported since: NumpyGlobalRng is made in Python
  }
  if (r->numpy != Source::fast || !attributeIs(r->rand, names.bitGenerator, r->bitgen)) return -1;
  const auto* key = reinterpret_cast<const unsigned char*>(r->keyAddress);
  const auto* gauss = reinterpret_cast<const unsigned char*>(r->gaussAddress);
  int32_t pos = 0, hasGauss = 0;
  std::memcpy(out, key, kKeyBytes);
  std::memcpy(&pos, key + kKeyBytes, 4);
  std::memcpy(&hasGauss, gauss, 4);  // {int has_gauss; double gauss}: the double at 8
  std::memcpy(out + kKeyBytes, &pos, 4);
  std::memcpy(out + kKeyBytes + 4, &hasGauss, 4);
  std::memcpy(out + kKeyBytes + 8, gauss + 8, 8);
  return 1;
}

// random's state in rng.py's layout: 1 built, 0 not imported (no item), -1 the Python path.
int pythonState(RngStates* r, unsigned char* out) {
  PyObject* module = nullptr;
  if (!moduleNamed(names.random, module)) return -1;
  if (!module) return 0;
  if (r->python != Source::fast || module != r->randomModule) return -1;
  PyObject* getstate = PyObject_GetAttr(module, names.getstate);
  bool same = getstate && attributeIs(getstate, names.self, r->inst);
  Py_XDECREF(getstate);
  if (!same) {
    PyErr_Clear();
    return -1;
  }
  PyObject* versionObject = PyObject_GetAttr(r->inst, names.version);
  PyObject* gaussNext = versionObject ? PyObject_GetAttr(r->inst, names.gaussNext) : nullptr;
  long version = versionObject ? PyLong_AsLong(versionObject) : -1;
  int32_t hasGauss = gaussNext && gaussNext != Py_None ? 1 : 0;
  double gauss = hasGauss ? PyFloat_AsDouble(gaussNext) : 0.0;
  Py_XDECREF(versionObject);
  Py_XDECREF(gaussNext);
  if (PyErr_Occurred() || !gaussNext || version < INT32_MIN || version > INT32_MAX) {
    PyErr_Clear();
    return -1;  // struct's errors are the Python path's
  }
  auto v = static_cast<int32_t>(version);
  const auto* state = reinterpret_cast<const unsigned char*>(r->stateAddress);  // int index | words
  std::memcpy(out, &v, 4);
  std::memcpy(out + 4, state + 4, kKeyBytes);
  std::memcpy(out + 4 + kKeyBytes, state, 4);
  std::memcpy(out + 8 + kKeyBytes, &hasGauss, 4);
  std::memcpy(out + 12 + kKeyBytes, &gauss, 8);
  return 1;
}

// Reads every generator's state into t, which must be empty (nRefs and n 0): 1 taken, 0 not the
// common case (the Python path), -1 error (set). t's references are released by its owner.
int take(RngStates* r, Taken& t) {
  if (!r->torch) {
    PyErr_SetString(PyExc_RuntimeError, "RngStates was not initialised");
    return -1;
  }
  PyObject* cpu = PyObject_CallMethodNoArgs(r->torch, names.getRngState);
  if (!cpu) return -1;
  int rc = addTensor(t, cpu, DLRR_RNG_TORCH_CPU, -1);
  if (rc <= 0) return rc;
  if (r->cuda != Py_None) {
    PyObject* initialized = PyObject_CallMethodNoArgs(r->cuda, names.isInitialized);
    int yes = initialized ? PyObject_IsTrue(initialized) : -1;
    Py_XDECREF(initialized);
    if (yes < 0) return -1;
    if (yes) {
      PyObject* all = PyObject_CallMethodNoArgs(r->cuda, names.getRngStateAll);
      PyObject* list = all ? PySequence_Fast(all, "get_rng_state_all() must be a sequence") : nullptr;
      Py_XDECREF(all);
      if (!list) return -1;
      for (Py_ssize_t i = 0; rc > 0 && i < PySequence_Fast_GET_SIZE(list); ++i) {
        if (i > INT32_MAX)
          rc = 0;
        else
          rc = addTensor(t, Py_NewRef(PySequence_Fast_GET_ITEM(list, i)), DLRR_RNG_TORCH_CUDA, static_cast<int>(i));
      }
      Py_DECREF(list);
      if (rc <= 0) return rc;
    }
  }
  int hasNumpy = numpyState(r, t.numpyBytes);
  int hasPython = hasNumpy < 0 ? -1 : pythonState(r, t.pythonBytes);
  if (hasPython < 0 || t.n + hasNumpy + hasPython > kMaxItems) return 0;
  if (hasNumpy) t.items[t.n++] = dlrr_rng_item_t{t.numpyBytes, kNumpyBytes, DLRR_RNG_NUMPY, -1};
  if (hasPython) t.items[t.n++] = dlrr_rng_item_t{t.pythonBytes, kPythonBytes, DLRR_RNG_PYTHON, -1};
  return 1;
}

// write(): True when the states were written, False when nothing was called (the Python path).
PyObject* write(PyObject* self, PyObject* /*unused*/) {
  auto* r = reinterpret_cast<RngStates*>(self);
  Taken t;  // on the stack: only nRefs and n need a value
  t.nRefs = t.n = 0;
  int rc = take(r, t);
  if (rc > 0) r->many(static_cast<uint32_t>(t.n), t.items);  // a test double's callback reports its own errors
  release(t);
  if (rc < 0) return nullptr;
  return Py_NewRef(rc > 0 ? Py_True : Py_False);
}

// _dlrr_native.RngSnapshot: a Taken kept from RngStates.snapshot() to its write() (an
// optimizer-counted step's states, taken where the previous step ended, written as the next
// one begins). Its items point into the object itself (its bytes) and at its tensors' data.
struct RngSnapshot {
  PyObject_HEAD Taken taken;
  RngStatesFn many;
};

PyTypeObject* snapshotType;  // the module holds a reference too

PyObject** snapshotFields(RngSnapshot* s, int& n) {
  n = kMaxItems;
  return dlrr::pyext::fieldsFrom(s, offsetof(RngSnapshot, taken) + offsetof(Taken, refs));
}

// snapshot(): an RngSnapshot of every generator's state now, or None (the Python path: as write()
// returning False).
PyObject* snapshot(PyObject* self, PyObject* /*unused*/) {
  auto* r = reinterpret_cast<RngStates*>(self);
  auto* s = reinterpret_cast<RngSnapshot*>(PyType_GenericAlloc(snapshotType, 0));  // zeroed
  if (!s) return nullptr;
  int rc = take(r, s->taken);
  if (rc <= 0) {
    Py_DECREF(s);  // its references go with it
    return rc < 0 ? nullptr : Py_NewRef(Py_None);
  }
  s->many = r->queued;  // its step commits on this thread: the writer need not be woken
  return reinterpret_cast<PyObject*>(s);
}

// RngSnapshot.write(): the states it holds in one dlrr_rng_states_queued call (dlrr_rng_states
// where RngStates was given no other), the same items as RngStates.write().
PyObject* writeSnapshot(PyObject* self, PyObject* /*unused*/) {
  auto* s = reinterpret_cast<RngSnapshot*>(self);
  if (!s->many) {
    PyErr_SetString(PyExc_RuntimeError, "an RngSnapshot is made by RngStates.snapshot()");
    return nullptr;
  }
  s->many(static_cast<uint32_t>(s->taken.n), s->taken.items);
  Py_RETURN_NONE;
}

int initSnapshot(PyObject* /*self*/, PyObject* /*args*/, PyObject* /*kwargs*/) {
  PyErr_SetString(PyExc_TypeError, "an RngSnapshot is made by RngStates.snapshot()");
  return -1;
}

PyMethodDef snapshotMethods[] = {
    {"write", writeSnapshot, METH_NOARGS, "write(): the states taken, in one dlrr_rng_states call"},
    {nullptr, nullptr, 0, nullptr}};

// A source argument of configure(): None absent, False slow, a tuple of `count` items fast.
bool parseSource(PyObject* arg, Py_ssize_t count, Source& source, PyObject* const*& tuple) {
  tuple = nullptr;
  if (arg == Py_None) {
    source = Source::absent;
  } else if (arg == Py_False) {
    source = Source::slow;
  } else if (PyTuple_Check(arg) && PyTuple_GET_SIZE(arg) == count) {
    source = Source::fast;
    tuple = &PyTuple_GET_ITEM(arg, 0);
  } else {
    PyErr_Format(PyExc_TypeError, "a source is None, False or a tuple of %zd", count);
    return false;
  }
  return true;
}

bool address(PyObject* o, uintptr_t& out) {
  out = static_cast<uintptr_t>(PyLong_AsUnsignedLongLong(o));
  if (PyErr_Occurred()) return false;
  if (!out) PyErr_SetString(PyExc_ValueError, "a null address");
  return out != 0;
}

// configure(numpy, python): numpy (rand, bit_generator, key_address, gauss_address), python
// (module, inst, state_address); None: not imported; False: the Python path.
PyObject* configure(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  auto* r = reinterpret_cast<RngStates*>(self);
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "configure(numpy, python)");
    return nullptr;
  }
  Source numpy = Source::slow, python = Source::slow;
  PyObject* const* np = nullptr;
  PyObject* const* py = nullptr;
  uintptr_t key = 0, gauss = 0, state = 0;
  if (!parseSource(args[0], 4, numpy, np) || !parseSource(args[1], 3, python, py)) return nullptr;
  if ((np && (!address(np[2], key) || !address(np[3], gauss))) || (py && !address(py[2], state))) return nullptr;
  Py_XSETREF(r->rand, np ? Py_NewRef(np[0]) : nullptr);
  Py_XSETREF(r->bitgen, np ? Py_NewRef(np[1]) : nullptr);
  Py_XSETREF(r->randomModule, py ? Py_NewRef(py[0]) : nullptr);
  Py_XSETREF(r->inst, py ? Py_NewRef(py[1]) : nullptr);
  if constexpr (std::endian::native != std::endian::little) {  // rng.py's layouts are little-endian
    numpy = numpy == Source::fast ? Source::slow : numpy;
    python = python == Source::fast ? Source::slow : python;
  }
  r->numpy = numpy;
  r->python = python;
  r->keyAddress = key;
  r->gaussAddress = gauss;
  r->stateAddress = state;
  Py_RETURN_NONE;
}

int init(PyObject* self, PyObject* args, PyObject* kwargs) {
  auto* r = reinterpret_cast<RngStates*>(self);
  static const char* keywords[] = {"rng_states_address", "torch", "cuda", "rng_states_queued_address", nullptr};
  unsigned long long many = 0, queued = 0;
  PyObject* torch = nullptr;
  PyObject* cuda = nullptr;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "KOO|K", const_cast<char**>(keywords), &many, &torch, &cuda, &queued))
    return -1;
  if (!many) {
    PyErr_SetString(PyExc_ValueError, "rng_states_address must be set");
    return -1;
  }
  int n = 0;
  PyObject** f = fields(r, n);
  for (int i = 0; i < n; ++i) Py_CLEAR(f[i]);
  r->torch = Py_NewRef(torch);
  r->cuda = Py_NewRef(cuda);
  r->many = reinterpret_cast<RngStatesFn>(static_cast<uintptr_t>(many));
  r->queued = queued ? reinterpret_cast<RngStatesFn>(static_cast<uintptr_t>(queued)) : r->many;
  r->numpy = r->python = Source::slow;  // until configure()
  return 0;
}

PyMethodDef methods[] = {
    {"write", write, METH_NOARGS,
     "write(): the generators' states in one dlrr_rng_states call (True), or nothing (False: the Python path)"},
    {"snapshot", snapshot, METH_NOARGS,
     "snapshot(): the generators' states now as an RngSnapshot to write() later, or None (the Python path)"},
    {"configure", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(configure)), METH_FASTCALL,
     "configure(numpy, python): where numpy's and random's states are (None: not imported, False: Python path)"},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

int addRngStates(PyObject* module) {
  if (!intern(names.getRngState, "get_rng_state") || !intern(names.isInitialized, "is_initialized") ||
      !intern(names.getRngStateAll, "get_rng_state_all") || !intern(names.isContiguous, "is_contiguous") ||
      !intern(names.dataPtr, "data_ptr") || !intern(names.numel, "numel") ||
      !intern(names.elementSize, "element_size") || !intern(names.bitGenerator, "_bit_generator") ||
      !intern(names.getstate, "getstate") || !intern(names.self, "__self__") ||
      !intern(names.gaussNext, "gauss_next") || !intern(names.version, "VERSION") || !intern(names.numpy, "numpy") ||
      !intern(names.random, "random"))
    return -1;
  PyObject* type = newHeapType<RngSnapshot, snapshotFields>(
      "_dlrr_native.RngSnapshot", "RngStates.snapshot()'s states, written by write()", initSnapshot, snapshotMethods);
  if (!type) return -1;
  snapshotType = reinterpret_cast<PyTypeObject*>(type);
  if (addType(module, "RngSnapshot", Py_NewRef(type)) < 0) return -1;  // snapshotType keeps its own
  return addType(module, "RngStates",
                 newHeapType<RngStates, fields>("_dlrr_native.RngStates",
                                                "RngStates(rng_states_address, torch, cuda, "
                                                "rng_states_queued_address=0): a batch delivery's RNG states",
                                                init, methods));
}

}  // namespace dlrr::pyext

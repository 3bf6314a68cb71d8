// module_tree_version(root, module_type) -> bytes or None.
//
// root.named_parameters() is a function of the `_parameters` and `_modules` dicts of every module
// under root (their keys, values and order) when no module in the tree overrides how they are
// walked. Every change to a dict's contents gives it a new ma_version_tag, drawn from a counter
// that is unique over the process's life (a new dict gets a new tag too, so an address reused
// after a free is told apart). The fingerprint is each such dict's address and tag, in walk
// order: equal fingerprints mean the same named parameters, names and objects alike. Any
// assignment, deletion or replacement of a parameter, submodule or either dict changes it; data
// changes (`p.data = ...`, in-place updates) do not, and need not: the digests read the bytes.
//
// None where it cannot tell: a module type overriding named_parameters, _named_members or
// named_modules, or a metaclass other than `type` (attribute lookups could run its code); a
// `_parameters`/`_modules` that is not a dict; a child that is not a module_type; a tree deeper
// than kMaxDepth or larger than kMaxDicts; a module whose attributes cannot be read; and on
// Python 3.12+, where ma_version_tag is deprecated (torch 2.x has registration hooks there, and
// the caller keeps its names per step otherwise).
#include "ModuleTreeVersion.h"

#include <cstdint>
#include <string>

#include "GcFields.h"

namespace dlrr::pyext {
namespace {

#if PY_VERSION_HEX < 0x030C0000
constexpr bool kHasVersionTags = true;
#else
constexpr bool kHasVersionTags = false;
#endif

constexpr int kMaxDepth = 256;
constexpr size_t kMaxDicts = 1 << 16;

struct Names {
  PyObject* parameters;
  PyObject* modules;
  PyObject* namedModules;
  PyObject* namedParameters;
  PyObject* namedMembers;
};
Names names;

enum class Walked { kOk, kUnknown, kError };

// The walk over one tree: the base class's methods to compare with, and the fingerprint so far.
class TreeWalk {
 public:
  explicit TreeWalk(PyObject* moduleType) : moduleType_(moduleType) {}
  TreeWalk(const TreeWalk&) = delete;
  TreeWalk& operator=(const TreeWalk&) = delete;
  ~TreeWalk() { Py_XDECREF(baseNamedModules_); }

  Walked root(PyObject* module) {
    if (!PyObject_TypeCheck(module, reinterpret_cast<PyTypeObject*>(moduleType_))) return Walked::kUnknown;
    PyObject* base = PyObject_GetAttr(moduleType_, names.namedModules);
    if (!base) return Walked::kError;
    baseNamedModules_ = base;
    Walked w = inherits(module, names.namedParameters);
    if (w == Walked::kOk) w = inherits(module, names.namedMembers);
    return w == Walked::kOk ? visit(module, 0) : w;
  }

  const std::string& fingerprint() const { return out_; }

 private:
  // Whether type(module).<name> is module_type's own.
  Walked inherits(PyObject* module, PyObject* name) {
    PyObject* base = name == names.namedModules ? Py_NewRef(baseNamedModules_) : PyObject_GetAttr(moduleType_, name);
    if (!base) return Walked::kError;
    PyObject* mine = PyObject_GetAttr(reinterpret_cast<PyObject*>(Py_TYPE(module)), name);
    Walked w = !mine ? Walked::kError : (mine == base ? Walked::kOk : Walked::kUnknown);
    Py_XDECREF(mine);
    Py_DECREF(base);
    return w;
  }

  // Appends the dict's address and version tag; kUnknown when `value` is not a dict.
  Walked note(PyObject* value) {
    if (!value || !PyDict_Check(value) || ++dicts_ > kMaxDicts) return Walked::kUnknown;
#if PY_VERSION_HEX < 0x030C0000
    uint64_t pair[2] = {static_cast<uint64_t>(reinterpret_cast<uintptr_t>(value)),
                        reinterpret_cast<PyDictObject*>(value)->ma_version_tag};
    out_.append(reinterpret_cast<const char*>(pair), sizeof(pair));
#endif
    return Walked::kOk;
  }

  Walked visit(PyObject* module, int depth) {
    if (depth > kMaxDepth || !PyObject_TypeCheck(module, reinterpret_cast<PyTypeObject*>(moduleType_)) ||
        Py_TYPE(Py_TYPE(module)) != &PyType_Type)
      return Walked::kUnknown;
    Walked w = inherits(module, names.namedModules);
    if (w != Walked::kOk) return w;
    PyObject* dict = PyObject_GenericGetDict(module, nullptr);
    if (!dict) return Walked::kError;
    // References held for the walk: the dicts and children are the job's, and nothing here runs
    // its code (the metaclass is `type`), but a held reference costs nothing.
    PyObject* params = Py_XNewRef(PyDict_GetItemWithError(dict, names.parameters));
    PyObject* children =
        params || !PyErr_Occurred() ? Py_XNewRef(PyDict_GetItemWithError(dict, names.modules)) : nullptr;
    Py_DECREF(dict);
    if (PyErr_Occurred()) w = Walked::kError;
    if (w == Walked::kOk) w = note(params);
    if (w == Walked::kOk) w = note(children);
    Py_ssize_t pos = 0;
    PyObject *key, *child;
    while (w == Walked::kOk && PyDict_Next(children, &pos, &key, &child)) {
      if (child == Py_None) continue;
      Py_INCREF(child);
      w = visit(child, depth + 1);
      Py_DECREF(child);
    }
    Py_XDECREF(params);
    Py_XDECREF(children);
    return w;
  }

  PyObject* moduleType_;  // borrowed: the caller's argument
  PyObject* baseNamedModules_ = nullptr;
  std::string out_;
  size_t dicts_ = 0;
};

PyObject* moduleTreeVersion(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyType_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "module_tree_version(root, module_type: type)");
    return nullptr;
  }
  if (!kHasVersionTags) Py_RETURN_NONE;
  TreeWalk walk(args[1]);
  switch (walk.root(args[0])) {
    case Walked::kOk:
      return PyBytes_FromStringAndSize(walk.fingerprint().data(), static_cast<Py_ssize_t>(walk.fingerprint().size()));
    case Walked::kUnknown:
      Py_RETURN_NONE;
    case Walked::kError:
      break;
  }
  // A module whose attributes could not be read (no __dict__, a failing lookup) is one more tree
  // it cannot speak for: the names are walked as before. KeyboardInterrupt and the like go on.
  if (!PyErr_ExceptionMatches(PyExc_Exception)) return nullptr;
  PyErr_Clear();
  Py_RETURN_NONE;
}

PyMethodDef functions[] = {
    {"module_tree_version", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(moduleTreeVersion)),
     METH_FASTCALL,
     "module_tree_version(root, module_type): bytes that change whenever root.named_parameters() may, "
     "or None when that cannot be told"},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

int addModuleTreeVersion(PyObject* module) {
  if (!intern(names.parameters, "_parameters") || !intern(names.modules, "_modules") ||
      !intern(names.namedModules, "named_modules") || !intern(names.namedParameters, "named_parameters") ||
      !intern(names.namedMembers, "_named_members"))
    return -1;
  return PyModule_AddFunctions(module, functions);
}

}  // namespace dlrr::pyext

#include "DenseTensor.h"

#include "GcFields.h"

namespace dlrr::pyext {
namespace {

struct Names {
  PyObject* dtype;
  PyObject* layout;
  PyObject* isCpu;
  PyObject* isContiguous;
  PyObject* shape;
  PyObject* dataPtr;
};
Names names;  // interned once at module init, read only after

// The C getters behind a tensor type's dtype, layout, is_cpu and shape: what the generic
// attribute lookup calls for them (getset descriptors are data descriptors: an instance's
// __dict__ cannot shadow them), without its name lookups. Valid while the type's version tag is
// the one recorded (any change to the type or a base, a monkeypatched attribute included, gives
// it a new one); a type whose lookup is not the generic one, or whose attributes are not getset
// descriptors, takes the generic path.
enum Attr { kDtype, kLayout, kIsCpu, kShape, kAttrs };

struct TypeGetters {
  PyTypeObject* type = nullptr;  // owned, so that its address names no other type
  unsigned int version = 0;      // the tag the decision below was made at; 0: none
  bool fast = false;             // false: the generic path
  PyGetSetDef* defs[kAttrs] = {};
};

constexpr int kTypes = 4;  // torch.Tensor, nn.Parameter, and a few more before reusing a slot
TypeGetters cache[kTypes];
int nextSlot = 0;

unsigned int versionOf(PyTypeObject* type) {
  return PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG) ? type->tp_version_tag : 0;
}

bool lookUp(TypeGetters& g) {
  if (g.type->tp_getattro != PyObject_GenericGetAttr) return false;
  PyObject* attrNames[kAttrs] = {names.dtype, names.layout, names.isCpu, names.shape};
  for (int i = 0; i < kAttrs; ++i) {
    PyObject* d = _PyType_Lookup(g.type, attrNames[i]);  // borrowed; what PyObject_GenericGetAttr finds
    if (!d || !Py_IS_TYPE(d, &PyGetSetDescr_Type)) return false;
    auto* descr = reinterpret_cast<PyGetSetDescrObject*>(d);
    if (!descr->d_getset->get || !PyType_IsSubtype(g.type, PyDescr_TYPE(descr))) return false;
    g.defs[i] = descr->d_getset;
  }
  return true;
}

// The getters for `type`, looked up again when its version tag moved; nullptr: the generic path.
const TypeGetters* gettersOf(PyTypeObject* type) {
  TypeGetters* slot = nullptr;
  for (auto& g : cache) {
    if (g.type == type) {
      slot = &g;
      break;
    }
  }
  if (slot && slot->version != 0 && versionOf(type) == slot->version) return slot->fast ? slot : nullptr;
  if (!slot) {
    slot = &cache[nextSlot];
    nextSlot = (nextSlot + 1) % kTypes;
    Py_INCREF(type);
    Py_XSETREF(slot->type, type);
  }
  slot->fast = lookUp(*slot);
  slot->version = versionOf(type);  // _PyType_Lookup assigned one, unless the tags ran out (0)
  return slot->fast && slot->version != 0 ? slot : nullptr;
}

// tensor.<attr> through the recorded getter, or the generic lookup without one.
PyObject* get(const TypeGetters* g, PyObject* tensor, Attr attr, PyObject* name) {
  if (!g) return PyObject_GetAttr(tensor, name);
  return g->defs[attr]->get(tensor, g->defs[attr]->closure);
}

}  // namespace

int initDenseTensorNames() {
  return intern(names.dtype, "dtype") && intern(names.layout, "layout") && intern(names.isCpu, "is_cpu") &&
                 intern(names.isContiguous, "is_contiguous") && intern(names.shape, "shape") &&
                 intern(names.dataPtr, "data_ptr")
             ? 0
             : -1;
}

bool DenseTensor::read(PyObject* tensor, PyObject* dtypes, PyObject* strided) {
  const TypeGetters* g = gettersOf(Py_TYPE(tensor));
  PyObject* dtype = get(g, tensor, kDtype, names.dtype);
  PyObject* info = dtype ? PyDict_GetItemWithError(dtypes, dtype) : nullptr;  // borrowed
  Py_XDECREF(dtype);
  if (!info || !PyTuple_Check(info) || PyTuple_GET_SIZE(info) != 3 || PyTuple_GET_ITEM(info, 2) != Py_False ||
      !PyBytes_Check(PyTuple_GET_ITEM(info, 0))) {
    PyErr_Clear();  // unseen dtype (the Python path caches it) or complex/quantized
    return false;
  }
  Py_XSETREF(dtypeName_, Py_NewRef(PyTuple_GET_ITEM(info, 0)));
  const uint64_t elemSize = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(info, 1));
  if (PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  PyObject* self = tensor;
  PyObject* layout = get(g, tensor, kLayout, names.layout);
  PyObject* cpu = layout == strided ? get(g, tensor, kIsCpu, names.isCpu) : nullptr;
  PyObject* contiguous =
      cpu == Py_True ? PyObject_VectorcallMethod(names.isContiguous, &self, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr)
                     : nullptr;
  PyObject* dims = contiguous == Py_True ? get(g, tensor, kShape, names.shape) : nullptr;
  int ndim = -1;
  if (dims && PyTuple_Check(dims) && PyTuple_GET_SIZE(dims) <= kMaxDims) {
    ndim = static_cast<int>(PyTuple_GET_SIZE(dims));
    for (int i = 0; i < ndim && ndim >= 0; ++i) {
      shape_[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(dims, i));
      if (shape_[i] < 0) ndim = -1;
    }
  }
  PyObject* data = ndim >= 0
                       ? PyObject_VectorcallMethod(names.dataPtr, &self, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr)
                       : nullptr;
  if (data) data_ = PyLong_AsUnsignedLongLong(data);
  Py_XDECREF(layout);
  Py_XDECREF(cpu);
  Py_XDECREF(contiguous);
  Py_XDECREF(dims);
  Py_XDECREF(data);
  if (!data || PyErr_Occurred()) {  // anything unusual: the Python path decides
    PyErr_Clear();
    return false;
  }
  ndim_ = ndim;
  elemSize_ = static_cast<uint32_t>(elemSize);
  uint64_t numel = 1;
  for (int i = 0; i < ndim; ++i) numel *= static_cast<uint64_t>(shape_[i]);
  nbytes_ = numel * elemSize;
  return true;
}

}  // namespace dlrr::pyext

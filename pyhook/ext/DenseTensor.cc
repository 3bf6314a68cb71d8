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

enum Attr { kDtype, kLayout, kIsCpu, kShape };

// Takes `type`'s getters into g; false when one is not a plain getset or the type has no tag.
bool take(TensorGetters& g, PyTypeObject* type) {
  if (type->tp_getattro != PyObject_GenericGetAttr) return false;
  PyObject* const attrs[4] = {names.dtype, names.layout, names.isCpu, names.shape};
  for (int i = 0; i < 4; ++i) {
    // The class attribute lookup also gives the type a version tag when it has none.
    PyObject* d = PyObject_GetAttr(reinterpret_cast<PyObject*>(type), attrs[i]);
    if (!d) {
      PyErr_Clear();
      return false;
    }
    const bool plain = Py_IS_TYPE(d, &PyGetSetDescr_Type) &&
                       reinterpret_cast<PyGetSetDescrObject*>(d)->d_getset->get != nullptr &&
                       PyType_IsSubtype(type, PyDescr_TYPE(d));
    if (plain) {
      g.get[i] = reinterpret_cast<PyGetSetDescrObject*>(d)->d_getset->get;
      g.closure[i] = reinterpret_cast<PyGetSetDescrObject*>(d)->d_getset->closure;
    }
    Py_DECREF(d);  // what is kept is torch's function and closure, not the descriptor
    if (!plain) return false;
  }
  return type->tp_version_tag != 0;
}

// g when its getters are valid for `tensor` now (taken again after the type changed), else null.
TensorGetters* usable(TensorGetters* g, PyObject* tensor) {
  if (!g) return nullptr;
  PyTypeObject* type = Py_TYPE(tensor);
  if (type != g->type || type->tp_version_tag != g->tag) {
    g->type = type;
    g->usable = take(*g, type);
    g->tag = type->tp_version_tag;  // after take(): its lookups assign one
  }
  return g->usable ? g : nullptr;
}

PyObject* attr(TensorGetters* g, PyObject* tensor, Attr a, PyObject* name) {
  return g ? g->get[a](tensor, g->closure[a]) : PyObject_GetAttr(tensor, name);
}

}  // namespace

int initDenseTensorNames() {
  return intern(names.dtype, "dtype") && intern(names.layout, "layout") && intern(names.isCpu, "is_cpu") &&
                 intern(names.isContiguous, "is_contiguous") && intern(names.shape, "shape") &&
                 intern(names.dataPtr, "data_ptr")
             ? 0
             : -1;
}

bool DenseTensor::read(PyObject* tensor, PyObject* dtypes, PyObject* strided, TensorGetters* getters) {
  TensorGetters* g = usable(getters, tensor);
  PyObject* dtype = attr(g, tensor, kDtype, names.dtype);
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
  PyObject* layout = attr(g, tensor, kLayout, names.layout);
  PyObject* cpu = layout == strided ? attr(g, tensor, kIsCpu, names.isCpu) : nullptr;
  PyObject* contiguous =
      cpu == Py_True ? PyObject_VectorcallMethod(names.isContiguous, &self, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr)
                     : nullptr;
  PyObject* dims = contiguous == Py_True ? attr(g, tensor, kShape, names.shape) : nullptr;
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

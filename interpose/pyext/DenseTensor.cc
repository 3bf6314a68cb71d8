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

}  // namespace

int initDenseTensorNames() {
  return intern(names.dtype, "dtype") && intern(names.layout, "layout") && intern(names.isCpu, "is_cpu") &&
                 intern(names.isContiguous, "is_contiguous") && intern(names.shape, "shape") &&
                 intern(names.dataPtr, "data_ptr")
             ? 0
             : -1;
}

bool DenseTensor::read(PyObject* tensor, PyObject* dtypes, PyObject* strided) {
  PyObject* dtype = PyObject_GetAttr(tensor, names.dtype);
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
  PyObject* layout = PyObject_GetAttr(tensor, names.layout);
  PyObject* cpu = layout == strided ? PyObject_GetAttr(tensor, names.isCpu) : nullptr;
  PyObject* contiguous =
      cpu == Py_True ? PyObject_VectorcallMethod(names.isContiguous, &self, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr)
                     : nullptr;
  PyObject* dims = contiguous == Py_True ? PyObject_GetAttr(tensor, names.shape) : nullptr;
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

// What dlrr_digest and dlrr_val_tensor need of a tensor that is one dense contiguous CPU buffer,
// read through cached attribute lookups (no Python frame, no ctypes): its dtype name, element
// size, shape, data pointer and byte size. The module hooks (ModuleHooks.cc), the gradient and
// parameter lists (TensorListDigest.cc) and the batch value writer (ValueWriter.cc) take such
// tensors in C; any other tensor goes to the hook's Python path.
#pragma once

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <cstdint>

namespace dlrr::pyext {

constexpr int kMaxDims = 64;  // dlrr_digest refuses more (CEnums.h kMaxTensorDims)

// torch's C getters of the four attributes DenseTensor::read takes from a tensor (dtype,
// layout, is_cpu, shape), called directly: PyObject_GetAttr's generic lookup cost ~110
// instructions an attribute, four times a module call. Each owner (ModuleHooks) keeps its own,
// taken from one type's getset descriptors and used while that type's version tag is the one
// they were taken at: CPython gives a type a new tag (0 until it is next looked up) whenever it
// or a base class changes, e.g. a property set on torch.Tensor, and then they are taken again,
// or not used (a descriptor of another kind, a type whose attribute lookup is not the generic
// one, a type left without a tag). Zero-initialised: not taken.
struct TensorGetters {
  PyTypeObject* type;  // borrowed (the owner holds the tensor type); null: never taken
  unsigned int tag;    // type's version tag at the last take, usable or not (not retried until it changes)
  bool usable;         // the last take found four plain getters and a tag
  getter get[4];
  void* closure[4];
};

class DenseTensor {
 public:
  DenseTensor() = default;
  DenseTensor(const DenseTensor&) = delete;
  DenseTensor& operator=(const DenseTensor&) = delete;
  ~DenseTensor() { Py_XDECREF(dtypeName_); }

  // Reads `tensor`: true when it is strided, on the CPU, contiguous and of a plain dtype that
  // `dtypes` (TensorMarshal._dtypes: dtype -> (name bytes, element size, special)) already
  // holds; false otherwise, with no exception set (the Python path decides).
  // `getters`: the owner's direct getters (null: attribute lookups).
  bool read(PyObject* tensor, PyObject* dtypes, PyObject* strided, TensorGetters* getters = nullptr);

  const char* dtype() const { return PyBytes_AS_STRING(dtypeName_); }
  // The dtype name (a new reference), for a caller that must keep it past this object.
  PyObject* dtypeRef() const { return Py_NewRef(dtypeName_); }
  const int64_t* shape() const { return shape_; }
  int ndim() const { return ndim_; }
  const void* data() const { return reinterpret_cast<const void*>(data_); }
  uint64_t dataAddress() const { return data_; }
  uint64_t nbytes() const { return nbytes_; }
  uint32_t elemSize() const { return elemSize_; }

 private:
  PyObject* dtypeName_ = nullptr;  // owned: the dtype cache could change under later calls
  int64_t shape_[kMaxDims] = {};
  int ndim_ = 0;
  uint64_t data_ = 0;
  uint64_t nbytes_ = 0;
  uint32_t elemSize_ = 0;
};

// Interns the attribute names read(); 0, or -1 with an exception set. Called at module init.
int initDenseTensorNames();

}  // namespace dlrr::pyext

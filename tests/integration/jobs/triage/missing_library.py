"""Library not found: a shared library the job loads (as CUDA jobs load libcudart) is missing."""
import ctypes

ctypes.CDLL("libdlrr_no_such_library.so.12")

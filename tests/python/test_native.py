"""The ctypes binding mirrors dlrr.h, and is inert without the library."""

import ctypes
import os
import re
import unittest

from fake_native import REPO  # first: puts the hook on sys.path
from dlrr_hook import native

HEADER = os.path.join(REPO, "interpose", "include", "dlrr", "dlrr.h")

_C_TYPES = {
    "int": ctypes.c_int, "void": None, "int64_t": ctypes.c_int64, "uint32_t": ctypes.c_uint32,
    "uint64_t": ctypes.c_uint64, "double": ctypes.c_double, "const char*": ctypes.c_char_p,
    "const void*": ctypes.c_void_p, "void*": ctypes.c_void_p, "const char**": ctypes.POINTER(ctypes.c_char_p),
    "const int64_t*": ctypes.POINTER(ctypes.c_int64),
    "int64_t*": ctypes.POINTER(ctypes.c_int64), "const int32_t*": ctypes.POINTER(ctypes.c_int32),
    "const char* const*": ctypes.POINTER(ctypes.c_char_p),
    "dlrr_digest_t*": ctypes.POINTER(native.DigestT),
    "const dlrr_digest_t*": ctypes.POINTER(native.DigestT),
    "const dlrr_digest_item_t*": ctypes.POINTER(native.DigestItemT),
    "const dlrr_rng_item_t*": ctypes.POINTER(native.RngItemT),
    "dlrr_target_t*": ctypes.POINTER(native.TargetT),
    "const dlrr_recorded_digest_t**": ctypes.POINTER(ctypes.POINTER(native.RecordedDigestT)),
    "const uint8_t**": ctypes.POINTER(ctypes.c_void_p), "uint64_t*": ctypes.POINTER(ctypes.c_uint64),
    "char*": ctypes.c_char_p,  # an output buffer (create_string_buffer)
    "int*": ctypes.POINTER(ctypes.c_int), "const int64_t**": ctypes.POINTER(ctypes.POINTER(ctypes.c_int64)),
}


def header_text():
    with open(HEADER) as f:
        return f.read()


def header_prototypes():
    text = header_text()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    protos = {}
    for ret, name, args in re.findall(r"DLRR_API\s+([\w\s\*]+?)\s*(dlrr_\w+)\s*\(([^)]*)\)\s*;", text):
        params = []
        for arg in [a.strip() for a in args.split(",")]:
            if arg in ("void", ""):
                continue
            ctype = re.sub(r"\s*\b\w+$", "", arg)  # drop the parameter name
            params.append(re.sub(r"\s+\*", "*", ctype))
        protos[name] = (ret.strip(), params)
    return protos


class BindingTest(unittest.TestCase):
    def test_every_function_of_the_header_is_bound_with_its_prototype(self):
        protos = header_prototypes()
        self.assertEqual(sorted(protos), sorted(native.SIGNATURES))
        for name, (ret, params) in protos.items():
            restype, argtypes = native.SIGNATURES[name]
            self.assertEqual(restype, _C_TYPES[ret], name)
            self.assertEqual(argtypes, [_C_TYPES[p] for p in params], name)

    def test_address_of_a_c_function_only(self):
        """What the _dlrr_native extension is handed: a C function's address, or None for a
        Python stand-in (a benchmark's timer around a C API function)."""
        import fake_native
        lib = fake_native.FakeLib()
        address = native.address_of(lib.dlrr_digest_many)
        self.assertIsInstance(address, int)
        self.assertEqual(address, ctypes.cast(lib.dlrr_digest_many, ctypes.c_void_p).value)
        self.assertIsNone(native.address_of(lambda *args: 0))
        self.assertIsNone(native.address_of(None))

    def test_digest_struct_layout(self):
        self.assertEqual(ctypes.sizeof(native.DigestT), 40)
        self.assertEqual(ctypes.sizeof(native.DigestItemT), 56)
        self.assertEqual(ctypes.sizeof(native.RngItemT), 24)
        self.assertEqual(ctypes.sizeof(native.RecordedDigestT), 64)
        self.assertEqual(native.RecordedDigestT.digest.offset, 24)

    def test_constants_match_header(self):
        for cname, value in re.findall(r"DLRR_(\w+) = (\d+)", header_text()):
            self.assertEqual(getattr(native, cname), int(value), cname)

    def test_no_library_means_off(self):
        self.assertIsNone(native.load({"DLRR_LIBRARY": "/nonexistent/libdlrr.so"}))
        self.assertIsNone(native.load({}))

    def test_library_not_preloaded_is_not_loaded(self):
        built = os.path.join(REPO, "build", "lib", "dlrr", "libdlrr.so")
        if not os.path.exists(built):
            self.skipTest("libdlrr.so not built")
        self.assertIsNone(native.load({"DLRR_LIBRARY": built}))  # RTLD_NOLOAD: never a 2nd copy
        with self.assertRaises(OSError):
            ctypes.CDLL(built, mode=os.RTLD_NOLOAD | os.RTLD_NOW)

    def test_a_library_from_another_build_is_said_not_silently_off(self):
        # libdlrr preloaded but lacking a function the hook binds: the job runs unrecorded, and
        # the library's status (dlrecord prints it, dltrace info keeps it) says why.
        from unittest import mock

        class OlderLibrary:
            def __init__(self):
                self.dlrr_mode = mock.Mock(return_value=1)
                self.dlrr_recorder_status = mock.Mock()

        old = OlderLibrary()
        with mock.patch.object(native.ctypes, "CDLL", return_value=old):
            self.assertIsNone(native.load({"DLRR_LIBRARY": "/lib/libdlrr.so"}))  # two candidates, one library
        old.dlrr_recorder_status.assert_called_once()
        ok, message = old.dlrr_recorder_status.call_args[0]
        self.assertEqual(ok, 0)
        self.assertIn(b"the Python hook does not match libdlrr", message)
        self.assertIn(b"this process is not recorded", message)

        class NoDlrr:  # any other process: no libdlrr, nothing to say and nobody to say it to
            pass
        with mock.patch.object(native.ctypes, "CDLL", return_value=NoDlrr()):
            self.assertIsNone(native.load({}))


if __name__ == "__main__":
    unittest.main()

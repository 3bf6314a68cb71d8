"""Facts about the process that change numerical results (dlrr_runtime_info).

Collected when the first batch or step arrives, not at import: jobs set thread counts and
cudnn/determinism flags after `import torch`.  CUDA is only asked about when the job has
initialised it itself; querying it earlier would initialise the driver (and our CUPTI
injection) at a moment the job did not choose.
"""

import os
import re
import sys

ENV_KEYS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONHASHSEED",
            "CUBLAS_WORKSPACE_CONFIG")
UNSET = "<unset>"

_BLAS_RE = re.compile(r"/lib(openblas|blas|cblas|mkl|blis|flexiblas|lapack)[^/]*\.so[^/]*$")


def loaded_blas_libraries(maps_path="/proc/self/maps"):
    """Paths of BLAS/LAPACK libraries mapped into this process, in map order."""
    found = []
    try:
        with open(maps_path, "r", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                fields = line.split(None, 5)
                if len(fields) < 6:
                    continue
                path = fields[5].strip()
                if _BLAS_RE.search(path) and path not in found:
                    found.append(path)
    except OSError:
        pass
    return found


def _call(fn, *args):
    try:
        return fn(*args)
    except Exception as exc:  # a query that fails is recorded as such
        return "<error: %s>" % (exc,)


def _optional(obj, name):
    """obj.name, or None when obj is None or has no such attribute (whatever it raises)."""
    if obj is None:
        return None
    try:
        return getattr(obj, name)
    except Exception:
        return None


def _flag(value):
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def collect(torch, environ=None):
    """[(key, value)] of strings."""
    environ = os.environ if environ is None else environ
    items = [("python", sys.version.split()[0]),
             ("python.implementation", sys.implementation.name),
             ("torch", str(getattr(torch, "__version__", "?")))]
    items.append(("torch.num_threads", _flag(_call(torch.get_num_threads))))
    items.append(("torch.num_interop_threads", _flag(_call(torch.get_num_interop_threads))))
    np = sys.modules.get("numpy")
    items.append(("numpy", str(getattr(np, "__version__", UNSET)) if np is not None else UNSET))
    items.append(("blas", ":".join(loaded_blas_libraries()) or UNSET))
    for key in ENV_KEYS:
        items.append(("env." + key, environ.get(key, UNSET)))

    if hasattr(torch, "are_deterministic_algorithms_enabled"):
        items.append(("torch.deterministic_algorithms",
                      _flag(_call(torch.are_deterministic_algorithms_enabled))))
    if hasattr(torch, "is_deterministic_algorithms_warn_only_enabled"):
        items.append(("torch.deterministic_algorithms.warn_only",
                      _flag(_call(torch.is_deterministic_algorithms_warn_only_enabled))))
    if hasattr(torch, "get_float32_matmul_precision"):
        items.append(("torch.float32_matmul_precision", _flag(_call(torch.get_float32_matmul_precision))))
    backends = getattr(torch, "backends", None)
    cudnn = getattr(backends, "cudnn", None)
    for flag in ("enabled", "benchmark", "deterministic", "allow_tf32"):
        if cudnn is not None and hasattr(cudnn, flag):
            items.append(("cudnn." + flag, _flag(getattr(cudnn, flag))))
    matmul = getattr(getattr(backends, "cuda", None), "matmul", None)
    if matmul is not None and hasattr(matmul, "allow_tf32"):
        items.append(("cuda.matmul.allow_tf32", _flag(_call(lambda: matmul.allow_tf32))))
    # Flags newer torch versions have; torch.backends.cuda.matmul raises AssertionError (not
    # AttributeError) for names it does not know, so hasattr() cannot be trusted there.
    for flag in ("allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction"):
        value = _optional(matmul, flag)
        if value is not None:
            items.append(("cuda.matmul." + flag, _flag(value)))
    value = _optional(_optional(getattr(torch, "utils", None), "deterministic"), "fill_uninitialized_memory")
    if value is not None:
        items.append(("torch.deterministic.fill_uninitialized_memory", _flag(value)))

    items.extend(cuda_info(torch))
    return items


def cuda_info(torch):
    cuda = getattr(torch, "cuda", None)
    version = getattr(getattr(torch, "version", None), "cuda", None)
    items = [("cuda.compiled", str(version) if version else UNSET)]
    if cuda is None or not cuda.is_initialized():
        items.append(("cuda.initialized", "0"))
        return items
    items.append(("cuda.initialized", "1"))
    items.append(("cuda.available", _flag(_call(cuda.is_available))))
    count = _call(cuda.device_count)
    items.append(("cuda.device_count", _flag(count)))
    if isinstance(count, int):
        for i in range(count):
            props = _call(cuda.get_device_properties, i)
            if isinstance(props, str):
                items.append(("cuda.device.%d" % i, props))
                continue
            items.append(("cuda.device.%d" % i, str(props.name)))
            items.append(("cuda.device.%d.capability" % i, "%d.%d" % (props.major, props.minor)))
            items.append(("cuda.device.%d.sm_count" % i, str(props.multi_processor_count)))
            items.append(("cuda.device.%d.memory" % i, str(props.total_memory)))
    cudnn = getattr(getattr(torch, "backends", None), "cudnn", None)
    if cudnn is not None:
        items.append(("cudnn.version", _flag(_call(cudnn.version))))
    return items

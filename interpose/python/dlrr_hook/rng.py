"""RNG states at step boundaries, as plain bytes (never pickle).

Layouts, all little-endian, fixed size, so that replay (and any other language) can parse
them without Python:

  torch CPU / CUDA  the bytes of torch.get_rng_state() / torch.cuda.get_rng_state_all()[i]
                    (torch's own format; torch.set_rng_state takes them back)
  numpy (2512 B)    624 x uint32 MT19937 key | int32 pos | int32 has_gauss | float64 gauss
  python (2516 B)   int32 version | 625 x uint32 internal state (624 words + index)
                    | int32 has_gauss_next | float64 gauss_next (0.0 when None)

numpy and random are captured only when the job has imported them: the hook never imports
a module on the job's behalf.
"""

import ctypes
import struct
import sys

from . import native

_NUMPY_TAIL = struct.Struct("<iid")
_NUMPY_KEY_WORDS = 624
NUMPY_STATE_SIZE = _NUMPY_KEY_WORDS * 4 + _NUMPY_TAIL.size

_PYTHON = struct.Struct("<i625Iid")
PYTHON_STATE_SIZE = _PYTHON.size


def numpy_state_to_bytes(state):
    """Serialises np.random.get_state()'s legacy tuple ('MT19937', keys, pos, has_gauss, g)."""
    import numpy as np  # only called when the job imported numpy
    name, keys, pos, has_gauss, cached = state[:5]
    if name != "MT19937":
        raise ValueError("unsupported numpy bit generator %r" % (name,))
    keys = np.asarray(keys, dtype="<u4")
    if keys.shape != (_NUMPY_KEY_WORDS,):
        raise ValueError("numpy MT19937 key has shape %r" % (keys.shape,))
    return keys.tobytes() + _NUMPY_TAIL.pack(int(pos), int(has_gauss), float(cached))


def numpy_state_from_bytes(data):
    """The inverse of numpy_state_to_bytes: a tuple for np.random.set_state()."""
    import numpy as np
    if len(data) != NUMPY_STATE_SIZE:
        raise ValueError("numpy RNG state must be %d bytes, got %d" % (NUMPY_STATE_SIZE, len(data)))
    split = _NUMPY_KEY_WORDS * 4
    keys = np.frombuffer(data[:split], dtype="<u4").astype(np.uint32)
    pos, has_gauss, cached = _NUMPY_TAIL.unpack(data[split:])
    return ("MT19937", keys, pos, has_gauss, cached)


def python_state_to_bytes(state):
    """Serialises random.getstate(): (version, 625-int tuple, gauss_next)."""
    version, internal, gauss_next = state
    if len(internal) != 625:
        raise ValueError("random state has %d words, expected 625" % len(internal))
    has_gauss = gauss_next is not None
    return _PYTHON.pack(version, *internal, int(has_gauss), gauss_next if has_gauss else 0.0)


def python_state_from_bytes(data):
    """The inverse of python_state_to_bytes: a tuple for random.setstate()."""
    if len(data) != PYTHON_STATE_SIZE:
        raise ValueError("python RNG state must be %d bytes, got %d" % (PYTHON_STATE_SIZE, len(data)))
    fields = _PYTHON.unpack(data)
    version, internal, has_gauss, gauss = fields[0], fields[1:626], fields[626], fields[627]
    return (version, tuple(internal), gauss if has_gauss else None)


class NumpyGlobalRng:
    """Bytes of numpy's global RandomState, cheap when it has not moved since the last call.

    np.random.get_state() costs ~50 us (numpy copies the MT19937 key word by word).  When
    the main process does not draw from numpy between two snapshots - the common case, since
    augmentation runs in DataLoader workers - the previous bytes are reused: the generator's
    raw MT19937 state (624-word key + position, read through the public
    BitGenerator.ctypes.state_address) is compared with the one seen last time.  A legacy
    gaussian served from the cache (has_gauss=1) moves nothing in the bit generator, so
    while has_gauss is set get_state() runs every time.  The layout is checked once against
    get_state(); anything unexpected turns the shortcut off (always get_state()).
    """

    _RAW_SIZE = _NUMPY_KEY_WORDS * 4 + 4

    def __init__(self, np):
        self._np = np
        self._rand = self._bitgen = self._address = None
        self._raw = self._bytes = None
        try:
            rand = np.random.mtrand._rand
            bitgen = rand._bit_generator
            address = bitgen.ctypes.state_address
            raw = ctypes.string_at(address, self._RAW_SIZE)
            state = np.random.get_state()
            if (state[0] == "MT19937"
                    and raw[:-4] == np.asarray(state[1], dtype="<u4").tobytes()
                    and int.from_bytes(raw[-4:], sys.byteorder, signed=True) == state[2]):
                self._rand, self._bitgen, self._address = rand, bitgen, address
        except Exception:  # no shortcut: get_state() every time
            pass

    def snapshot(self):
        """The serialised state (numpy_state_to_bytes layout), or None for other generators."""
        raw = None
        if self._address is not None and self._rand._bit_generator is self._bitgen:
            raw = ctypes.string_at(self._address, self._RAW_SIZE)
            if raw == self._raw:
                return self._bytes
        state = self._np.random.get_state()
        if not (isinstance(state, tuple) and state and state[0] == "MT19937"):
            return None
        data = numpy_state_to_bytes(state)
        self._raw = raw if not state[3] else None
        self._bytes = data
        return data


class RngCapture:
    """Takes and writes snapshots of every generator the job can draw from."""

    def __init__(self, lib, torch):
        self._write = lib.dlrr_rng_state
        self._torch = torch
        self._cuda = getattr(torch, "cuda", None)
        self._numpy = None

    def snapshot(self):
        """[(kind, device, payload)]; payload is bytes or a CPU uint8 tensor."""
        torch = self._torch
        states = [(native.RNG_TORCH_CPU, native.NO_DEVICE, torch.get_rng_state())]
        cuda = self._cuda
        if cuda is not None and cuda.is_initialized():
            for device, state in enumerate(cuda.get_rng_state_all()):
                states.append((native.RNG_TORCH_CUDA, device, state))
        numpy_rng = self._numpy
        if numpy_rng is None:
            np = sys.modules.get("numpy")
            if np is not None and hasattr(np, "random"):
                numpy_rng = self._numpy = NumpyGlobalRng(np)
        if numpy_rng is not None:
            data = numpy_rng.snapshot()
            if data is not None:
                states.append((native.RNG_NUMPY, native.NO_DEVICE, data))
        rnd = sys.modules.get("random")
        if rnd is not None and hasattr(rnd, "getstate"):
            states.append((native.RNG_PYTHON, native.NO_DEVICE, python_state_to_bytes(rnd.getstate())))
        return states

    def write(self, states):
        write = self._write
        for kind, device, payload in states:
            if isinstance(payload, bytes):
                write(kind, device, payload, len(payload))
            else:
                payload = payload.contiguous()
                write(kind, device, payload.data_ptr(), payload.numel() * payload.element_size())

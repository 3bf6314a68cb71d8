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
from .digest_batch import BYTES_DATA_OFFSET
from .modules import native_extension

_ITEM = struct.Struct("@PQii")  # data, n, kind, device: struct dlrr_rng_item

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


def _pointer_at(address):
    return ctypes.c_void_p.from_address(address).value


class NumpyGlobalRng:
    """Bytes of numpy's global RandomState, read from its memory instead of get_state().

    np.random.get_state() costs ~60 us (numpy copies the MT19937 key word by word), at every
    batch of every step.  The same bytes are in memory: the MT19937 key and position at the
    bit generator's public ctypes.state_address, and the legacy gaussian cache (has_gauss,
    gauss) in the RandomState object, in its aug_bitgen_t {bitgen_t *bit_generator; int
    has_gauss; double gauss}.  That struct is found, not assumed: the object's bitgen_t is
    the word pointing at state_address, and aug_bitgen_t the word pointing at that bitgen_t;
    and the bytes so read must equal numpy_state_to_bytes(get_state()) once at start.
    Anything unexpected (another numpy layout, another bit generator) turns the shortcut off
    for good: get_state() every time, as before.  When nothing moved since the last call the
    previous bytes object is returned as it is.
    """

    _RAW_SIZE = _NUMPY_KEY_WORDS * 4 + 4
    _GAUSS = struct.Struct("@id")  # int has_gauss, padding, double gauss: the C layout

    def __init__(self, np):
        self._np = np
        self._rand = self._bitgen = self._address = self._gauss_address = None
        self._raw = self._bytes = None
        try:
            rand = np.random.mtrand._rand
            bitgen = rand._bit_generator
            address = bitgen.ctypes.state_address
            base, size = id(rand), type(rand).__basicsize__
            words = range(object.__basicsize__, size - 8, 8)
            bitgen_t = next(base + o for o in words if _pointer_at(base + o) == address)
            aug = next(base + o for o in words if _pointer_at(base + o) == bitgen_t)
            if aug + 8 + self._GAUSS.size > base + size:
                return
            self._rand, self._bitgen, self._address, self._gauss_address = rand, bitgen, address, aug + 8
            if self._read() != numpy_state_to_bytes(np.random.get_state()):
                self._address = None
        except Exception:  # no shortcut: get_state() every time
            self._address = None

    _KEY_SIZE = _NUMPY_KEY_WORDS * 4
    _POS = struct.Struct("@i")

    def _raw_now(self):
        """The key words, position and gaussian cache as they are in memory."""
        return ctypes.string_at(self._address, self._RAW_SIZE) + ctypes.string_at(
            self._gauss_address, self._GAUSS.size)

    def _from_raw(self, raw):
        pos, = self._POS.unpack_from(raw, self._KEY_SIZE)
        has_gauss, gauss = self._GAUSS.unpack_from(raw, self._RAW_SIZE)
        return raw[:self._KEY_SIZE] + _NUMPY_TAIL.pack(pos, has_gauss, gauss)

    def _read(self):
        return self._from_raw(self._raw_now())

    def native_source(self):
        """What RngStates.configure needs to read this state in C: (generator, bit generator,
        state address, gaussian cache address), or False (the layout was not validated)."""
        if self._address is None:
            return False
        return (self._rand, self._bitgen, self._address, self._gauss_address)

    def snapshot(self):
        """The serialised state (numpy_state_to_bytes layout), or None for other generators."""
        if self._address is not None and self._rand._bit_generator is self._bitgen:
            raw = self._raw_now()
            if raw != self._raw:
                self._raw = raw
                self._bytes = self._from_raw(raw)
            return self._bytes
        state = self._np.random.get_state()
        if not (isinstance(state, tuple) and state and state[0] == "MT19937"):
            return None
        return numpy_state_to_bytes(state)


class PythonGlobalRng:
    """Bytes of the random module's global generator, read from its memory.

    random.getstate() builds a tuple of 625 ints (~12 us) and packing it costs as much
    again.  CPython's _random.Random object holds them as {PyObject_HEAD; int index;
    uint32_t state[624]}, and gauss_next is a plain attribute: the bytes are read from there
    when doing so gives exactly python_state_to_bytes(random.getstate()) at start; otherwise
    (another interpreter, a replaced generator) getstate() every time.
    """

    _RAW_SIZE = 4 + 624 * 4
    _VERSION = struct.Struct("<i")
    _TAIL = struct.Struct("<id")

    def __init__(self, rnd):
        self._rnd = rnd
        self._inst = getattr(rnd, "_inst", None)
        self._address = None
        self._key = self._bytes = None
        try:
            inst = self._inst
            if inst is not None and getattr(rnd.getstate, "__self__", None) is inst:
                self._address = id(inst) + object.__basicsize__
                if self._read(ctypes.string_at(self._address, self._RAW_SIZE),
                              inst.gauss_next) != python_state_to_bytes(rnd.getstate()):
                    self._address = None
        except Exception:
            self._address = None

    def _read(self, raw, gauss_next):
        has_gauss = gauss_next is not None
        if sys.byteorder != "little":
            raise ValueError("little-endian layout expected")
        # raw: int index | 624 x uint32; serialised: version | 624 words | index | gauss.
        return (self._VERSION.pack(self._inst.VERSION) + raw[4:] + raw[:4]
                + self._TAIL.pack(int(has_gauss), gauss_next if has_gauss else 0.0))

    def native_source(self):
        """What RngStates.configure needs to read this state in C: (module, Random instance,
        state address), or False (the layout was not validated)."""
        if self._address is None:
            return False
        return (self._rnd, self._inst, self._address)

    def serves(self, rnd):
        """Whether this reads the `random` module `rnd`."""
        return self._rnd is rnd

    def snapshot(self):
        rnd = self._rnd
        inst = self._inst
        if self._address is not None and getattr(rnd.getstate, "__self__", None) is inst:
            key = (ctypes.string_at(self._address, self._RAW_SIZE), inst.gauss_next)
            if self._key is None or key[0] != self._key[0] or key[1] is not self._key[1]:
                self._key = key
                self._bytes = self._read(*key)
            return self._bytes
        return python_state_to_bytes(rnd.getstate())


def _bytes_layout_holds():
    """A bytes object's buffer is at id(b) + BYTES_DATA_OFFSET (CPython), as ctypes sees it."""
    probe = b"dlrr-rng-probe"
    try:
        return (_ITEM.size == ctypes.sizeof(native.RngItemT)
                and ctypes.string_at(id(probe) + BYTES_DATA_OFFSET, len(probe)) == probe)
    except Exception:
        return False


class RngCapture:
    """Takes and writes snapshots of every generator the job can draw from.

    A step's states are written in one dlrr_rng_states crossing: each is packed as a
    dlrr_rng_item_t (a bytes payload by its buffer's address, a tensor by data_ptr) into a
    ctypes array made per call (0.1 us; a shared one would race between threads delivering
    batches); `states` keeps every payload alive until the call returns.  Where the bytes
    layout does not hold, one dlrr_rng_state per generator, as before.
    """

    _ITEMS = native.RngItemT * 8

    _packed = _bytes_layout_holds()

    def __init__(self, lib, torch, native_ext=False):
        """native_ext: the `_dlrr_native` extension for write_snapshot, False to look for it,
        None for none (the Python path only)."""
        self._lib = lib
        self._write = lib.dlrr_rng_state
        self._write_many = getattr(lib, "dlrr_rng_states", None)
        # A step's states written with its commit on this thread: the writer thread not woken.
        self._write_queued = getattr(lib, "dlrr_rng_states_queued", None) or self._write_many
        self._torch = torch
        self._cuda = getattr(torch, "cuda", None)
        self._numpy = None
        self._python = None
        self._native = self._native_states(native_extension() if native_ext is False else native_ext)

    def _native_states(self, ext):
        """A _dlrr_native.RngStates (pyhook/ext/RngStates.cc) calling dlrr_rng_states through
        its address, or None: where write() would not make one dlrr_rng_states call of packed
        items, or without the extension."""
        make = getattr(ext, "RngStates", None)
        if make is None or not self._packed or self._write_many is None:
            return None
        address = native.address_of(self._write_many)
        if address is None:
            return None
        try:
            queued = native.address_of(self._write_queued) or address
            states = make(rng_states_address=address, torch=self._torch, cuda=self._cuda,
                          rng_states_queued_address=queued)
            self._configure_native(states)
            return states
        except Exception:  # an extension of another build
            return None

    def _configure_native(self, states):
        """Hands RngStates what numpy_bytes and python_bytes use now: the validated addresses, or
        None (not imported yet) or False (their own path: get_state(), getstate())."""
        np_rng, py_rng = self._numpy, self._python
        states.configure(None if np_rng is None else np_rng.native_source(),
                         None if py_rng is None else py_rng.native_source())

    def write_snapshot(self):
        """write(snapshot()), the two back to back (a batch delivery): in C when RngStates can
        (the same dlrr_rng_states call, the same bytes), else as written."""
        states = self._native
        if states is not None and states.write():
            return
        self.write(self.snapshot())
        if states is not None:  # numpy or random seen (again): RngStates reads them from now on
            self._configure_native(states)

    def step_snapshot(self):
        """An optimizer-counted step's states, taken now for write_step() at its begin (steps.py):
        a _dlrr_native.RngSnapshot when RngStates can take them (the same states, read now, and
        the same dlrr_rng_states call later), else snapshot()."""
        states = self._native
        if states is not None:
            taken = states.snapshot()
            if taken is not None:
                return taken
        taken = self.snapshot()
        if states is not None:  # numpy or random seen (again): RngStates reads them from now on
            self._configure_native(states)
        return taken

    def write_step(self, taken):
        """Writes what step_snapshot() took, with dlrr_rng_states_queued: the step commits on this
        thread (dlrr_step_end), which writes them; waking the writer for them cost a futex call."""
        if type(taken) is list:
            self.write(taken, queued=True)
        else:
            taken.write()

    def snapshot(self):
        """[(kind, device, payload)]; payload is bytes or a CPU uint8 tensor."""
        torch = self._torch
        states = [(native.RNG_TORCH_CPU, native.NO_DEVICE, torch.get_rng_state())]
        cuda = self._cuda
        if cuda is not None and cuda.is_initialized():
            for device, state in enumerate(cuda.get_rng_state_all()):
                states.append((native.RNG_TORCH_CUDA, device, state))
        data = self.numpy_bytes()
        if data is not None:
            states.append((native.RNG_NUMPY, native.NO_DEVICE, data))
        data = self.python_bytes()
        if data is not None:
            states.append((native.RNG_PYTHON, native.NO_DEVICE, data))
        return states

    def numpy_bytes(self):
        """numpy's global generator state, serialised; None when numpy is not imported."""
        numpy_rng = self._numpy
        if numpy_rng is None:
            np = sys.modules.get("numpy")
            if np is None or not hasattr(np, "random"):
                return None
            numpy_rng = self._numpy = NumpyGlobalRng(np)
        return numpy_rng.snapshot()

    def python_bytes(self):
        """random's global generator state, serialised; None when random is not imported."""
        rnd = sys.modules.get("random")
        if rnd is None or not hasattr(rnd, "getstate"):
            return None
        python_rng = self._python
        if python_rng is None or not python_rng.serves(rnd):
            python_rng = self._python = PythonGlobalRng(rnd)
        return python_rng.snapshot()

    def write(self, states, at_fork=False, queued=False):
        if not at_fork and self._packed and self._write_many is not None and len(states) <= self._ITEMS._length_:
            items = self._ITEMS()
            copies = []  # contiguous copies, alive until the call returns (states holds the rest)
            for i, (kind, device, payload) in enumerate(states):
                if isinstance(payload, bytes):
                    _ITEM.pack_into(items, i * _ITEM.size, id(payload) + BYTES_DATA_OFFSET, len(payload),
                                    kind, device)
                else:
                    if not payload.is_contiguous():  # torch's own states are
                        payload = payload.contiguous()
                        copies.append(payload)
                    _ITEM.pack_into(items, i * _ITEM.size, payload.data_ptr(),
                                    payload.numel() * payload.element_size(), kind, device)
            (self._write_queued if queued else self._write_many)(len(states), items)
            return
        write = self._lib.dlrr_rng_state_at_fork if at_fork else self._write
        for kind, device, payload in states:
            if isinstance(payload, bytes):
                write(kind, device, payload, len(payload))
            else:
                payload = payload.contiguous()
                write(kind, device, payload.data_ptr(), payload.numel() * payload.element_size())

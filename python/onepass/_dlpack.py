"""DLPack export of a vector the C library owns, through ctypes (no extension module).

A DLPack consumer (numpy.from_dlpack, torch.from_dlpack, cupy.from_dlpack) receives a
"dltensor" capsule holding a DLManagedTensor (DLPack's unversioned ABI, which every consumer
accepts). Each export keeps its owner, the Python object that frees the memory, alive until
the consumer calls the tensor's deleter, or until the capsule is destroyed unconsumed.
"""

import ctypes
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_int, c_int32, c_int64,
                    c_uint8, c_uint16, c_uint64, c_void_p)

_FLOAT = 2  # DLDataTypeCode kDLFloat


class _Device(Structure):
    _fields_ = [("device_type", c_int), ("device_id", c_int32)]


class _DataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class _Tensor(Structure):
    _fields_ = [("data", c_void_p), ("device", _Device), ("ndim", c_int32),
                ("dtype", _DataType), ("shape", POINTER(c_int64)),
                ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


class _ManagedTensor(Structure):
    pass


_Deleter = CFUNCTYPE(None, POINTER(_ManagedTensor))
_ManagedTensor._fields_ = [("dl_tensor", _Tensor), ("manager_ctx", c_void_p),
                           ("deleter", _Deleter)]

_CapsuleDestructor = CFUNCTYPE(None, c_void_p)

_NAME = b"dltensor"

# Exports not yet released: the DLManagedTensor's address -> (struct, shape, owner).
_exports = {}


def _release(address):
    exports = _exports
    if exports is not None:
        exports.pop(address, None)


# Both callbacks may run while the interpreter shuts down, with this module half torn down:
# a failure there is ignored (the process is ending and frees everything).
def _delete_managed(managed):
    try:
        _release(ctypes.addressof(managed.contents))
    except Exception:
        pass


def _destroy_capsule(capsule):
    # A consumer renames the capsule to "used_dltensor" and owns the tensor from then on;
    # a capsule still named "dltensor" was never consumed, so its tensor is released here.
    try:
        api = ctypes.pythonapi
        if api.PyCapsule_IsValid(capsule, _NAME):
            _release(api.PyCapsule_GetPointer(capsule, _NAME))
    except Exception:
        pass


_delete_managed_c = _Deleter(_delete_managed)
_destroy_capsule_c = _CapsuleDestructor(_destroy_capsule)
# A consumer may release its array while the interpreter shuts down, after this module's
# globals are gone: the two C entry points are kept alive for the life of the process.
ctypes.pythonapi.Py_IncRef.argtypes = [ctypes.py_object]
ctypes.pythonapi.Py_IncRef(ctypes.py_object(_delete_managed_c))
ctypes.pythonapi.Py_IncRef(ctypes.py_object(_destroy_capsule_c))

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [c_void_p, c_char_p, _CapsuleDestructor]
ctypes.pythonapi.PyCapsule_IsValid.restype = c_int
ctypes.pythonapi.PyCapsule_IsValid.argtypes = [c_void_p, c_char_p]
ctypes.pythonapi.PyCapsule_GetPointer.restype = c_void_p
ctypes.pythonapi.PyCapsule_GetPointer.argtypes = [c_void_p, c_char_p]


def float32_vector_capsule(data, length, device_type, device_id, owner):
    """A "dltensor" capsule of `length` float32 values at address `data` on the device
    (device_type, device_id); `owner` stays referenced until the consumer releases it."""
    shape = (c_int64 * 1)(length)
    managed = _ManagedTensor()
    managed.dl_tensor = _Tensor(data, _Device(device_type, device_id), 1,
                                _DataType(_FLOAT, 32, 1), shape, None, 0)
    managed.manager_ctx = None
    managed.deleter = _delete_managed_c
    address = ctypes.addressof(managed)
    _exports[address] = (managed, shape, owner)
    try:
        return _capsule_new(address, _NAME, _destroy_capsule_c)
    except BaseException:
        _release(address)
        raise


def live_exports():
    """Exports not yet released by their consumers (for tests)."""
    return len(_exports)

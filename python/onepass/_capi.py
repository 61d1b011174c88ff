"""ctypes declarations of the C API (include/onepass.h) and the library's loading."""

import ctypes
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_float, c_int, c_int32,
                    c_int64, c_size_t, c_uint32, c_uint64, c_void_p)

OK = 0
ERROR_BUFFER_TOO_SMALL = 2

BACKENDS = {"auto": 0, "cpu": 1, "cuda": 2}

TOKENIZE_ADD_SPECIAL = 1
TOKENIZE_PARSE_SPECIAL = 2
DETOKENIZE_RENDER_SPECIAL = 1

SEED_RANDOM = 2**64 - 1

STOP_REASONS = {0: None, 1: "end_of_generation", 2: "max_tokens", 3: "context_full",
                4: "stopped"}


class ModelParams(Structure):
    _fields_ = [("backend", c_int), ("context", c_int64), ("threads", c_int32)]


class ModelInfo(Structure):
    _fields_ = [("vocab_size", c_int32), ("context", c_int64), ("bos_token", c_int32),
                ("eos_token", c_int32), ("device", c_char_p)]


class ChatMessage(Structure):
    _fields_ = [("role", c_char_p), ("content", c_char_p)]


class SamplingParams(Structure):
    _fields_ = [("temperature", c_float), ("top_k", c_int32), ("top_p", c_float),
                ("seed", c_uint64), ("max_tokens", c_int64)]


class Step(Structure):
    _fields_ = [("token", c_int32), ("text", c_void_p), ("text_length", c_size_t),
                ("stop", c_int), ("generated", c_int64)]


TokenCallback = CFUNCTYPE(c_int, c_int32, c_void_p, c_size_t, c_void_p)

DEVICE_CPU = 1   # onepass_device_type: DLPack's kDLCPU
DEVICE_CUDA = 2  # DLPack's kDLCUDA


class LogitsInfo(Structure):
    _fields_ = [("data", c_void_p), ("length", c_int64), ("device_type", c_int),
                ("device_id", c_int32)]


def _library_path():
    """ONEPASS_LIBRARY when set, else the libonepass_c.so shipped inside the package."""
    path = os.environ.get("ONEPASS_LIBRARY")
    if path:
        return path
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "libonepass_c.so")


def _declare(lib):
    model_p = c_void_p
    generation_p = c_void_p
    signatures = {
        "onepass_last_error": (c_char_p, []),
        "onepass_status_name": (c_char_p, [c_int]),
        "onepass_version": (c_char_p, []),
        "onepass_version_number": (c_int, []),
        "onepass_backends": (c_char_p, []),
        "onepass_model_default_params": (ModelParams, []),
        "onepass_model_load": (c_int, [c_char_p, POINTER(ModelParams), POINTER(model_p)]),
        "onepass_model_free": (None, [model_p]),
        "onepass_model_get_info": (c_int, [model_p, POINTER(ModelInfo)]),
        "onepass_tokenize": (c_int, [model_p, c_char_p, c_size_t, c_uint32, POINTER(c_int32),
                                     c_size_t, POINTER(c_size_t)]),
        "onepass_detokenize": (c_int, [model_p, POINTER(c_int32), c_size_t, c_uint32,
                                       c_char_p, c_size_t, POINTER(c_size_t)]),
        "onepass_chat_apply": (c_int, [model_p, POINTER(ChatMessage), c_size_t, c_int,
                                       c_char_p, c_size_t, POINTER(c_size_t)]),
        "onepass_sampling_default_params": (SamplingParams, []),
        "onepass_generation_start": (c_int, [model_p, c_char_p, POINTER(SamplingParams),
                                             POINTER(generation_p)]),
        "onepass_generation_start_tokens": (c_int, [model_p, POINTER(c_int32), c_size_t,
                                                    POINTER(SamplingParams),
                                                    POINTER(generation_p)]),
        "onepass_generation_next": (c_int, [generation_p, POINTER(Step)]),
        "onepass_generation_stop": (c_int, [generation_p]),
        "onepass_generation_free": (None, [generation_p]),
        "onepass_generate": (c_int, [model_p, c_char_p, POINTER(SamplingParams),
                                     TokenCallback, c_void_p, POINTER(c_int)]),
        "onepass_eval_logits": (c_int, [model_p, POINTER(c_int32), c_size_t,
                                        POINTER(c_float), c_size_t]),
        "onepass_eval_logits_tensor": (c_int, [model_p, POINTER(c_int32), c_size_t,
                                               POINTER(c_void_p)]),
        "onepass_logits_get_info": (c_int, [c_void_p, POINTER(LogitsInfo)]),
        "onepass_logits_free": (None, [c_void_p]),
    }
    for name, (restype, argtypes) in signatures.items():
        function = getattr(lib, name)
        function.restype = restype
        function.argtypes = argtypes
    return lib


_lib = None


def lib():
    """The loaded C library (loaded on first use)."""
    global _lib
    if _lib is None:
        path = _library_path()
        try:
            loaded = ctypes.CDLL(path)
        except OSError as e:
            raise ImportError(f"onepass: cannot load the C library {path}: {e}") from e
        _lib = _declare(loaded)
    return _lib

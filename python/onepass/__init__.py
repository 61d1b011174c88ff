"""onepass: LLM inference on NVIDIA GPUs and the CPU.

    import onepass
    model = onepass.Model("models/SmolLM2-135M-Instruct.Q4_1.gguf", backend="cpu")
    prompt = model.chat([{"role": "user", "content": "What is the capital of France?"}])
    for piece in model.generate(prompt, max_tokens=32, stream=True):
        print(piece, end="", flush=True)

Bindings of the C API (include/onepass.h) through ctypes; failures raise onepass.Error with
the library's message.
"""

import ctypes
from ctypes import byref, c_float, c_int32, c_size_t, c_void_p

import numpy as np

from . import _capi, _dlpack

__all__ = ["Error", "Logits", "Model", "version", "backends"]


class Error(Exception):
    """A failure reported by the library: `status` is the C API's status name
    ("ONEPASS_ERROR_MODEL_LOAD", ...), the message says what was wrong."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def _check(status):
    if status != _capi.OK:
        lib = _capi.lib()
        raise Error(lib.onepass_status_name(status).decode(),
                    lib.onepass_last_error().decode("utf-8", "replace"))


def _text(text, what):
    if not isinstance(text, str):
        raise TypeError(f"{what} must be a str, not {type(text).__name__}")
    return text.encode("utf-8")


def _token_array(tokens):
    tokens = list(tokens)
    for t in tokens:
        if not isinstance(t, (int, np.integer)):
            raise TypeError(f"token ids must be integers, not {type(t).__name__}")
    return (c_int32 * len(tokens))(*tokens), len(tokens)


def _read_text(call):
    """Runs call(buffer, capacity, length) twice when the first buffer is too small."""
    length = c_size_t(0)
    capacity = 256
    while True:
        buffer = ctypes.create_string_buffer(capacity)
        status = call(buffer, capacity, byref(length))
        if status != _capi.ERROR_BUFFER_TOO_SMALL:
            _check(status)
            return buffer.raw[:length.value].decode("utf-8", "replace")
        capacity = length.value + 1


def version():
    """The library's version, "MAJOR.MINOR.PATCH"."""
    return _capi.lib().onepass_version().decode()


def backends():
    """The backends compiled into the library: ["cpu"] or ["cpu", "cuda"]."""
    return [b.strip() for b in _capi.lib().onepass_backends().decode().split(",")]


class Model:
    """A model loaded from a GGUF file or an MLX directory.

    backend: "auto" (CUDA when a GPU is present, else the CPU), "cpu" or "cuda".
    context: KV-cache capacity in tokens (prompt + generated); 0 means 4096.
    threads: CPU worker threads; 0 means ONEPASS_THREADS, else one per hardware thread.
    One call at a time per model; use one Model per thread for parallel work.
    """

    def __init__(self, path, backend="auto", context=0, threads=0):
        self._handle = None
        lib = _capi.lib()
        if backend not in _capi.BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(_capi.BACKENDS)}, "
                             f"not {backend!r}")
        params = _capi.ModelParams(_capi.BACKENDS[backend], int(context), int(threads))
        handle = c_void_p()
        _check(lib.onepass_model_load(_text(str(path), "path"), byref(params), byref(handle)))
        self._handle = handle
        info = _capi.ModelInfo()
        _check(lib.onepass_model_get_info(self._handle, byref(info)))
        self.vocab_size = info.vocab_size
        self.context = info.context
        self.bos_token = info.bos_token if info.bos_token >= 0 else None
        self.eos_token = info.eos_token if info.eos_token >= 0 else None
        self.device = info.device.decode()

    def close(self):
        """Frees the model now (generations already started keep what they need)."""
        if self._handle is not None and _capi._lib is not None:
            _capi._lib.onepass_model_free(self._handle)
        self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_handle", None) is not None:
            self.close()

    def _model(self):
        if self._handle is None:
            raise Error("ONEPASS_ERROR_INVALID_ARGUMENT", "[python] the model is closed")
        return self._handle

    def tokenize(self, text, add_special=True, parse_special=True):
        """Token ids of `text`: with BOS/EOS as the vocabulary asks (add_special) and control
        tokens written in the text ("<|im_end|>") as those tokens (parse_special)."""
        data = _text(text, "text")
        flags = ((_capi.TOKENIZE_ADD_SPECIAL if add_special else 0) |
                 (_capi.TOKENIZE_PARSE_SPECIAL if parse_special else 0))
        lib = _capi.lib()
        length = c_size_t(0)
        capacity = len(data) + 8
        while True:
            tokens = (c_int32 * capacity)()
            status = lib.onepass_tokenize(self._model(), data, len(data), flags, tokens,
                                          capacity, byref(length))
            if status != _capi.ERROR_BUFFER_TOO_SMALL:
                _check(status)
                return list(tokens[:length.value])
            capacity = length.value

    def detokenize(self, tokens, render_special=False):
        """The text of token ids; control tokens as their text with render_special."""
        array, count = _token_array(tokens)
        flags = _capi.DETOKENIZE_RENDER_SPECIAL if render_special else 0
        model = self._model()
        return _read_text(lambda buffer, capacity, length: _capi.lib().onepass_detokenize(
            model, array, count, flags, buffer, capacity, length))

    def chat(self, messages, add_generation_prompt=True):
        """The prompt of `messages` ([{"role": ..., "content": ...}, ...]) in the model's own
        chat template, ending with the header of the assistant's turn."""
        encoded = []
        for i, m in enumerate(messages):
            try:
                role, content = m["role"], m["content"]
            except (TypeError, KeyError):
                raise TypeError(f"message {i} must be a dict with 'role' and 'content'") from None
            encoded.append((_text(role, "role"), _text(content, "content")))
        array = (_capi.ChatMessage * max(len(encoded), 1))(*encoded)
        model = self._model()
        return _read_text(lambda buffer, capacity, length: _capi.lib().onepass_chat_apply(
            model, array, len(encoded), 1 if add_generation_prompt else 0, buffer, capacity,
            length))

    def generate(self, prompt, max_tokens=128, temperature=0.0, top_k=40, top_p=0.95,
                 seed=None, stream=False):
        """A continuation of `prompt` (text, or a list of token ids).

        temperature 0 (or top_k 1) is greedy; otherwise tokens are sampled from the top_k
        most likely whose probability reaches top_p, with `seed` (None: random). Stops at the
        model's end of turn, after max_tokens, or when the context is full.
        stream=False returns the text; stream=True returns an iterator of text pieces.
        Afterwards `stop_reason` says why it ended: "end_of_generation", "max_tokens",
        "context_full" or "stopped".
        """
        if seed is not None and not 0 <= seed < _capi.SEED_RANDOM:
            raise ValueError(f"seed must be in 0..2**64-2 or None, not {seed}")
        params = _capi.SamplingParams(
            float(temperature), int(top_k), float(top_p),
            _capi.SEED_RANDOM if seed is None else int(seed), int(max_tokens))
        generation = self._start(prompt, params)
        pieces = self._pieces(generation)
        return pieces if stream else "".join(pieces)

    def _start(self, prompt, params):
        lib = _capi.lib()
        generation = c_void_p()
        if isinstance(prompt, str):
            status = lib.onepass_generation_start(self._model(), prompt.encode("utf-8"),
                                                  byref(params), byref(generation))
        else:
            array, count = _token_array(prompt)
            status = lib.onepass_generation_start_tokens(self._model(), array, count,
                                                         byref(params), byref(generation))
        _check(status)
        return generation

    def _pieces(self, generation):
        lib = _capi.lib()
        step = _capi.Step()
        self.stop_reason = None
        try:
            while True:
                _check(lib.onepass_generation_next(generation, byref(step)))
                if step.text_length:
                    yield ctypes.string_at(step.text, step.text_length).decode("utf-8", "replace")
                if step.stop:
                    self.stop_reason = _capi.STOP_REASONS.get(step.stop, "unknown")
                    return
        finally:
            lib.onepass_generation_free(generation)

    def logits(self, tokens):
        """The logits after the last of `tokens`, run from an empty context: a float32 NumPy
        array of shape (vocab_size,)."""
        array, count = _token_array(tokens)
        out = np.empty(self.vocab_size, dtype=np.float32)
        _check(_capi.lib().onepass_eval_logits(
            self._model(), array, count, out.ctypes.data_as(ctypes.POINTER(c_float)),
            out.size))
        return out

    def logits_tensor(self, tokens):
        """As logits(), kept by the library on the model's device and shared without a copy
        through DLPack: an onepass.Logits (numpy.from_dlpack, torch.from_dlpack, ...)."""
        array, count = _token_array(tokens)
        handle = c_void_p()
        _check(_capi.lib().onepass_eval_logits_tensor(self._model(), array, count,
                                                      byref(handle)))
        return Logits(handle)  # frees the handle when it goes, also if its info fails


class Logits:
    """The logits after the last token of one evaluation (Model.logits_tensor), held by the
    library in the model's device memory: GPU memory when the model runs on CUDA, host
    memory on the CPU. A DLPack producer, so consumers share the memory without a copy:

        numpy.from_dlpack(logits)   # CPU
        torch.from_dlpack(logits)   # CPU or CUDA
        cupy.from_dlpack(logits)    # CUDA

    The values never change: running the model again fills a new Logits. The memory lives
    while this object or any array made from it does, also after the model is closed.
    """

    def __init__(self, handle):
        self._handle = handle
        info = _capi.LogitsInfo()
        _check(_capi.lib().onepass_logits_get_info(handle, byref(info)))
        self._data = info.data
        self.shape = (int(info.length),)
        self.dtype = np.dtype(np.float32)
        self._device = (int(info.device_type), int(info.device_id))
        # "cpu" or "cuda:N"
        self.device = ("cuda:%d" % info.device_id if info.device_type == _capi.DEVICE_CUDA
                       else "cpu")

    def __del__(self):
        handle = getattr(self, "_handle", None)
        if handle is not None and _capi._lib is not None:
            _capi._lib.onepass_logits_free(handle)
        self._handle = None

    def __len__(self):
        return self.shape[0]

    def __repr__(self):
        return f"onepass.Logits(shape={self.shape}, dtype=float32, device={self.device!r})"

    def __dlpack_device__(self):
        """(device type, device id) in DLPack's codes: (1, 0) for the CPU, (2, N) for CUDA."""
        return self._device

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule of the logits (float32, one dimension). The values are complete
        when the Logits exists, so `stream` needs no wait; `copy=True` copies on the CPU."""
        if dl_device is not None and tuple(dl_device) != self._device:
            raise BufferError(f"the logits are on {self.device}, not on device {dl_device}")
        if copy:
            if self._device[0] != _capi.DEVICE_CPU:
                raise BufferError("copy=True is supported for CPU logits only")
            return self.numpy().copy().__dlpack__()
        return _dlpack.float32_vector_capsule(self._data, self.shape[0], self._device[0],
                                              self._device[1], self)

    def numpy(self):
        """The logits as a NumPy array sharing this memory (CPU logits only)."""
        if self._device[0] != _capi.DEVICE_CPU:
            raise BufferError(f"the logits are on {self.device}: use a GPU array library's "
                              "from_dlpack (torch, cupy)")
        return np.from_dlpack(self)


__version__ = None
try:
    __version__ = version()
except ImportError:  # the library is missing; Model() says so again
    pass

/* onepass C API: load a model, tokenize, apply its chat template, generate, read logits
 * (into a caller's buffer, or as a device tensor for DLPack).
 *
 * Plain C (C99), for programs in C and for bindings from other languages. Handles are
 * opaque; every function that can fail returns an onepass_status and, on failure, leaves a
 * message for onepass_last_error() on the calling thread. No C++ exception crosses this
 * interface. A model handle serves one call at a time: calls on one handle from several
 * threads must be serialised by the caller; separate handles are independent.
 *
 * Link: find_package(onepass) -> onepass::onepass_c, or -lonepass_c (a shared library). */
#ifndef ONEPASS_H
#define ONEPASS_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define ONEPASS_API __attribute__((visibility("default")))
#else
#define ONEPASS_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status and errors ------------------------------------------------------------ */

typedef enum onepass_status {
  ONEPASS_OK = 0,
  ONEPASS_ERROR_INVALID_ARGUMENT = 1, /* a null handle or pointer, a value out of range */
  ONEPASS_ERROR_BUFFER_TOO_SMALL = 2, /* the output did not fit; the size needed is set */
  ONEPASS_ERROR_MODEL_LOAD = 3,       /* the file is missing, unreadable or unsupported */
  ONEPASS_ERROR_BACKEND = 4,          /* the requested backend is unavailable */
  ONEPASS_ERROR_RUNTIME = 5,          /* a failure while running (non-finite logits, ...) */
  ONEPASS_ERROR_OUT_OF_MEMORY = 6,
  ONEPASS_ERROR_INTERNAL = 7          /* anything else: a bug worth reporting */
} onepass_status;

/* The message of the last failure on this thread ("[where] what, and what was expected"),
 * or "" after a success. Valid until the next onepass call on this thread. */
ONEPASS_API const char* onepass_last_error(void);
/* "ONEPASS_OK", "ONEPASS_ERROR_INVALID_ARGUMENT", ...; "unknown" for other values. */
ONEPASS_API const char* onepass_status_name(onepass_status status);

/* ---- version ---------------------------------------------------------------------- */

/* The library's version, "MAJOR.MINOR.PATCH". */
ONEPASS_API const char* onepass_version(void);
/* MAJOR * 10000 + MINOR * 100 + PATCH. */
ONEPASS_API int onepass_version_number(void);
/* The backends compiled in: "cpu" or "cpu, cuda". */
ONEPASS_API const char* onepass_backends(void);

/* ---- models ----------------------------------------------------------------------- */

typedef struct onepass_model onepass_model;

typedef enum onepass_backend {
  ONEPASS_BACKEND_AUTO = 0, /* CUDA when a GPU is present, else the CPU */
  ONEPASS_BACKEND_CPU = 1,
  ONEPASS_BACKEND_CUDA = 2
} onepass_backend;

typedef struct onepass_model_params {
  onepass_backend backend;
  int64_t context; /* KV-cache capacity in tokens (prompt + generated); 0: 4096 */
  int32_t threads; /* CPU worker threads; 0: ONEPASS_THREADS, else one per hardware thread */
} onepass_model_params;

/* backend auto, context 0 (4096), threads 0. */
ONEPASS_API onepass_model_params onepass_model_default_params(void);

/* Opens a GGUF file or an MLX model directory at `path` and loads it. `params` NULL: the
 * defaults. On success *model is a handle for onepass_model_free; on failure it is NULL. */
ONEPASS_API onepass_status onepass_model_load(const char* path, const onepass_model_params* params,
                                              onepass_model** model);
/* Frees the model (NULL: nothing). Generations started on it stay usable until freed. */
ONEPASS_API void onepass_model_free(onepass_model* model);

typedef struct onepass_model_info {
  int32_t vocab_size;  /* logits per token */
  int64_t context;     /* KV-cache capacity in tokens */
  int32_t bos_token;   /* -1 when the vocabulary has none */
  int32_t eos_token;   /* -1 when the vocabulary has none */
  const char* device;  /* "cpu" or "cuda: <GPU name>"; owned by the model */
} onepass_model_info;

ONEPASS_API onepass_status onepass_model_get_info(const onepass_model* model,
                                                  onepass_model_info* info);

/* ---- text ------------------------------------------------------------------------- */

/* Functions that write a variable amount of output take the buffer's capacity and set the
 * size written (or needed) in *length. When the capacity is too small they write nothing
 * and return ONEPASS_ERROR_BUFFER_TOO_SMALL with *length set to the size needed, so a
 * caller may ask with capacity 0 (and a NULL buffer) first. Text is UTF-8 and is
 * NUL-terminated: it needs *length + 1 bytes of capacity. */

enum {
  ONEPASS_TOKENIZE_ADD_SPECIAL = 1,   /* add BOS/EOS as the vocabulary asks */
  ONEPASS_TOKENIZE_PARSE_SPECIAL = 2  /* "<|im_end|>" in the text becomes its control token */
};

/* Token ids of `text_length` bytes of `text`. `flags`: ONEPASS_TOKENIZE_* (both for a
 * prompt rendered by onepass_chat_apply). */
ONEPASS_API onepass_status onepass_tokenize(const onepass_model* model, const char* text,
                                            size_t text_length, uint32_t flags, int32_t* tokens,
                                            size_t capacity, size_t* length);

enum {
  ONEPASS_DETOKENIZE_RENDER_SPECIAL = 1 /* control tokens as their text ("<|im_end|>") */
};

/* The text of `count` token ids. `flags`: ONEPASS_DETOKENIZE_*. */
ONEPASS_API onepass_status onepass_detokenize(const onepass_model* model, const int32_t* tokens,
                                              size_t count, uint32_t flags, char* text,
                                              size_t capacity, size_t* length);

typedef struct onepass_chat_message {
  const char* role; /* "system", "user", "assistant", ... as the model's template accepts */
  const char* content;
} onepass_chat_message;

/* The prompt text of `count` messages in the model's own chat template (tokenizer.chat_template,
 * or ChatML when the vocabulary has <|im_start|> and no template); `add_generation_prompt`
 * non-zero ends it with the header of the assistant's turn. Tokenize the result with
 * ONEPASS_TOKENIZE_ADD_SPECIAL | ONEPASS_TOKENIZE_PARSE_SPECIAL (onepass_generate does). */
ONEPASS_API onepass_status onepass_chat_apply(const onepass_model* model,
                                              const onepass_chat_message* messages, size_t count,
                                              int add_generation_prompt, char* text,
                                              size_t capacity, size_t* length);

/* ---- generation ------------------------------------------------------------------- */

/* onepass_sampling_params.seed: a different random seed for each generation. */
#define ONEPASS_SEED_RANDOM UINT64_MAX

typedef struct onepass_sampling_params {
  float temperature;  /* 0 (or below): greedy, the argmax taken on the device */
  int32_t top_k;      /* keep the k most likely tokens; 0: all; 1: greedy */
  float top_p;        /* keep the smallest set reaching probability p, in (0, 1] */
  uint64_t seed;      /* ONEPASS_SEED_RANDOM or a fixed seed (the same tokens each time) */
  int64_t max_tokens; /* tokens to generate at most, >= 0 */
} onepass_sampling_params;

/* temperature 0 (greedy), top-k 40, top-p 0.95, seed ONEPASS_SEED_RANDOM, 128 tokens. */
ONEPASS_API onepass_sampling_params onepass_sampling_default_params(void);

typedef enum onepass_stop_reason {
  ONEPASS_STOP_NONE = 0,           /* not finished */
  ONEPASS_STOP_END_OF_GENERATION,  /* the model wrote EOS or an end-of-turn token */
  ONEPASS_STOP_MAX_TOKENS,         /* max_tokens were generated */
  ONEPASS_STOP_CONTEXT_FULL,       /* the KV cache is full (onepass_model_params.context) */
  ONEPASS_STOP_CALLBACK            /* the token callback asked to stop */
} onepass_stop_reason;

typedef struct onepass_generation onepass_generation;

/* One step of a generation: a token and the text it completes, or the end. */
typedef struct onepass_step {
  int32_t token;       /* the token generated; -1 at the end */
  const char* text;    /* the UTF-8 text completed by it (often "" inside a multi-byte
                          character); at the end, what was held back. Owned by the
                          generation, valid until the next onepass_generation_next. */
  size_t text_length;
  onepass_stop_reason stop; /* ONEPASS_STOP_NONE until the end */
  int64_t generated;        /* tokens generated so far */
} onepass_step;

/* Starts generating a continuation of `prompt` (tokenized with ADD_SPECIAL | PARSE_SPECIAL)
 * from an empty KV cache. The model's cache belongs to the generation until another
 * generation starts or onepass_eval_logits or onepass_eval_logits_tensor runs on the model;
 * after that this generation's next step fails with ONEPASS_ERROR_INVALID_ARGUMENT.
 * `params` NULL: the defaults. */
ONEPASS_API onepass_status onepass_generation_start(onepass_model* model, const char* prompt,
                                                    const onepass_sampling_params* params,
                                                    onepass_generation** generation);
/* As onepass_generation_start, from `count` token ids. */
ONEPASS_API onepass_status onepass_generation_start_tokens(onepass_model* model,
                                                           const int32_t* tokens, size_t count,
                                                           const onepass_sampling_params* params,
                                                           onepass_generation** generation);
/* The next token, or the end (step->stop != ONEPASS_STOP_NONE, step->token == -1); after
 * the end each call returns the end again, with empty text. */
ONEPASS_API onepass_status onepass_generation_next(onepass_generation* generation,
                                                   onepass_step* step);
/* Ends the generation early: the next step is the end with ONEPASS_STOP_CALLBACK. */
ONEPASS_API onepass_status onepass_generation_stop(onepass_generation* generation);
/* Frees a generation (NULL: nothing). */
ONEPASS_API void onepass_generation_free(onepass_generation* generation);

/* Called for each generated token with the text it completes (text_length may be 0), and
 * once more with token -1 if text was held back at the end. Return 0 to go on, non-zero
 * to stop. */
typedef int (*onepass_token_callback)(int32_t token, const char* text, size_t text_length,
                                      void* user_data);

/* Generates a continuation of `prompt`, calling `callback` (may be NULL) for each token;
 * `stop` (may be NULL) receives why it ended. A generation start, steps and free in one. */
ONEPASS_API onepass_status onepass_generate(onepass_model* model, const char* prompt,
                                            const onepass_sampling_params* params,
                                            onepass_token_callback callback, void* user_data,
                                            onepass_stop_reason* stop);

/* ---- logits ----------------------------------------------------------------------- */

/* Runs `count` (>= 1) token ids from an empty KV cache and writes the logits after the last
 * one (vocab_size floats) into `logits`, of `capacity` floats. */
ONEPASS_API onepass_status onepass_eval_logits(onepass_model* model, const int32_t* tokens,
                                               size_t count, float* logits, size_t capacity);

/* Where a tensor's memory lies: the codes of DLPack's DLDeviceType (kDLCPU, kDLCUDA). */
typedef enum onepass_device_type {
  ONEPASS_DEVICE_CPU = 1, /* host memory */
  ONEPASS_DEVICE_CUDA = 2 /* CUDA device memory */
} onepass_device_type;

/* The logits of one evaluation, kept in the model's device memory for zero-copy consumers
 * (DLPack: NumPy on the CPU, PyTorch or CuPy on a GPU). */
typedef struct onepass_logits onepass_logits;

/* A contiguous float32 vector of `length` elements (one dimension, stride 1). */
typedef struct onepass_logits_info {
  const float* data; /* host memory (CPU) or device memory (CUDA) */
  int64_t length;    /* vocab_size */
  onepass_device_type device_type;
  int32_t device_id; /* the CUDA device ordinal; 0 on the CPU */
} onepass_logits_info;

/* As onepass_eval_logits, with the logits in a new handle instead of a caller's buffer:
 * a copy in device memory when the model runs on CUDA (complete when this returns, no
 * stream to wait on), in host memory on the CPU. The handle owns its memory: the values do
 * not change when the model runs again, and stay valid after onepass_model_free, until
 * onepass_logits_free. On failure *logits is NULL. */
ONEPASS_API onepass_status onepass_eval_logits_tensor(onepass_model* model, const int32_t* tokens,
                                                      size_t count, onepass_logits** logits);
/* Where the logits are and how many. */
ONEPASS_API onepass_status onepass_logits_get_info(const onepass_logits* logits,
                                                   onepass_logits_info* info);
/* Frees the logits (NULL: nothing). */
ONEPASS_API void onepass_logits_free(onepass_logits* logits);

#ifdef __cplusplus
}
#endif

#endif /* ONEPASS_H */

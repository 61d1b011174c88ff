/* A chat answer streamed to stdout through the C API (onepass.h):
 *   generate_c [MODEL.gguf] [PROMPT] [TOKENS]
 * Defaults: models/SmolLM2-135M-Instruct.Q4_1.gguf, "What is the capital of France?", 64. */
#include <stdio.h>
#include <stdlib.h>

#include "onepass.h"

static int print_piece(int32_t token, const char* text, size_t length, void* user_data) {
  (void)token;
  (void)user_data;
  fwrite(text, 1, length, stdout);
  fflush(stdout);
  return 0; /* non-zero stops the generation */
}

static int fail(const char* what, onepass_status status) {
  fprintf(stderr, "generate_c: %s: %s %s\n", what, onepass_status_name(status),
          onepass_last_error());
  return 1;
}

int main(int argc, char** argv) {
  const char* path = argc > 1 ? argv[1] : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  const char* question = argc > 2 ? argv[2] : "What is the capital of France?";
  onepass_model_params params = onepass_model_default_params();
  onepass_sampling_params sampling = onepass_sampling_default_params();
  onepass_chat_message message;
  onepass_model* model = NULL;
  onepass_stop_reason stop = ONEPASS_STOP_NONE;
  onepass_status status;
  char* prompt;
  size_t length = 0;

  sampling.max_tokens = argc > 3 ? atoi(argv[3]) : 64; /* greedy: temperature 0 */
  params.backend = ONEPASS_BACKEND_AUTO; /* CUDA when a GPU is present, else the CPU */
  status = onepass_model_load(path, &params, &model);
  if (status != ONEPASS_OK) return fail("load", status);

  /* The model's own chat template around one user message: ask for the size, then render. */
  message.role = "user";
  message.content = question;
  onepass_chat_apply(model, &message, 1, 1, NULL, 0, &length);
  prompt = malloc(length + 1);
  if (prompt == NULL) return 1;
  status = onepass_chat_apply(model, &message, 1, 1, prompt, length + 1, &length);
  if (status == ONEPASS_OK) status = onepass_generate(model, prompt, &sampling, print_piece, NULL, &stop);
  free(prompt);
  onepass_model_free(model);
  if (status != ONEPASS_OK) return fail("generate", status);
  printf("\n");
  fprintf(stderr, "[onepass %s] stopped: %s\n", onepass_version(),
          stop == ONEPASS_STOP_END_OF_GENERATION ? "end of the answer" : "token limit");
  return 0;
}

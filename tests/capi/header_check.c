/* include/onepass.h used from C (built with -std=c99 -pedantic-errors): a load of a missing
 * file fails with a status and a message, and leaves no handle. */
#include "onepass.h"

#include <string.h>

int onepass_header_check_c(const char* missing_path);

int onepass_header_check_c(const char* missing_path) {
  onepass_model_params params = onepass_model_default_params();
  onepass_model* model = (onepass_model*)&params; /* must come back NULL */
  onepass_status status;
  params.backend = ONEPASS_BACKEND_CPU;
  status = onepass_model_load(missing_path, &params, &model);
  if (model != NULL || strlen(onepass_last_error()) == 0) return -1;
  return (int)status;
}

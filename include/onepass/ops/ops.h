// Every op of the library, one header per family.
#pragma once

#include "onepass/ops/activation.h"
#include "onepass/ops/affine.h"
#include "onepass/ops/argmax.h"
#include "onepass/ops/attention.h"
#include "onepass/ops/copy.h"
#include "onepass/ops/elementwise.h"
#include "onepass/ops/embedding.h"
#include "onepass/ops/kv_cache.h"
#include "onepass/ops/matmul.h"
#include "onepass/ops/matmul_id.h"
#include "onepass/ops/moe.h"
#include "onepass/ops/norm.h"
#include "onepass/ops/paged_attention.h"
#include "onepass/ops/rope.h"
#include "onepass/ops/sample.h"
#include "onepass/ops/softmax.h"

// MLX affine-quantised weights re-laid as a GGUF weight type, for the ops that take only those
// (matmul_id, which runs a mixture's experts).
#pragma once

#include <cstdint>
#include <vector>

#include "onepass/core/dtype.h"
#include "onepass/core/tensor.h"
#include "onepass/model/model_source.h"

namespace onepass::model {

/// A weight in a GGUF weight type, owning its bytes.
struct RelaidWeight {
  DType dtype = DType::f16;
  Shape shape;  // the affine weight's shape with its input features unpacked
  std::vector<uint8_t> bytes;
};

/// `t` (affine: packed u32 [..., in / values_per_word], scales and biases [..., in / group])
/// as [..., in] of one GGUF weight type:
/// - 4-bit groups: q4_1, each group's scale and bias as its blocks' d and m;
/// - 8-bit groups whose bias is -128 x scale (symmetric, as q8_0's blocks are): q8_0 with
///   d = scale and q - 128;
/// - other 8-bit groups, and scales or biases beyond f16's range: the values scale * q + bias
///   in f16 (f32 where one exceeds f16's range).
/// The blocks hold the directory's values exactly when its scales and biases are f16 values
/// (f16 scales, and bf16 ones in f16's normal range). Throws Error naming the tensor when the
/// shapes do not fit.
/// `forms` narrows the choice: without `blocks`, never q4_1 / q8_0; without `f16`, values
/// in f32 only.
struct RelayoutForms {
  bool blocks = true;
  bool f16 = true;
};
RelaidWeight relayout_affine(const HostTensor& t, RelayoutForms forms = {});

/// The forms that re-lay every one of `parts` (the experts of one stacked tensor) as one
/// weight type: the default when each part picks the same type, else the values in f16,
/// else in f32. Each part is re-laid here and its bytes discarded: stacking never holds
/// more than one part's copy.
RelayoutForms common_relayout_forms(const std::vector<HostTensor>& parts);

}  // namespace onepass::model

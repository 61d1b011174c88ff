#include "onepass/exec/op_kind.h"

namespace onepass {

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::norm: return "norm";
    case OpKind::norm_mul: return "norm_mul";
    case OpKind::add: return "add";
    case OpKind::mul: return "mul";
    case OpKind::scale: return "scale";
    case OpKind::activation: return "activation";
    case OpKind::softmax: return "softmax";
    case OpKind::rope: return "rope";
    case OpKind::attention: return "attention";
    case OpKind::matmul: return "matmul";
    case OpKind::matmul_id: return "matmul_id";
    case OpKind::copy: return "copy";
    case OpKind::gather: return "gather";
    case OpKind::kv_write: return "kv_write";
    case OpKind::argmax: return "argmax";
    case OpKind::moe_gate: return "moe_gate";
    case OpKind::other: return "other";
  }
  return "?";
}

bool is_reorderable(OpKind kind) {
  switch (kind) {
    case OpKind::attention:
    case OpKind::softmax:
    case OpKind::moe_gate:
    case OpKind::other:
      return false;
    default:
      return true;
  }
}

}  // namespace onepass

// dtype and shape names, spelled the way PyTorch prints them.
#include <attn/common.h>

namespace attn {

std::string dtype_name(Dtype dtype) {
  switch (dtype) {
    case Dtype::Float32: return "torch.float32";
    case Dtype::Int64: return "torch.int64";
    case Dtype::Bool: return "torch.bool";
  }
  throw Error("[dtype_name] unknown dtype " + std::to_string(static_cast<int>(dtype)));
}

std::string shape_str(const Shape& shape) {
  // Python tuple repr: "()", "(5,)", "(2, 4, 8)".
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  if (shape.size() == 1) out += ",";
  out += ")";
  return out;
}

}  // namespace attn

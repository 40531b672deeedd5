// The functions of attn/common.h: dtype and shape names, spelled the way PyTorch prints them, and
// byte counts for messages.
#include <attn/common.h>

#include <cstdio>

namespace attn {

std::string dtype_name(Dtype dtype) {
  switch (dtype) {
    case Dtype::Float32: return "torch.float32";
    case Dtype::Int64: return "torch.int64";
    case Dtype::Bool: return "torch.bool";
    case Dtype::BFloat16: return "torch.bfloat16";
    case Dtype::Float16: return "torch.float16";
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

std::string bytes_str(double bytes) {
  static const char* units[] = {"bytes", "kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"};
  if (!(bytes >= 1000)) return std::to_string((long long)(bytes > 0 ? bytes : 0)) + " bytes";
  int u = 0;
  while (bytes >= 999.95 && u < 8) bytes /= 1000, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", bytes, units[u]);
  return buf;
}

}  // namespace attn

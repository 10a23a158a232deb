#include "dtype.h"

#include "error.h"

namespace ember {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
    case DType::u8: return "uint8";
    case DType::boolean: return "bool";
  }
  return "unknown";
}

DType dtype_from_name(const std::string& n) {
  if (n == "float32" || n == "f32" || n == "float") return DType::f32;
  if (n == "float64" || n == "f64" || n == "double") return DType::f64;
  if (n == "float16" || n == "f16" || n == "half") return DType::f16;
  if (n == "bfloat16" || n == "bf16") return DType::bf16;
  if (n == "int32" || n == "i32" || n == "int") return DType::i32;
  if (n == "int64" || n == "i64" || n == "long") return DType::i64;
  if (n == "uint8" || n == "u8") return DType::u8;
  if (n == "bool") return DType::boolean;
  EMBER_THROW("unknown dtype name '", n, "'");
}

std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

namespace {
int promotion_rank(DType t) {
  switch (t) {
    case DType::boolean: return 0;
    case DType::u8: return 1;
    case DType::i32: return 2;
    case DType::i64: return 3;
    case DType::f16: return 4;
    case DType::bf16: return 4;
    case DType::f32: return 5;
    case DType::f64: return 6;
  }
  return 0;
}
}  // namespace

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  // f16 with bf16 has no exact common 16-bit type: PyTorch gives float32.
  if ((a == DType::f16 && b == DType::bf16) || (a == DType::bf16 && b == DType::f16)) return DType::f32;
  return promotion_rank(a) >= promotion_rank(b) ? a : b;
}

}  // namespace ember

#include "kernels/dtype.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace corolla {

int64_t block_elems(DType t) { return is_quantized(t) ? kQuantBlock : 1; }

int64_t block_bytes(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::q8_0: return sizeof(BlockQ8_0);
    case DType::q4_0: return sizeof(BlockQ4_0);
    case DType::q4_1: return sizeof(BlockQ4_1);
    case DType::i32: return 4;
    case DType::i64: return 8;
  }
  return 0;
}

int64_t storage_bytes(DType t, int64_t n) {
  if (n % block_elems(t) != 0)
    throw std::invalid_argument(std::to_string(n) + " elements do not fill whole " + std::string(dtype_name(t)) +
                                " blocks of " + std::to_string(block_elems(t)));
  return n / block_elems(t) * block_bytes(t);
}

bool is_quantized(DType t) { return t == DType::q8_0 || t == DType::q4_0 || t == DType::q4_1; }

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::q8_0: return "q8_0";
    case DType::q4_0: return "q4_0";
    case DType::q4_1: return "q4_1";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::q8_0, DType::q4_0, DType::q4_1, DType::i32, DType::i64})
    if (dtype_name(t) == name) return t;
  if (name == "float32") return DType::f32;
  if (name == "float16") return DType::f16;
  if (name == "bfloat16") return DType::bf16;
  return std::nullopt;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  // Round to nearest even. Subnormals go through a float addition that lets the FPU do the rounding.
  auto as_bits = [](float x) { uint32_t b; std::memcpy(&b, &x, 4); return b; };
  auto as_float = [](uint32_t b) { float x; std::memcpy(&x, &b, 4); return x; };
  constexpr uint32_t f32_inf = 255u << 23, f16_overflow = (127u + 16u) << 23;
  constexpr uint32_t denorm_magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  uint32_t u = as_bits(f);
  const uint32_t sign = u & 0x80000000u;
  u ^= sign;
  uint16_t o;
  if (u >= f16_overflow) {
    o = u > f32_inf ? 0x7e00 : 0x7c00;
  } else if (u < (113u << 23)) {
    o = static_cast<uint16_t>(as_bits(as_float(u) + as_float(denorm_magic)) - denorm_magic);
  } else {
    const uint32_t mant_odd = (u >> 13) & 1u;
    u += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu + mant_odd;
    o = static_cast<uint16_t>(u >> 13);
  }
  return static_cast<uint16_t>(o | (sign >> 16));
}

void to_f32(DType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case DType::f32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::f16: {
      auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    case DType::bf16: {
      auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::q8_0: {
      auto* b = static_cast<const BlockQ8_0*>(src);
      for (int64_t k = 0; k < n / kQuantBlock; ++k) {
        const float d = f16_to_f32(b[k].d);
        for (int j = 0; j < kQuantBlock; ++j) dst[k * kQuantBlock + j] = d * b[k].qs[j];
      }
      return;
    }
    case DType::q4_0: {
      auto* b = static_cast<const BlockQ4_0*>(src);
      for (int64_t k = 0; k < n / kQuantBlock; ++k) {
        const float d = f16_to_f32(b[k].d);
        float* o = dst + k * kQuantBlock;
        for (int j = 0; j < kQuantBlock / 2; ++j) {
          o[j] = d * ((b[k].qs[j] & 0x0f) - 8);
          o[j + kQuantBlock / 2] = d * ((b[k].qs[j] >> 4) - 8);
        }
      }
      return;
    }
    case DType::q4_1: {
      auto* b = static_cast<const BlockQ4_1*>(src);
      for (int64_t k = 0; k < n / kQuantBlock; ++k) {
        const float d = f16_to_f32(b[k].d), m = f16_to_f32(b[k].m);
        float* o = dst + k * kQuantBlock;
        for (int j = 0; j < kQuantBlock / 2; ++j) {
          o[j] = d * (b[k].qs[j] & 0x0f) + m;
          o[j + kQuantBlock / 2] = d * (b[k].qs[j] >> 4) + m;
        }
      }
      return;
    }
    case DType::i32: {
      auto* s = static_cast<const int32_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
    case DType::i64: {
      auto* s = static_cast<const int64_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
  }
}

void from_f32(DType t, const float* src, void* dst, int64_t n) {
  switch (t) {
    case DType::f32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::f16: {
      auto* o = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) o[i] = f32_to_f16(src[i]);
      return;
    }
    case DType::bf16: {
      auto* o = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) o[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::q8_0: {
      auto* b = static_cast<BlockQ8_0*>(dst);
      for (int64_t k = 0; k < n / kQuantBlock; ++k) {
        const float* x = src + k * kQuantBlock;
        float amax = 0;
        for (int j = 0; j < kQuantBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
        const float d = amax / 127.f, id = d != 0 ? 1.f / d : 0.f;
        b[k].d = f32_to_f16(d);
        for (int j = 0; j < kQuantBlock; ++j) b[k].qs[j] = static_cast<int8_t>(std::lround(x[j] * id));
      }
      return;
    }
    case DType::q4_0: {
      auto* b = static_cast<BlockQ4_0*>(dst);
      for (int64_t k = 0; k < n / kQuantBlock; ++k) {
        const float* x = src + k * kQuantBlock;
        float amax = 0, max = 0;  // signed value of largest magnitude
        for (int j = 0; j < kQuantBlock; ++j)
          if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), max = x[j];
        const float d = max / -8.f, id = d != 0 ? 1.f / d : 0.f;
        b[k].d = f32_to_f16(d);
        for (int j = 0; j < kQuantBlock / 2; ++j) {
          const int q0 = std::min(15, static_cast<int>(x[j] * id + 8.5f));
          const int q1 = std::min(15, static_cast<int>(x[j + kQuantBlock / 2] * id + 8.5f));
          b[k].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
      }
      return;
    }
    case DType::q4_1: {
      auto* b = static_cast<BlockQ4_1*>(dst);
      for (int64_t k = 0; k < n / kQuantBlock; ++k) {
        const float* x = src + k * kQuantBlock;
        float mn = x[0], mx = x[0];
        for (int j = 1; j < kQuantBlock; ++j) mn = std::min(mn, x[j]), mx = std::max(mx, x[j]);
        const float d = (mx - mn) / 15.f, id = d != 0 ? 1.f / d : 0.f;
        b[k].d = f32_to_f16(d);
        b[k].m = f32_to_f16(mn);
        for (int j = 0; j < kQuantBlock / 2; ++j) {
          const int q0 = std::min(15, static_cast<int>((x[j] - mn) * id + 0.5f));
          const int q1 = std::min(15, static_cast<int>((x[j + kQuantBlock / 2] - mn) * id + 0.5f));
          b[k].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
      }
      return;
    }
    case DType::i32: {
      auto* o = static_cast<int32_t*>(dst);
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<int32_t>(src[i]);
      return;
    }
    case DType::i64: {
      auto* o = static_cast<int64_t*>(dst);
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<int64_t>(src[i]);
      return;
    }
  }
}

}  // namespace corolla

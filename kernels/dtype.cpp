#include "kernels/dtype.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/k_scales.hpp"
#include "kernels/low_bit_quants.hpp"

namespace corolla {

namespace {
[[noreturn]] void throw_interleaved(const char* what, DType t) {
  throw std::invalid_argument(std::string(what) + ": " + std::string(dtype_name(t)) +
                              " interleaves rows; convert it by rows (kernels/interleaved_rows.hpp)");
}
}  // namespace

int64_t block_elems(DType t) {
  switch (t) {
    case DType::q8_0:
    case DType::q4_0:
    case DType::q4_1:
    case DType::q5_0:
    case DType::q5_1:
    case DType::q4_0_r16:
    case DType::q8_0_r16:
    case DType::q4_1_r16:
    case DType::iq4_nl:
    case DType::iq4_nl_r16: return kQuantBlock;
    case DType::q2_K:
    case DType::q3_K:
    case DType::q2_K_r16:
    case DType::q3_K_r16:
    case DType::q4_K_r16:
    case DType::q5_K_r16:
    case DType::q6_K_r16: return kSuperBlock;
    case DType::q4_K:
    case DType::q5_K:
    case DType::q6_K: return kSuperBlock;
    default: return 1;
  }
}

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
    case DType::q4_K: return sizeof(BlockQ4_K);
    case DType::q5_K: return sizeof(BlockQ5_K);
    case DType::q6_K: return sizeof(BlockQ6_K);
    case DType::q5_0: return sizeof(BlockQ5_0);
    case DType::q5_1: return sizeof(BlockQ5_1);
    case DType::q4_0_r16: return sizeof(BlockQ4_0);
    case DType::q8_0_r16: return sizeof(BlockQ8_0);
    case DType::q4_1_r16: return sizeof(BlockQ4_1);
    case DType::q4_K_r16: return sizeof(BlockQ4_K);
    case DType::q5_K_r16: return sizeof(BlockQ5_K);
    case DType::q6_K_r16: return sizeof(BlockQ6_K);
    case DType::q2_K:
    case DType::q2_K_r16: return sizeof(BlockQ2_K);
    case DType::q3_K:
    case DType::q3_K_r16: return sizeof(BlockQ3_K);
    case DType::iq4_nl:
    case DType::iq4_nl_r16: return sizeof(BlockIQ4_NL);
  }
  return 0;
}

int64_t storage_bytes(DType t, int64_t n) {
  if (n % block_elems(t) != 0)
    throw std::invalid_argument(std::to_string(n) + " elements do not fill whole " + std::string(dtype_name(t)) +
                                " blocks of " + std::to_string(block_elems(t)));
  return n / block_elems(t) * block_bytes(t);
}

bool is_quantized(DType t) { return block_elems(t) > 1; }

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
    case DType::q4_K: return "q4_K";
    case DType::q5_K: return "q5_K";
    case DType::q6_K: return "q6_K";
    case DType::q5_0: return "q5_0";
    case DType::q5_1: return "q5_1";
    case DType::q4_0_r16: return "q4_0_r16";
    case DType::q8_0_r16: return "q8_0_r16";
    case DType::q4_1_r16: return "q4_1_r16";
    case DType::q4_K_r16: return "q4_K_r16";
    case DType::q5_K_r16: return "q5_K_r16";
    case DType::q6_K_r16: return "q6_K_r16";
    case DType::q2_K: return "q2_K";
    case DType::q3_K: return "q3_K";
    case DType::iq4_nl: return "iq4_nl";
    case DType::q2_K_r16: return "q2_K_r16";
    case DType::q3_K_r16: return "q3_K_r16";
    case DType::iq4_nl_r16: return "iq4_nl_r16";
  }
  return "?";
}

std::span<const DType> weight_dtypes() {
  static constexpr DType kWeights[] = {DType::f32,  DType::f16,  DType::bf16, DType::q8_0,  DType::q4_0,
                                       DType::q4_1, DType::q5_0, DType::q5_1, DType::q2_K,  DType::q3_K,
                                       DType::q4_K, DType::q5_K, DType::q6_K, DType::iq4_nl};
  return kWeights;
}

std::string weight_dtype_list() {
  std::string out;
  for (DType t : weight_dtypes()) out += (out.empty() ? "" : ", ") + std::string(dtype_name(t));
  return out;
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (DType t : weight_dtypes())
    if (dtype_name(t) == name) return t;
  if (name == "i32") return DType::i32;
  if (name == "i64") return DType::i64;
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
  auto as_bits = [](float x) {
    uint32_t b;
    std::memcpy(&b, &x, 4);
    return b;
  };
  auto as_float = [](uint32_t b) {
    float x;
    std::memcpy(&x, &b, 4);
    return x;
  };
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

void unpack_k_scales(const uint8_t (&packed)[12], uint8_t (&sc)[8], uint8_t (&m)[8]) {
  for (int j = 0; j < 8; ++j) {
    int s, mn;
    k_scale_min(packed, j, s, mn);
    sc[j] = static_cast<uint8_t>(s);
    m[j] = static_cast<uint8_t>(mn);
  }
}

namespace {

// The inverse of unpack_k_scales: eight 6-bit scales and mins into 12 bytes.
void pack_k_scales(const uint8_t (&sc)[8], const uint8_t (&m)[8], uint8_t (&s)[12]) {
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
}

// q4_K and q5_K share everything but the fifth bit: x = (d * sc[j]) * q - dmin * m[j] for sub-block j. Both
// products are exact in f32 (an f16 times a 6-bit integer, times a 5-bit one), so the one rounding is the
// subtraction's, as in gguf-py's dequantize.
template <class Block>
void dequant_k(const Block& b, float* y) {
  uint8_t sc[8], m[8];
  unpack_k_scales(b.scales, sc, m);
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  for (int j = 0; j < 8; ++j) {
    const float ds = d * sc[j], dm = dmin * m[j];
    const uint8_t* q = b.qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l) {
      int v = (q[l] >> shift) & 15;
      if constexpr (std::is_same_v<Block, BlockQ5_K>) v |= ((b.qh[l] >> j) & 1) << 4;
      y[32 * j + l] = ds * static_cast<float>(v) - dm;
    }
  }
}

void dequant_q6_K(const BlockQ6_K& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int h = 0; h < 2; ++h)
    for (int t = 0; t < 4; ++t)
      for (int l = 0; l < 32; ++l) {
        const int lo = (b.ql[64 * h + 32 * (t & 1) + l] >> (4 * (t >> 1))) & 15;
        const int hi = (b.qh[32 * h + l] >> (2 * t)) & 3;
        y[128 * h + 32 * t + l] = d * b.scales[8 * h + 2 * t + l / 16] * static_cast<float>((lo | hi << 4) - 32);
      }
}

int clamp_round(float v, int lo, int hi) { return std::clamp(static_cast<int>(std::lround(v)), lo, hi); }

// q4_K / q5_K, with 15 or 31 steps: each sub-block of 32 spans [min(0, lowest), highest] in those steps; its step
// and -min become 6-bit multiples of the super-block's d and dmin.
template <class Block>
void quantize_k(const float* x, Block& b) {
  constexpr int levels = std::is_same_v<Block, BlockQ5_K> ? 31 : 15;
  float step[8], low[8];
  for (int j = 0; j < 8; ++j) {
    float mn = 0, mx = 0;
    for (int l = 0; l < 32; ++l) mn = std::min(mn, x[32 * j + l]), mx = std::max(mx, x[32 * j + l]);
    step[j] = (mx - mn) / static_cast<float>(levels);
    low[j] = -mn;
  }
  const float max_step = *std::max_element(step, step + 8), max_low = *std::max_element(low, low + 8);
  b.d = f32_to_f16(max_step / 63.f);
  b.dmin = f32_to_f16(max_low / 63.f);
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  uint8_t sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>(d > 0 ? clamp_round(step[j] / d, 0, 63) : 0);
    m[j] = static_cast<uint8_t>(dmin > 0 ? clamp_round(low[j] / dmin, 0, 63) : 0);
  }
  pack_k_scales(sc, m, b.scales);
  std::memset(b.qs, 0, sizeof b.qs);
  if constexpr (std::is_same_v<Block, BlockQ5_K>) std::memset(b.qh, 0, sizeof b.qh);
  for (int j = 0; j < 8; ++j) {
    const float ds = d * sc[j], dm = dmin * m[j];
    for (int l = 0; l < 32; ++l) {
      const int q = ds > 0 ? clamp_round((x[32 * j + l] + dm) / ds, 0, levels) : 0;
      b.qs[32 * (j / 2) + l] |= static_cast<uint8_t>((q & 15) << (4 * (j % 2)));
      if constexpr (std::is_same_v<Block, BlockQ5_K>) b.qh[l] |= static_cast<uint8_t>((q >> 4) << j);
    }
  }
}

// q6_K: each sub-block of 16 gets a signed step amax / 31; the steps become int8 multiples of d.
void quantize_q6_K(const float* x, BlockQ6_K& b) {
  float step[16];
  for (int s = 0; s < 16; ++s) {
    float amax = 0;
    for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[16 * s + l]));
    step[s] = amax / 31.f;
  }
  b.d = f32_to_f16(*std::max_element(step, step + 16) / 127.f);
  const float d = f16_to_f32(b.d);
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<int8_t>(d > 0 ? clamp_round(step[s] / d, 0, 127) : 0);
  std::memset(b.ql, 0, sizeof b.ql);
  std::memset(b.qh, 0, sizeof b.qh);
  for (int h = 0; h < 2; ++h)
    for (int t = 0; t < 4; ++t)
      for (int l = 0; l < 32; ++l) {
        const int i = 128 * h + 32 * t + l;
        const float ds = d * b.scales[i / 16];
        const int q = (ds > 0 ? clamp_round(x[i] / ds, -32, 31) : 0) + 32;
        b.ql[64 * h + 32 * (t & 1) + l] |= static_cast<uint8_t>((q & 15) << (4 * (t >> 1)));
        b.qh[32 * h + l] |= static_cast<uint8_t>((q >> 4) << (2 * t));
      }
}

// q5_0 / q5_1: the fifth bit of value i is bit i of qh (little-endian).
template <class Block>
int q5_value(const Block& b, int i) {
  uint32_t qh;
  std::memcpy(&qh, b.qh, 4);
  const int nibble = i < kQuantBlock / 2 ? b.qs[i] & 15 : b.qs[i - kQuantBlock / 2] >> 4;
  return nibble | static_cast<int>((qh >> i) & 1u) << 4;
}

// q4_0 / q4_1 / q5_0 / q5_1: the 32 integers of a block into its nibbles (and fifth bits).
template <class Block>
void store_values(Block& b, const int (&q)[kQuantBlock]) {
  for (int j = 0; j < kQuantBlock / 2; ++j)
    b.qs[j] = static_cast<uint8_t>((q[j] & 15) | (q[j + kQuantBlock / 2] & 15) << 4);
  if constexpr (requires { b.qh; }) {
    uint32_t qh = 0;
    for (int i = 0; i < kQuantBlock; ++i) qh |= static_cast<uint32_t>(q[i] >> 4 & 1) << i;
    std::memcpy(b.qh, &qh, 4);
  }
}

// q4_0 / q5_0 (16 or 32 levels): d = the signed value of largest magnitude over -levels/2, q = x / d + levels/2.
template <class Block>
void quantize_abs_max(const float* src, void* dst, int64_t n) {
  constexpr bool kFifthBit = requires(Block b) { b.qh; };
  constexpr int levels = kFifthBit ? 32 : 16;
  auto* b = static_cast<Block*>(dst);
  for (int64_t k = 0; k < n / kQuantBlock; ++k) {
    const float* x = src + k * kQuantBlock;
    float amax = 0, max = 0;
    for (int j = 0; j < kQuantBlock; ++j)
      if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), max = x[j];
    const float d = max / -static_cast<float>(levels / 2), id = d != 0 ? 1.f / d : 0.f;
    b[k].d = f32_to_f16(d);
    int q[kQuantBlock];
    for (int j = 0; j < kQuantBlock; ++j)
      q[j] = std::min(levels - 1, static_cast<int>(x[j] * id + (levels / 2 + 0.5f)));
    store_values(b[k], q);
  }
}

// q4_1 / q5_1: the block's [min, max] in 15 or 31 steps.
template <class Block>
void quantize_min_max(const float* src, void* dst, int64_t n) {
  constexpr bool kFifthBit = requires(Block b) { b.qh; };
  constexpr int levels = kFifthBit ? 32 : 16;
  auto* b = static_cast<Block*>(dst);
  for (int64_t k = 0; k < n / kQuantBlock; ++k) {
    const float* x = src + k * kQuantBlock;
    float mn = x[0], mx = x[0];
    for (int j = 1; j < kQuantBlock; ++j) mn = std::min(mn, x[j]), mx = std::max(mx, x[j]);
    const float d = (mx - mn) / static_cast<float>(levels - 1), id = d != 0 ? 1.f / d : 0.f;
    b[k].d = f32_to_f16(d);
    b[k].m = f32_to_f16(mn);
    int q[kQuantBlock];
    for (int j = 0; j < kQuantBlock; ++j) q[j] = std::min(levels - 1, static_cast<int>((x[j] - mn) * id + 0.5f));
    store_values(b[k], q);
  }
}

template <class Block>
void dequant_blocks(const void* src, float* dst, int64_t n, void (*f)(const Block&, float*)) {
  for (int64_t k = 0; k < n / kSuperBlock; ++k) f(static_cast<const Block*>(src)[k], dst + k * kSuperBlock);
}

template <class Block>
void quantize_blocks(const float* src, void* dst, int64_t n, void (*f)(const float*, Block&)) {
  for (int64_t k = 0; k < n / kSuperBlock; ++k) f(src + k * kSuperBlock, static_cast<Block*>(dst)[k]);
}

}  // namespace

void to_f32(DType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case DType::f32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
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
    case DType::q4_K: return dequant_blocks<BlockQ4_K>(src, dst, n, dequant_k);
    case DType::q5_K: return dequant_blocks<BlockQ5_K>(src, dst, n, dequant_k);
    case DType::q6_K: return dequant_blocks<BlockQ6_K>(src, dst, n, dequant_q6_K);
    case DType::q5_0: {
      auto* b = static_cast<const BlockQ5_0*>(src);
      for (int64_t k = 0; k < n / kQuantBlock; ++k) {
        const float d = f16_to_f32(b[k].d);
        for (int i = 0; i < kQuantBlock; ++i) dst[k * kQuantBlock + i] = d * static_cast<float>(q5_value(b[k], i) - 16);
      }
      return;
    }
    case DType::q5_1: {
      auto* b = static_cast<const BlockQ5_1*>(src);
      for (int64_t k = 0; k < n / kQuantBlock; ++k) {
        const float d = f16_to_f32(b[k].d), m = f16_to_f32(b[k].m);
        for (int i = 0; i < kQuantBlock; ++i) dst[k * kQuantBlock + i] = d * static_cast<float>(q5_value(b[k], i)) + m;
      }
      return;
    }
    case DType::q4_0_r16:
    case DType::q8_0_r16:
    case DType::q4_1_r16:
    case DType::q4_K_r16:
    case DType::q5_K_r16:
    case DType::q6_K_r16:
    case DType::q2_K_r16:
    case DType::q3_K_r16:
    case DType::iq4_nl_r16: throw_interleaved("to_f32", t);
    case DType::q2_K: return dequant_blocks<BlockQ2_K>(src, dst, n, dequant_q2_K);
    case DType::q3_K: return dequant_blocks<BlockQ3_K>(src, dst, n, dequant_q3_K);
    case DType::iq4_nl: return dequant_iq4_nl(src, dst, n);
  }
}

void from_f32(DType t, const float* src, void* dst, int64_t n) {
  switch (t) {
    case DType::f32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
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
    case DType::q4_0: return quantize_abs_max<BlockQ4_0>(src, dst, n);
    case DType::q4_1: return quantize_min_max<BlockQ4_1>(src, dst, n);
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
    case DType::q4_K: return quantize_blocks<BlockQ4_K>(src, dst, n, quantize_k);
    case DType::q5_K: return quantize_blocks<BlockQ5_K>(src, dst, n, quantize_k);
    case DType::q6_K: return quantize_blocks<BlockQ6_K>(src, dst, n, quantize_q6_K);
    case DType::q5_0: return quantize_abs_max<BlockQ5_0>(src, dst, n);
    case DType::q5_1: return quantize_min_max<BlockQ5_1>(src, dst, n);
    case DType::q4_0_r16:
    case DType::q8_0_r16:
    case DType::q4_1_r16:
    case DType::q4_K_r16:
    case DType::q5_K_r16:
    case DType::q6_K_r16:
    case DType::q2_K_r16:
    case DType::q3_K_r16:
    case DType::iq4_nl_r16: throw_interleaved("from_f32", t);
    case DType::q2_K: return quantize_blocks<BlockQ2_K>(src, dst, n, quantize_q2_K);
    case DType::q3_K: return quantize_blocks<BlockQ3_K>(src, dst, n, quantize_q3_K);
    case DType::iq4_nl: return quantize_iq4_nl(src, dst, n);
  }
}

}  // namespace corolla

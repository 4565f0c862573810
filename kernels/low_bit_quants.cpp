#include "kernels/low_bit_quants.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace corolla {
namespace {

int clamp_round(float v, int lo, int hi) { return std::clamp(static_cast<int>(std::lround(v)), lo, hi); }

// Where value i (< 256) of a q2_K / q3_K super-block keeps its low two bits: qs[32h + l] >> 2t for i = 128h + 32t + l.
int low_bits(const uint8_t* qs, int i) { return qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32)) & 3; }
void set_low_bits(uint8_t* qs, int i, int q) {
  qs[32 * (i / 128) + i % 32] |= static_cast<uint8_t>((q & 3) << (2 * ((i % 128) / 32)));
}
// q3_K's third bit of value i: bit 4h + t of hmask[l].
int high_bit(const uint8_t* hmask, int i) { return hmask[i % 32] >> (i / 32) & 1; }

// The signed value of largest magnitude among n.
float signed_max(const float* x, int n) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), max = x[i];
  return max;
}

int nearest_iq4_nl(float v) {
  int best = 0;
  for (int q = 1; q < 16; ++q)
    if (std::fabs(v - kIq4nlValues[q]) < std::fabs(v - kIq4nlValues[best])) best = q;
  return best;
}

}  // namespace

// Both products are exact in f32 (an f16 times a 4-bit integer, times a 2-bit one): the one rounding is the
// subtraction's, as in gguf-py's dequantize.
void dequant_q2_K(const BlockQ2_K& b, float* y) {
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  for (int i = 0; i < kSuperBlock; ++i) {
    const uint8_t sc = b.scales[i / 16];
    y[i] = d * static_cast<float>(sc & 15) * static_cast<float>(low_bits(b.qs, i)) - dmin * static_cast<float>(sc >> 4);
  }
}

void dequant_q3_K(const BlockQ3_K& b, float* y) {
  const float d = f16_to_f32(b.d);
  for (int i = 0; i < kSuperBlock; ++i) {
    const int q = low_bits(b.qs, i) | high_bit(b.hmask, i) << 2;
    y[i] = d * static_cast<float>(q3_k_scale(b.scales, i / 16) - 32) * static_cast<float>(q - 4);
  }
}

void dequant_iq4_nl(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockIQ4_NL*>(src);
  for (int64_t k = 0; k < n / kQuantBlock; ++k) {
    const float d = f16_to_f32(b[k].d);
    float* o = dst + k * kQuantBlock;
    for (int j = 0; j < kQuantBlock / 2; ++j) {
      o[j] = d * static_cast<float>(kIq4nlValues[b[k].qs[j] & 15]);
      o[j + kQuantBlock / 2] = d * static_cast<float>(kIq4nlValues[b[k].qs[j] >> 4]);
    }
  }
}

// Each sub-block of 16 spans [min(0, lowest), highest] in 3 steps; its step and -min become 4-bit multiples of d
// and dmin.
void quantize_q2_K(const float* x, BlockQ2_K& b) {
  float step[16], low[16];
  for (int j = 0; j < 16; ++j) {
    float mn = 0, mx = 0;
    for (int l = 0; l < 16; ++l) mn = std::min(mn, x[16 * j + l]), mx = std::max(mx, x[16 * j + l]);
    step[j] = (mx - mn) / 3.f;
    low[j] = -mn;
  }
  b.d = f32_to_f16(*std::max_element(step, step + 16) / 15.f);
  b.dmin = f32_to_f16(*std::max_element(low, low + 16) / 15.f);
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  std::memset(b.qs, 0, sizeof b.qs);
  for (int j = 0; j < 16; ++j) {
    const int sc = d > 0 ? clamp_round(step[j] / d, 0, 15) : 0;
    const int m = dmin > 0 ? clamp_round(low[j] / dmin, 0, 15) : 0;
    b.scales[j] = static_cast<uint8_t>(sc | m << 4);
    const float ds = d * static_cast<float>(sc), dm = dmin * static_cast<float>(m);
    for (int l = 0; l < 16; ++l)
      set_low_bits(b.qs, 16 * j + l, ds > 0 ? clamp_round((x[16 * j + l] + dm) / ds, 0, 3) : 0);
  }
}

// Each sub-block of 16 gets a signed step that maps its value of largest magnitude to level -4; the steps become
// 6-bit signed multiples (-32..31) of d.
void quantize_q3_K(const float* x, BlockQ3_K& b) {
  float step[16];
  for (int j = 0; j < 16; ++j) step[j] = signed_max(x + 16 * j, 16) / -4.f;
  b.d = f32_to_f16(signed_max(step, 16) / -32.f);
  const float d = f16_to_f32(b.d);
  std::memset(b.scales, 0, sizeof b.scales);
  std::memset(b.qs, 0, sizeof b.qs);
  std::memset(b.hmask, 0, sizeof b.hmask);
  for (int j = 0; j < 16; ++j) {
    const int sc = d != 0 ? clamp_round(step[j] / d, -32, 31) : 0;
    const int stored = sc + 32;
    b.scales[j % 8] |= static_cast<uint8_t>((stored & 15) << (j < 8 ? 0 : 4));
    b.scales[8 + j % 4] |= static_cast<uint8_t>((stored >> 4) << (2 * (j / 4)));
    const float ds = d * static_cast<float>(sc);
    for (int l = 0; l < 16; ++l) {
      const int i = 16 * j + l;
      const int q = (ds != 0 ? clamp_round(x[i] / ds, -4, 3) : 0) + 4;
      set_low_bits(b.qs, i, q);
      b.hmask[i % 32] |= static_cast<uint8_t>((q >> 2) << (i / 32));
    }
  }
}

// d maps the block's value of largest magnitude to the grid's -127, each value takes the nearest level, then d
// is refitted by least squares to those levels (kept when it lowers the error).
void quantize_iq4_nl(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<BlockIQ4_NL*>(dst);
  for (int64_t k = 0; k < n / kQuantBlock; ++k) {
    const float* x = src + k * kQuantBlock;
    auto fit = [&](float d, int(&q)[kQuantBlock]) {
      const float id = d != 0 ? 1.f / d : 0.f;
      float err = 0;
      for (int i = 0; i < kQuantBlock; ++i) {
        q[i] = nearest_iq4_nl(x[i] * id);
        const float e = x[i] - f16_to_f32(f32_to_f16(d)) * static_cast<float>(kIq4nlValues[q[i]]);
        err += e * e;
      }
      return err;
    };
    int q[kQuantBlock], refit_q[kQuantBlock];
    float d = signed_max(x, kQuantBlock) / -127.f;
    const float err = fit(d, q);
    double xv = 0, vv = 0;
    for (int i = 0; i < kQuantBlock; ++i) {
      xv += static_cast<double>(x[i]) * kIq4nlValues[q[i]];
      vv += static_cast<double>(kIq4nlValues[q[i]]) * kIq4nlValues[q[i]];
    }
    if (vv > 0) {
      const auto refit = static_cast<float>(xv / vv);
      if (fit(refit, refit_q) < err) d = refit, std::copy(refit_q, refit_q + kQuantBlock, q);
    }
    b[k].d = f32_to_f16(d);
    for (int j = 0; j < kQuantBlock / 2; ++j) b[k].qs[j] = static_cast<uint8_t>(q[j] | q[j + kQuantBlock / 2] << 4);
  }
}

}  // namespace corolla

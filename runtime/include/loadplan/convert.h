/*===- convert.h - Element conversions of converting writes ------*- C++ -*-===*\
 *
 * What a converting write (plan_format.h) does to each element, written once
 * for the CPU executor, the CUDA kernel (nvcc) and the tests: the floating
 * types bfloat16, float16, float32, float8_e4m3fn and float8_e5m2 to one
 * another, exactly as torch's CPU `Tensor.to(dtype)` does it:
 *
 * - a source element is first widened to float32, exactly (every value of
 *   the four narrower types is a float32);
 * - float32 is then rounded to the destination once, to nearest, ties to
 *   even, subnormals included;
 * - past the destination's largest finite value: infinity, except for
 *   float8_e4m3fn, which has none and saturates to +-448 (infinities too);
 * - NaN: float8 destinations get +-0x7f; float16 keeps the sign and the top
 *   payload bits, quiet (sign | 0x7e00 | payload >> 13); bfloat16 gets 0xffff
 *   from a float32 source and 0x7fc0 from the others; float16 and float8
 *   sources widen a NaN quiet, bfloat16 keeps its bits.
 *
 * The NaN rules are those of torch's CPU kernels, which give the same bits
 * wherever an element lies in its tensor for every pair but float16 to
 * float32 (see isConvertible): that one is no write's. widen() still
 * widens float16 as the vectorized path does, on the way to the others.
 *
 * Header only, C++ (used from C++ and CUDA translation units).
 *
\*===----------------------------------------------------------------------===*/

#ifndef LOADPLAN_CONVERT_H
#define LOADPLAN_CONVERT_H

#include "loadplan/plan_format.h"

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define LOADPLAN_CONVERT_HD __host__ __device__
#else
#define LOADPLAN_CONVERT_HD
#endif

namespace loadplan_convert {

/// Whether a write may convert elements of `from` into `to`: both among
/// the five floating types above, and different, except float16 to
/// float32: torch's CPU kernel widens a float16 NaN to other bits in the
/// vectorized body of a tensor (sign | 0x7fc00000 | payload << 13) than in
/// its tail (0x7fffffff), so no write can give its bytes wherever the
/// element lies.
LOADPLAN_CONVERT_HD inline bool isConvertible(uint32_t from, uint32_t to) {
  auto ok = [](uint32_t d) {
    return d == LOADPLAN_DTYPE_BFLOAT16 || d == LOADPLAN_DTYPE_FLOAT16 ||
           d == LOADPLAN_DTYPE_FLOAT32 || d == LOADPLAN_DTYPE_FLOAT8_E4M3FN ||
           d == LOADPLAN_DTYPE_FLOAT8_E5M2;
  };
  if (from == LOADPLAN_DTYPE_FLOAT16 && to == LOADPLAN_DTYPE_FLOAT32)
    return false;
  return from != to && ok(from) && ok(to);
}

/// A float format narrower than float32: exponent and mantissa bits, bias.
struct SmallFloat {
  int expBits, mantBits, bias;
  uint32_t maxFinite; // largest finite code, sign excluded
  bool hasInf;        // else overflow and infinities saturate to maxFinite
};

LOADPLAN_CONVERT_HD inline SmallFloat smallFloat(uint32_t dtype) {
  switch (dtype) {
  case LOADPLAN_DTYPE_BFLOAT16:
    return {8, 7, 127, 0x7f7f, true};
  case LOADPLAN_DTYPE_FLOAT16:
    return {5, 10, 15, 0x7bff, true};
  case LOADPLAN_DTYPE_FLOAT8_E4M3FN:
    return {4, 3, 7, 0x7e, false};
  default: // LOADPLAN_DTYPE_FLOAT8_E5M2
    return {5, 2, 15, 0x7b, true};
  }
}

/// Index of the highest set bit of `x` (> 0).
LOADPLAN_CONVERT_HD inline int highBit(uint32_t x) {
#if defined(__CUDA_ARCH__)
  return 31 - __clz(x);
#else
  return 31 - __builtin_clz(x);
#endif
}

/// The float32 bits of a code of `dtype` (exact; NaN as described above).
LOADPLAN_CONVERT_HD inline uint32_t widen(uint32_t dtype, uint32_t code) {
  if (dtype == LOADPLAN_DTYPE_FLOAT32)
    return code;
  if (dtype == LOADPLAN_DTYPE_BFLOAT16)
    return code << 16;
  SmallFloat f = smallFloat(dtype);
  int width = 1 + f.expBits + f.mantBits;
  uint32_t sign = (code >> (width - 1)) & 1u;
  uint32_t exp = (code >> f.mantBits) & ((1u << f.expBits) - 1);
  uint32_t mant = code & ((1u << f.mantBits) - 1);
  uint32_t out = sign << 31;
  bool special = f.hasInf ? exp == (1u << f.expBits) - 1
                          : (code & ((1u << (width - 1)) - 1)) > f.maxFinite;
  if (special) {
    if (f.hasInf && mant == 0)
      return out | 0x7f800000u;
    return out | 0x7fc00000u | (mant << (23 - f.mantBits));
  }
  // value = m * 2^q
  int qmin = 1 - f.bias - f.mantBits;
  uint32_t m = exp ? (mant | (1u << f.mantBits)) : mant;
  int q = exp ? qmin + int(exp) - 1 : qmin;
  if (m == 0)
    return out;
  int n = highBit(m);
  uint32_t biased = uint32_t(q + n + 127);
  return out | (biased << 23) | ((m << (23 - n)) & 0x7fffffu);
}

/// Rounds float32 bits to a code of `dtype`; `from` is the write's source
/// dtype (it decides bfloat16's NaN).
LOADPLAN_CONVERT_HD inline uint32_t narrow(uint32_t dtype, uint32_t from,
                                           uint32_t x) {
  if (dtype == LOADPLAN_DTYPE_FLOAT32)
    return x;
  SmallFloat f = smallFloat(dtype);
  int width = 1 + f.expBits + f.mantBits;
  uint32_t sign = (x >> 31) << (width - 1);
  uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) { // NaN
    if (dtype == LOADPLAN_DTYPE_BFLOAT16)
      return from == LOADPLAN_DTYPE_FLOAT32 ? 0xffffu : 0x7fc0u;
    if (dtype == LOADPLAN_DTYPE_FLOAT16)
      return sign | 0x7e00u | ((a & 0x7fffffu) >> 13);
    return sign | 0x7fu;
  }
  uint32_t infCode = f.hasInf ? ((1u << f.expBits) - 1) << f.mantBits
                              : f.maxFinite;
  if (a == 0x7f800000u)
    return sign | infCode;
  if (a == 0)
    return sign;
  // value = sig * 2^ex
  uint32_t exp32 = a >> 23;
  uint32_t sig = exp32 ? (a & 0x7fffffu) | 0x800000u : a;
  int ex = exp32 ? int(exp32) - 150 : -149;
  int qmin = 1 - f.bias - f.mantBits;
  int q = ex + highBit(sig) - f.mantBits;
  if (q < qmin)
    q = qmin;
  int shift = q - ex;
  uint32_t m;
  if (shift <= 0) {
    m = sig << -shift;
  } else if (shift > 25) {
    m = 0;
  } else {
    uint32_t kept = sig >> shift;
    uint32_t rest = sig & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    m = kept + (rest > half || (rest == half && (kept & 1u)));
  }
  // The code's bits count in quanta of 2^qmin (a carry into the exponent
  // falls out of the same sum).
  uint64_t code = (uint64_t(q - qmin) << f.mantBits) + m;
  if (code > f.maxFinite)
    return sign | infCode;
  return sign | uint32_t(code);
}

/// Bytes per element of one of the five types (plan_format.h's table, for
/// device code, which cannot call loadplan_dtype_size).
LOADPLAN_CONVERT_HD inline size_t elementSize(uint32_t dtype) {
  return dtype == LOADPLAN_DTYPE_FLOAT32                                 ? 4
         : dtype == LOADPLAN_DTYPE_BFLOAT16 || dtype == LOADPLAN_DTYPE_FLOAT16 ? 2
                                                                         : 1;
}

/// Converts one element at `src` (of `from`) into `dst` (of `to`).
LOADPLAN_CONVERT_HD inline void convertElement(uint8_t *dst, uint32_t to,
                                               const uint8_t *src,
                                               uint32_t from) {
  uint32_t code = 0;
  size_t inSize = elementSize(from), outSize = elementSize(to);
  // Little-endian hosts and devices only, as everywhere in the runtime.
  memcpy(&code, src, inSize);
  uint32_t out = narrow(to, from, widen(from, code));
  memcpy(dst, &out, outSize);
}

/// `count` elements, `srcStride` and `dstStride` bytes apart.
LOADPLAN_CONVERT_HD inline void convertRun(uint8_t *dst, int64_t dstStride,
                                           uint32_t to, const uint8_t *src,
                                           int64_t srcStride, uint32_t from,
                                           int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    convertElement(dst + i * dstStride, to, src + i * srcStride, from);
}

} // namespace loadplan_convert

#endif /* LOADPLAN_CONVERT_H */

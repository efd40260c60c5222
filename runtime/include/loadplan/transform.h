/*===- transform.h - The transforms of transforming writes ------*- C++ -*-===*\
 *
 * What each transform of LOADPLAN_TRANSFORMS (plan_format.h) computes: one
 * output word of an atom from the atom's elements in the source. Header
 * only, with no dependencies, so that the CPU executor, the CUDA kernel
 * (compiled as __host__ __device__) and the tests compute it with the same
 * code. Every function is a plain function of its arguments.
 *
 * MARLIN_W4. The source is a pack-quantized 4-bit weight, int32 [N, K/8]:
 * row n is output channel n, word j holds the values of K 8j to 8j + 7,
 * value k in bits 4 * (k % 8). An atom is 16 rows (n0 to n0 + 15) by 2
 * words (K values k0 to k0 + 15). Its 32 output words are those the 32
 * lanes of a warp hold in vLLM's Marlin kernels (gptq_marlin_repack): word
 * `lane = 4c + r` (c in 0..7, r in 0..3) holds in nibble 4s + 2b + h (s, b,
 * h in {0, 1}) the value of row n0 + 8b + c and K k0 + 8h + 2r + s. In
 * Marlin's [K/16, 2N] words for a whole [N, K] matrix, the atom of K tile t
 * and 16 rows q = 4m + w lands in row t at words 128m + 4 * lane + w.
 *
\*===----------------------------------------------------------------------===*/

#ifndef LOADPLAN_TRANSFORM_H
#define LOADPLAN_TRANSFORM_H

#include "loadplan/plan_format.h"

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define LOADPLAN_TRANSFORM_HD __host__ __device__
#else
#define LOADPLAN_TRANSFORM_HD
#endif

namespace loadplan_transform {

/// A transform's atom as LOADPLAN_TRANSFORMS has it: `rows` x `cols`
/// elements of `dtype` that become `words` elements.
struct Atom {
  bool known = false; // false (the rest 0) for 0 or an unknown code
  uint32_t dtype = 0;
  int64_t rows = 0, cols = 0, words = 0;
};

/// The atom of `transform` (host code).
inline Atom atomOf(uint32_t transform) {
  Atom a;
  a.known = loadplan_transform_atom(transform, &a.dtype, &a.rows, &a.cols,
                                    &a.words) != 0;
  return a;
}

/// The little-endian word at `p`, which need not be 4-byte aligned (a
/// source tensor may be a view into a byte buffer, such as a trainer's
/// flattened bucket of mixed dtypes).
LOADPLAN_TRANSFORM_HD inline uint32_t loadWord(const uint8_t *p) {
#if defined(__CUDA_ARCH__)
  if ((reinterpret_cast<uintptr_t>(p) & 3u) == 0)
    return *reinterpret_cast<const uint32_t *>(p);
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 |
         uint32_t(p[3]) << 24;
#else
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
#endif
}

/// Output word `lane` (0 to 31) of the MARLIN_W4 atom whose first element
/// is at `src`, its rows `rowStride` bytes apart and its words `colStride`.
LOADPLAN_TRANSFORM_HD inline uint32_t marlinW4Word(const uint8_t *src,
                                                   int64_t rowStride,
                                                   int64_t colStride,
                                                   unsigned lane) {
  unsigned c = lane >> 2, r = lane & 3;
  uint32_t out = 0;
  for (unsigned b = 0; b < 2; ++b)
    for (unsigned h = 0; h < 2; ++h) {
      uint32_t word = loadWord(src + int64_t(8 * b + c) * rowStride +
                               int64_t(h) * colStride);
      for (unsigned s = 0; s < 2; ++s)
        out |= ((word >> (4 * (2 * r + s))) & 0xFu) << (4 * (4 * s + 2 * b + h));
    }
  return out;
}

/// Output word `index` of transform `transform` applied to a box whose
/// first element is at `src`, its rows `rowStride` bytes apart and its
/// columns `colStride`, with `atomRows` atoms down its rows: the output is
/// the atoms in row-major order over (atom column, atom row), then each
/// atom's words. `transform` must be a code of LOADPLAN_TRANSFORMS.
/// The words of one atom of `transform`'s output.
LOADPLAN_TRANSFORM_HD inline int64_t atomWords(uint32_t transform) {
  switch (transform) {
  case LOADPLAN_TRANSFORM_MARLIN_W4:
  default:
    return 32;
  }
}

/// The first source byte of atom `atom` of a box read from `src`, rows
/// `rowStride` bytes apart and columns `colStride`, with `atomRows` atoms
/// down its rows (the output's atoms go down the rows first).
LOADPLAN_TRANSFORM_HD inline const uint8_t *
atomSource(uint32_t transform, const uint8_t *src, int64_t rowStride,
           int64_t colStride, int64_t atomRows, int64_t atom) {
  switch (transform) {
  case LOADPLAN_TRANSFORM_MARLIN_W4:
  default: {
    int64_t col = atom / atomRows, row = atom - col * atomRows;
    return src + row * 16 * rowStride + col * 2 * colStride;
  }
  }
}

/// Word `lane` of the atom whose first source byte is `at`.
LOADPLAN_TRANSFORM_HD inline uint32_t atomWord(uint32_t transform,
                                               const uint8_t *at,
                                               int64_t rowStride,
                                               int64_t colStride,
                                               unsigned lane) {
  switch (transform) {
  case LOADPLAN_TRANSFORM_MARLIN_W4:
  default:
    return marlinW4Word(at, rowStride, colStride, lane);
  }
}

/// Word `index` of the output of `transform` of the box at `src` (see
/// atomSource).
LOADPLAN_TRANSFORM_HD inline uint32_t transformWord(uint32_t transform,
                                                    const uint8_t *src,
                                                    int64_t rowStride,
                                                    int64_t colStride,
                                                    int64_t atomRows,
                                                    int64_t index) {
  int64_t lanes = atomWords(transform);
  return atomWord(transform,
                  atomSource(transform, src, rowStride, colStride, atomRows,
                             index / lanes),
                  rowStride, colStride, unsigned(index % lanes));
}

} // namespace loadplan_transform

#endif // LOADPLAN_TRANSFORM_H

/*===- plan_format.h - The binary load-plan file format ----------*- C -*-===*\
 *
 * One definition of the plan file, shared by the compiler (which writes it)
 * and the runtime (which reads it). Plain C, no dependencies.
 *
 * A plan file is a 40-byte header followed by a payload. Every integer is
 * little-endian; there is no padding.
 *
 *   header:  char magic[8] = "LOADPLAN"
 *            u32  version  = LOADPLAN_PLAN_VERSION
 *            u32  header_size = 40
 *            u64  fingerprint   (of the target layout, see below)
 *            u64  payload_size  (bytes after the header)
 *            u64  checksum      (loadplan_checksum64 of the payload)
 *
 *   payload: u32 num_storages, then per storage:  u64 size_bytes
 *            u32 num_targets,  then per target:
 *                str module, str tensor, u32 storage, u64 byte_offset,
 *                u32 dtype, u32 rank, i64 shape[rank], i64 stride[rank]
 *            u32 num_entries, then per entry (checkpoint name):
 *                str name, u8 kind, u32 dtype, u32 rank, i64 shape[rank],
 *                u8 has_reason, [str reason],
 *                u32 num_boxes, per box: rank x (i64 start, i64 stop),
 *                u32 num_writes, per write:
 *                    u32 target, u32 box (index into this entry's boxes),
 *                    u32 convert_to, u32 transform, i64 region_offset,
 *                    u32 region_rank,
 *                    i64 region_shape[region_rank],
 *                    i64 region_stride[region_rank]
 *
 *   str:     u32 length, then that many bytes (UTF-8, no terminator)
 *
 * A write's convert_to is 0 when it copies bytes, else the dtype code it
 * converts the entry's elements into (convert.h says how; another dtype
 * than the entry's). Regions are in elements of the dtype written (the
 * entry's, or convert_to), relative to the target's first byte (its
 * byte_offset in its storage). Boxes, and the bytes an update sends, are in
 * the entry's dtype.
 *
 * A write's transform is 0 when the box's elements land as they are, else
 * a code of LOADPLAN_TRANSFORMS: the box, in the entry's coordinates, is
 * cut into the transform's atoms and each atom written as the engine's
 * kernel lays it out (transform.h says how). Its region then splits the
 * transform's output shape (the atoms in order, then the words of each)
 * instead of the box's; a transforming write does not convert.
 *
 * Version 2 added convert_to; version 3 made the checksum XXH64 (it was
 * FNV-1a, a byte at a time: a tenth of a compile at 50,000 names); version
 * 4 added transform. Plans
 * of earlier versions are refused (compile them again).
 *
 * The fingerprint is loadplan_fnv1a64 over, for each target in order: its
 * module and tensor (each as u64 length then bytes), then storage,
 * byte_offset, dtype, rank, shape[], stride[] (each as a u64). The runtime
 * recomputes it from the layout it is bound to and refuses a mismatch.
 *
\*===----------------------------------------------------------------------===*/

#ifndef LOADPLAN_PLAN_FORMAT_H
#define LOADPLAN_PLAN_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LOADPLAN_PLAN_MAGIC "LOADPLAN"
#define LOADPLAN_PLAN_MAGIC_SIZE 8
#define LOADPLAN_PLAN_VERSION 4u
#define LOADPLAN_PLAN_HEADER_SIZE 40u

/* The kinds of a checkpoint name: the one table of them. Each row is
 *   X(ENUM, code, name)
 * and the enum, loadplan_kind_name and the names the compiler's JSON, the
 * reports and Python (through the native module) use are generated from
 * it. Codes are stable: they are stored in plan files.
 *   DIRECT:   its boxes are copied into live memory
 *   FALLBACK: sent in full through load_weights
 *   UNNEEDED: this rank needs none of it */
#define LOADPLAN_KINDS(X)                                                     \
  X(DIRECT, 0, "direct")                                                      \
  X(FALLBACK, 1, "fallback")                                                  \
  X(UNNEEDED, 2, "unneeded")

typedef enum loadplan_entry_kind_t {
#define LOADPLAN_KIND_ENUM_(e, code, name) LOADPLAN_KIND_##e = code,
  LOADPLAN_KINDS(LOADPLAN_KIND_ENUM_)
#undef LOADPLAN_KIND_ENUM_
} loadplan_entry_kind_t;

/* The number of kinds; their codes are 0 to LOADPLAN_KIND_COUNT_ - 1. */
enum {
#define LOADPLAN_KIND_ONE_(e, code, name) +1
  LOADPLAN_KIND_COUNT_ = 0 LOADPLAN_KINDS(LOADPLAN_KIND_ONE_)
#undef LOADPLAN_KIND_ONE_
};

/* The name of a kind ("direct", "fallback", "unneeded"); "invalid" for an
 * unknown code. */
static inline const char *loadplan_kind_name(uint32_t kind) {
  switch (kind) {
#define LOADPLAN_KIND_NAME_(e, code, name)                                     \
  case code:                                                                   \
    return name;
    LOADPLAN_KINDS(LOADPLAN_KIND_NAME_)
#undef LOADPLAN_KIND_NAME_
  default:
    return "invalid";
  }
}

/* The element types: the one table of them. Each row is
 *   X(ENUM, code, torch name, bytes per element, MLIR element type)
 * and everything else that names a dtype (the enum and functions below, the
 * compiler's and the importer's types, Python's torch dtypes through the
 * native module) is generated from it. Codes are stable: they are stored in
 * plan and schedule files. */
#define LOADPLAN_DTYPES(X)                                                    \
  X(BOOL, 1, "bool", 1, "i1")                                                 \
  X(UINT8, 2, "uint8", 1, "ui8")                                              \
  X(INT8, 3, "int8", 1, "i8")                                                 \
  X(INT16, 4, "int16", 2, "i16")                                              \
  X(INT32, 5, "int32", 4, "i32")                                              \
  X(INT64, 6, "int64", 8, "i64")                                              \
  X(FLOAT16, 7, "float16", 2, "f16")                                          \
  X(BFLOAT16, 8, "bfloat16", 2, "bf16")                                       \
  X(FLOAT32, 9, "float32", 4, "f32")                                          \
  X(FLOAT64, 10, "float64", 8, "f64")                                         \
  X(FLOAT8_E4M3FN, 11, "float8_e4m3fn", 1, "f8E4M3FN")                        \
  X(FLOAT8_E5M2, 12, "float8_e5m2", 1, "f8E5M2")                              \
  X(FLOAT8_E4M3FNUZ, 13, "float8_e4m3fnuz", 1, "f8E4M3FNUZ")                  \
  X(FLOAT8_E5M2FNUZ, 14, "float8_e5m2fnuz", 1, "f8E5M2FNUZ")                  \
  X(FLOAT8_E8M0FNU, 15, "float8_e8m0fnu", 1, "f8E8M0FNU")                     \
  X(COMPLEX64, 16, "complex64", 8, "complex<f32>")                            \
  X(COMPLEX128, 17, "complex128", 16, "complex<f64>")                         \
  X(UINT16, 18, "uint16", 2, "ui16")                                          \
  X(UINT32, 19, "uint32", 4, "ui32")                                          \
  X(UINT64, 20, "uint64", 8, "ui64")

typedef enum loadplan_dtype_t {
  LOADPLAN_DTYPE_INVALID = 0,
#define LOADPLAN_DTYPE_ENUM_(e, code, name, bytes, mlir) LOADPLAN_DTYPE_##e = code,
  LOADPLAN_DTYPES(LOADPLAN_DTYPE_ENUM_)
#undef LOADPLAN_DTYPE_ENUM_
  LOADPLAN_DTYPE_COUNT_ = 21,
} loadplan_dtype_t;

/* Bytes per element of `dtype`; 0 for an unknown code. */
static inline size_t loadplan_dtype_size(uint32_t dtype) {
  switch (dtype) {
#define LOADPLAN_DTYPE_SIZE_(e, code, name, bytes, mlir)                       \
  case code:                                                                   \
    return bytes;
    LOADPLAN_DTYPES(LOADPLAN_DTYPE_SIZE_)
#undef LOADPLAN_DTYPE_SIZE_
  default:
    return 0;
  }
}

/* torch's name of a dtype code ("bfloat16", "float8_e4m3fn", ...); "invalid"
 * for an unknown code. */
static inline const char *loadplan_dtype_name(uint32_t dtype) {
  switch (dtype) {
#define LOADPLAN_DTYPE_NAME_(e, code, name, bytes, mlir)                       \
  case code:                                                                   \
    return name;
    LOADPLAN_DTYPES(LOADPLAN_DTYPE_NAME_)
#undef LOADPLAN_DTYPE_NAME_
  default:
    return "invalid";
  }
}

/* The MLIR element type of a dtype code as IR text spells it ("bf16",
 * "f8E4M3FN", "complex<f32>", ...); "" for an unknown code. */
static inline const char *loadplan_dtype_mlir_type(uint32_t dtype) {
  switch (dtype) {
#define LOADPLAN_DTYPE_MLIR_(e, code, name, bytes, mlir)                       \
  case code:                                                                   \
    return mlir;
    LOADPLAN_DTYPES(LOADPLAN_DTYPE_MLIR_)
#undef LOADPLAN_DTYPE_MLIR_
  default:
    return "";
  }
}

/* The transforms a write may apply (a write's `transform`): the one table
 * of them. Each row is
 *   X(ENUM, code, name, entry dtype, atom rows, atom columns, atom words)
 * An atom is `atom rows` x `atom columns` elements of a 2-d box (rows and
 * columns of the entry, counted from the box's first); it becomes `atom
 * words` elements of the same dtype. Codes are stable: they are stored in
 * plan files.
 *   MARLIN_W4: a pack-quantized 4-bit weight, int32 [N, K/8] (8 values of K
 *     per word), as vLLM's Marlin kernels read it (gptq_marlin_repack):
 *     each 16 rows of N by 2 words of K become the 32 words a warp's lanes
 *     hold. transform.h has the bit layout. */
#define LOADPLAN_TRANSFORMS(X)                                                \
  X(MARLIN_W4, 1, "marlin_w4", LOADPLAN_DTYPE_INT32, 16, 2, 32)

typedef enum loadplan_transform_t {
  LOADPLAN_TRANSFORM_NONE = 0,
#define LOADPLAN_TRANSFORM_ENUM_(e, code, name, dtype, rows, cols, words)      \
  LOADPLAN_TRANSFORM_##e = code,
  LOADPLAN_TRANSFORMS(LOADPLAN_TRANSFORM_ENUM_)
#undef LOADPLAN_TRANSFORM_ENUM_
} loadplan_transform_t;

/* The name of a transform code ("marlin_w4"); "none" for 0, "invalid" for
 * an unknown code. */
static inline const char *loadplan_transform_name(uint32_t transform) {
  switch (transform) {
  case 0:
    return "none";
#define LOADPLAN_TRANSFORM_NAME_(e, code, name, dtype, rows, cols, words)      \
  case code:                                                                   \
    return name;
    LOADPLAN_TRANSFORMS(LOADPLAN_TRANSFORM_NAME_)
#undef LOADPLAN_TRANSFORM_NAME_
  default:
    return "invalid";
  }
}

/* The shape of a transform's atom and the entry dtype it reads; false for
 * 0 or an unknown code. */
static inline int loadplan_transform_atom(uint32_t transform,
                                          uint32_t *out_dtype,
                                          int64_t *out_rows,
                                          int64_t *out_cols,
                                          int64_t *out_words) {
  switch (transform) {
#define LOADPLAN_TRANSFORM_ATOM_(e, code, name, dtype, rows, cols, words)      \
  case code:                                                                   \
    *out_dtype = dtype;                                                        \
    *out_rows = rows;                                                          \
    *out_cols = cols;                                                          \
    *out_words = words;                                                        \
    return 1;
    LOADPLAN_TRANSFORMS(LOADPLAN_TRANSFORM_ATOM_)
#undef LOADPLAN_TRANSFORM_ATOM_
  default:
    return 0;
  }
}

#define LOADPLAN_FNV1A64_INIT 0xcbf29ce484222325ull

/* FNV-1a, 64 bits, continuing from `hash` (start with LOADPLAN_FNV1A64_INIT). */
static inline uint64_t loadplan_fnv1a64(uint64_t hash, const void *data,
                                        size_t size) {
  const unsigned char *p = (const unsigned char *)data;
  for (size_t i = 0; i < size; ++i) {
    hash ^= p[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

/* Hashes `value` as 8 little-endian bytes. */
static inline uint64_t loadplan_fnv1a64_u64(uint64_t hash, uint64_t value) {
  unsigned char bytes[8];
  for (int i = 0; i < 8; ++i)
    bytes[i] = (unsigned char)(value >> (8 * i));
  return loadplan_fnv1a64(hash, bytes, 8);
}

/* Hashes a string as its u64 length then its bytes. */
static inline uint64_t loadplan_fnv1a64_str(uint64_t hash, const char *data,
                                            size_t size) {
  hash = loadplan_fnv1a64_u64(hash, (uint64_t)size);
  return loadplan_fnv1a64(hash, data, size);
}

/* The files' checksum: XXH64 with seed 0 (xxHash's 64-bit hash), over
 * four lanes of 8-byte words, so that it runs at memory speed rather than a
 * multiply per byte. */
static inline uint64_t loadplan_checksum64_rotl(uint64_t x, int r) {
  return (x << r) | (x >> (64 - r));
}

static inline uint64_t loadplan_checksum64_read64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = (v << 8) | p[i];
  return v;
}

static inline uint64_t loadplan_checksum64_round(uint64_t acc, uint64_t input) {
  acc += input * 0xC2B2AE3D27D4EB4Full;
  return loadplan_checksum64_rotl(acc, 31) * 0x9E3779B185EBCA87ull;
}

static inline uint64_t loadplan_checksum64_merge(uint64_t acc, uint64_t lane) {
  acc ^= loadplan_checksum64_round(0, lane);
  return acc * 0x9E3779B185EBCA87ull + 0x85EBCA77C2B2AE63ull;
}

static inline uint64_t loadplan_checksum64(const void *data, size_t size) {
  const uint64_t p1 = 0x9E3779B185EBCA87ull, p2 = 0xC2B2AE3D27D4EB4Full,
                 p3 = 0x165667B19E3779F9ull, p4 = 0x85EBCA77C2B2AE63ull,
                 p5 = 0x27D4EB2F165667C5ull;
  const unsigned char *p = (const unsigned char *)data;
  const unsigned char *end = p + size;
  uint64_t h;
  if (size >= 32) {
    uint64_t v1 = p1 + p2, v2 = p2, v3 = 0, v4 = 0 - p1;
    for (; end - p >= 32; p += 32) {
      v1 = loadplan_checksum64_round(v1, loadplan_checksum64_read64(p));
      v2 = loadplan_checksum64_round(v2, loadplan_checksum64_read64(p + 8));
      v3 = loadplan_checksum64_round(v3, loadplan_checksum64_read64(p + 16));
      v4 = loadplan_checksum64_round(v4, loadplan_checksum64_read64(p + 24));
    }
    h = loadplan_checksum64_rotl(v1, 1) + loadplan_checksum64_rotl(v2, 7) +
        loadplan_checksum64_rotl(v3, 12) + loadplan_checksum64_rotl(v4, 18);
    h = loadplan_checksum64_merge(h, v1);
    h = loadplan_checksum64_merge(h, v2);
    h = loadplan_checksum64_merge(h, v3);
    h = loadplan_checksum64_merge(h, v4);
  } else {
    h = p5;
  }
  h += (uint64_t)size;
  for (; end - p >= 8; p += 8) {
    h ^= loadplan_checksum64_round(0, loadplan_checksum64_read64(p));
    h = loadplan_checksum64_rotl(h, 27) * p1 + p4;
  }
  if (end - p >= 4) {
    uint64_t v = (uint64_t)p[0] | ((uint64_t)p[1] << 8) |
                 ((uint64_t)p[2] << 16) | ((uint64_t)p[3] << 24);
    h ^= v * p1;
    h = loadplan_checksum64_rotl(h, 23) * p2 + p3;
    p += 4;
  }
  for (; p < end; ++p) {
    h ^= (uint64_t)*p * p5;
    h = loadplan_checksum64_rotl(h, 11) * p1;
  }
  h ^= h >> 33;
  h *= p2;
  h ^= h >> 29;
  h *= p3;
  h ^= h >> 32;
  return h;
}

/* Adds one target to a fingerprint (see the file comment). */
static inline uint64_t
loadplan_fingerprint_target(uint64_t hash, const char *module,
                            size_t module_size, const char *tensor,
                            size_t tensor_size, uint32_t storage,
                            uint64_t byte_offset, uint32_t dtype, uint32_t rank,
                            const int64_t *shape, const int64_t *stride) {
  hash = loadplan_fnv1a64_str(hash, module, module_size);
  hash = loadplan_fnv1a64_str(hash, tensor, tensor_size);
  hash = loadplan_fnv1a64_u64(hash, storage);
  hash = loadplan_fnv1a64_u64(hash, byte_offset);
  hash = loadplan_fnv1a64_u64(hash, dtype);
  hash = loadplan_fnv1a64_u64(hash, rank);
  for (uint32_t k = 0; k < rank; ++k)
    hash = loadplan_fnv1a64_u64(hash, (uint64_t)shape[k]);
  for (uint32_t k = 0; k < rank; ++k)
    hash = loadplan_fnv1a64_u64(hash, (uint64_t)stride[k]);
  return hash;
}

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* LOADPLAN_PLAN_FORMAT_H */

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
 *            u64  checksum      (loadplan_fnv1a64 of the payload)
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
 *                    i64 region_offset, u32 region_rank,
 *                    i64 region_shape[region_rank],
 *                    i64 region_stride[region_rank]
 *
 *   str:     u32 length, then that many bytes (UTF-8, no terminator)
 *
 * Regions are in elements of the entry's dtype, relative to the target's
 * first byte (its byte_offset in its storage).
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
#define LOADPLAN_PLAN_VERSION 1u
#define LOADPLAN_PLAN_HEADER_SIZE 40u

/* Kinds of a checkpoint name. */
typedef enum loadplan_entry_kind_t {
  LOADPLAN_KIND_DIRECT = 0,   /* its boxes are copied into live memory */
  LOADPLAN_KIND_FALLBACK = 1, /* sent in full through load_weights */
  LOADPLAN_KIND_UNNEEDED = 2, /* this rank needs none of it */
} loadplan_entry_kind_t;

/* Element types, as torch names them. */
typedef enum loadplan_dtype_t {
  LOADPLAN_DTYPE_INVALID = 0,
  LOADPLAN_DTYPE_BOOL = 1,
  LOADPLAN_DTYPE_UINT8 = 2,
  LOADPLAN_DTYPE_INT8 = 3,
  LOADPLAN_DTYPE_INT16 = 4,
  LOADPLAN_DTYPE_INT32 = 5,
  LOADPLAN_DTYPE_INT64 = 6,
  LOADPLAN_DTYPE_FLOAT16 = 7,
  LOADPLAN_DTYPE_BFLOAT16 = 8,
  LOADPLAN_DTYPE_FLOAT32 = 9,
  LOADPLAN_DTYPE_FLOAT64 = 10,
  LOADPLAN_DTYPE_FLOAT8_E4M3FN = 11,
  LOADPLAN_DTYPE_FLOAT8_E5M2 = 12,
  LOADPLAN_DTYPE_FLOAT8_E4M3FNUZ = 13,
  LOADPLAN_DTYPE_FLOAT8_E5M2FNUZ = 14,
  LOADPLAN_DTYPE_FLOAT8_E8M0FNU = 15,
  LOADPLAN_DTYPE_COMPLEX64 = 16,
  LOADPLAN_DTYPE_COMPLEX128 = 17,
  LOADPLAN_DTYPE_UINT16 = 18,
  LOADPLAN_DTYPE_UINT32 = 19,
  LOADPLAN_DTYPE_UINT64 = 20,
  LOADPLAN_DTYPE_COUNT_ = 21,
} loadplan_dtype_t;

/* Bytes per element of `dtype`; 0 for an unknown code. */
static inline size_t loadplan_dtype_size(uint32_t dtype) {
  switch (dtype) {
  case LOADPLAN_DTYPE_BOOL:
  case LOADPLAN_DTYPE_UINT8:
  case LOADPLAN_DTYPE_INT8:
  case LOADPLAN_DTYPE_FLOAT8_E4M3FN:
  case LOADPLAN_DTYPE_FLOAT8_E5M2:
  case LOADPLAN_DTYPE_FLOAT8_E4M3FNUZ:
  case LOADPLAN_DTYPE_FLOAT8_E5M2FNUZ:
  case LOADPLAN_DTYPE_FLOAT8_E8M0FNU:
    return 1;
  case LOADPLAN_DTYPE_INT16:
  case LOADPLAN_DTYPE_UINT16:
  case LOADPLAN_DTYPE_FLOAT16:
  case LOADPLAN_DTYPE_BFLOAT16:
    return 2;
  case LOADPLAN_DTYPE_INT32:
  case LOADPLAN_DTYPE_UINT32:
  case LOADPLAN_DTYPE_FLOAT32:
    return 4;
  case LOADPLAN_DTYPE_INT64:
  case LOADPLAN_DTYPE_UINT64:
  case LOADPLAN_DTYPE_FLOAT64:
  case LOADPLAN_DTYPE_COMPLEX64:
    return 8;
  case LOADPLAN_DTYPE_COMPLEX128:
    return 16;
  default:
    return 0;
  }
}

/* torch's name of a dtype code ("bfloat16", "float8_e4m3fn", ...); "invalid"
 * for an unknown code. */
static inline const char *loadplan_dtype_name(uint32_t dtype) {
  static const char *const names[LOADPLAN_DTYPE_COUNT_] = {
      "invalid",       "bool",           "uint8",           "int8",
      "int16",         "int32",          "int64",           "float16",
      "bfloat16",      "float32",        "float64",         "float8_e4m3fn",
      "float8_e5m2",   "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
      "complex64",     "complex128",     "uint16",          "uint32",
      "uint64"};
  return dtype < LOADPLAN_DTYPE_COUNT_ ? names[dtype] : "invalid";
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

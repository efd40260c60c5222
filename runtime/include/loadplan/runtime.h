/*===- runtime.h - The loadplan runtime C API -------------------*- C -*-===*\
 *
 * Reads plan files written by the compiler, binds a plan to live tensors and
 * applies weight updates into them: a batch of full checkpoint tensors, or
 * only the boxes this rank needs. Plain C so that Python (ctypes or a native
 * module) and C++ engines call it alike; one call per update batch.
 *
 * Errors: every call that can fail returns a loadplan_status_t. NULL means
 * success; anything else is a status the caller owns, whose code and message
 * (which says what was wrong) it reads and then frees with
 * loadplan_status_free. No exception ever leaves this API; out of memory is a
 * status too.
 *
 * Lifetimes: a plan is reference counted (a binding retains its plan), so a
 * caller may release a plan while a binding of it lives. Strings and arrays a
 * query returns point into the plan and live as long as it does.
 *
 * All or nothing: an apply call checks the whole batch (names, kinds, dtypes,
 * shapes, boxes, duplicates, source memory) before it writes the first byte;
 * on any error it writes nothing. See docs/runtime.md.
 *
\*===----------------------------------------------------------------------===*/

#ifndef LOADPLAN_RUNTIME_H
#define LOADPLAN_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "loadplan/plan_format.h"

#if defined(_WIN32)
#define LOADPLAN_API
#else
#define LOADPLAN_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/*===----------------------------------------------------------------------===*
 * Status
 *===----------------------------------------------------------------------===*/

typedef enum loadplan_status_code_t {
  LOADPLAN_STATUS_OK = 0,
  /* A NULL pointer, an index out of range, a bad option. */
  LOADPLAN_STATUS_INVALID_ARGUMENT = 1,
  /* A name or file that does not exist. */
  LOADPLAN_STATUS_NOT_FOUND = 2,
  /* The plan bytes are malformed: truncated, bad magic/version/checksum, an
   * index or region out of bounds, overlapping destinations, ... */
  LOADPLAN_STATUS_INVALID_PLAN = 3,
  /* The bound layout is not the one the plan was made for. */
  LOADPLAN_STATUS_FINGERPRINT_MISMATCH = 4,
  /* An update batch was refused; nothing was written. */
  LOADPLAN_STATUS_INVALID_UPDATE = 5,
  /* Reading a file failed. */
  LOADPLAN_STATUS_IO_ERROR = 6,
  /* CUDA asked for but not built in, or no usable device. */
  LOADPLAN_STATUS_UNAVAILABLE = 7,
  LOADPLAN_STATUS_OUT_OF_MEMORY = 8,
  /* A CUDA call failed (after validation: see docs/runtime.md). */
  LOADPLAN_STATUS_DEVICE_ERROR = 9,
  /* A bug in the runtime. */
  LOADPLAN_STATUS_INTERNAL = 10,
} loadplan_status_code_t;

/* NULL is success. */
typedef struct loadplan_status_handle_t *loadplan_status_t;

/* The code of `status` (LOADPLAN_STATUS_OK for NULL). */
LOADPLAN_API loadplan_status_code_t loadplan_status_code(loadplan_status_t status);
/* Its message, NUL-terminated ("" for NULL); valid until it is freed. */
LOADPLAN_API const char *loadplan_status_message(loadplan_status_t status);
/* Frees `status`; NULL is fine. */
LOADPLAN_API void loadplan_status_free(loadplan_status_t status);
/* "ok", "invalid_argument", "invalid_plan", ... */
LOADPLAN_API const char *loadplan_status_code_name(loadplan_status_code_t code);

/*===----------------------------------------------------------------------===*
 * Plans
 *===----------------------------------------------------------------------===*/

typedef struct loadplan_plan_t loadplan_plan_t;

/* Parses and checks a plan file held in memory (the bytes are copied). */
LOADPLAN_API loadplan_status_t loadplan_plan_open_bytes(const void *data,
                                                        size_t size,
                                                        loadplan_plan_t **out_plan);
/* Reads and checks a plan file. */
LOADPLAN_API loadplan_status_t loadplan_plan_open_file(const char *path,
                                                       loadplan_plan_t **out_plan);
LOADPLAN_API void loadplan_plan_retain(loadplan_plan_t *plan);
/* Drops a reference; NULL is fine. */
LOADPLAN_API void loadplan_plan_release(loadplan_plan_t *plan);

typedef struct loadplan_plan_summary_t {
  uint64_t fingerprint;
  uint32_t num_storages;
  uint32_t num_targets;
  uint32_t num_entries;
  uint32_t num_direct;
  uint32_t num_fallback;
  uint32_t num_unneeded;
  uint64_t num_writes;
  /* Bytes of the boxes of direct names: what a sliced update sends. */
  uint64_t direct_bytes;
  /* Bytes of the fallback names: what still goes through load_weights. */
  uint64_t fallback_bytes;
} loadplan_plan_summary_t;

LOADPLAN_API loadplan_status_t
loadplan_plan_summary(const loadplan_plan_t *plan,
                      loadplan_plan_summary_t *out_summary);

/* The size in bytes the plan records for storage `index`. */
LOADPLAN_API loadplan_status_t loadplan_plan_storage(const loadplan_plan_t *plan,
                                                     uint32_t index,
                                                     uint64_t *out_size_bytes);

/* A live tensor the plan writes into, as the plan recorded it. */
typedef struct loadplan_target_info_t {
  const char *module; /* NUL-terminated; module_size excludes the NUL */
  size_t module_size;
  const char *tensor;
  size_t tensor_size;
  uint32_t storage;
  uint32_t dtype; /* loadplan_dtype_t */
  uint64_t byte_offset;
  uint32_t rank;
  const int64_t *shape;  /* rank values */
  const int64_t *stride; /* rank values, in elements */
} loadplan_target_info_t;

LOADPLAN_API loadplan_status_t loadplan_plan_target(const loadplan_plan_t *plan,
                                                    uint32_t index,
                                                    loadplan_target_info_t *out_info);

/* A checkpoint name. */
typedef struct loadplan_entry_info_t {
  const char *name; /* NUL-terminated; name_size excludes the NUL */
  size_t name_size;
  uint32_t kind;  /* loadplan_entry_kind_t */
  uint32_t dtype; /* loadplan_dtype_t */
  uint32_t rank;
  const int64_t *shape;
  const char *reason; /* NULL unless the plan records one (fallbacks) */
  size_t reason_size;
  /* The boxes this rank needs (loadplan_plan_box gives each): the whole
   * tensor for a fallback, none when unneeded. */
  uint32_t num_boxes;
  uint32_t num_writes;
} loadplan_entry_info_t;

/* The index of the entry called `name` (not NUL-terminated); NOT_FOUND if
 * there is none. */
LOADPLAN_API loadplan_status_t loadplan_plan_find_entry(const loadplan_plan_t *plan,
                                                        const char *name,
                                                        size_t name_size,
                                                        uint32_t *out_index);
LOADPLAN_API loadplan_status_t loadplan_plan_entry(const loadplan_plan_t *plan,
                                                   uint32_t index,
                                                   loadplan_entry_info_t *out_info);

/* Box `box` of an entry: dim k < rank (the entry's) is [starts[k],
 * stops[k]) of the checkpoint tensor. */
typedef struct loadplan_box_info_t {
  uint32_t rank;
  const int64_t *starts;
  const int64_t *stops;
} loadplan_box_info_t;

LOADPLAN_API loadplan_status_t loadplan_plan_box(const loadplan_plan_t *plan,
                                                 uint32_t entry, uint32_t box,
                                                 loadplan_box_info_t *out_info);

/* One write of an entry: box `box` of the checkpoint tensor goes to the
 * strided region (offset, shape, stride; in elements of the dtype written,
 * relative to the target's first byte) of target `target`. `dtype` is the
 * dtype written: the entry's for a copy of its bytes, another for a write
 * that converts each element (loadplan/convert.h). */
typedef struct loadplan_write_info_t {
  uint32_t target;
  uint32_t box;
  int64_t offset;
  uint32_t rank;
  const int64_t *shape;
  const int64_t *stride;
  uint32_t dtype;
  /* 0, or the loadplan_transform_t the write applies to the box's atoms
   * (plan_format.h); its region then splits the transform's output. */
  uint32_t transform;
} loadplan_write_info_t;

LOADPLAN_API loadplan_status_t loadplan_plan_write(const loadplan_plan_t *plan,
                                                   uint32_t entry,
                                                   uint32_t write,
                                                   loadplan_write_info_t *out_info);

/* The indices of the entries of `kind` (a loadplan_entry_kind_t), in plan
 * order: e.g. the fallback names the caller sends through its loader. */
LOADPLAN_API loadplan_status_t
loadplan_plan_entries_of_kind(const loadplan_plan_t *plan, uint32_t kind,
                              const uint32_t **out_indices, size_t *out_count);

/* The plan's report, the lines the compiler prints after compiling it (a
 * line per fallback reason with up to three of its names, then counts and
 * MiB per kind), the last one ending with `how` (not NUL-terminated; "loaded
 * from plan.bin", say). NUL-terminated text (out_size, when not NULL, gets
 * its length without the NUL) that the caller frees with loadplan_text_free. */
LOADPLAN_API loadplan_status_t loadplan_plan_report(const loadplan_plan_t *plan,
                                                    const char *how,
                                                    size_t how_size,
                                                    char **out_text,
                                                    size_t *out_size);
/* The plan as JSON, as loadplan-opt --loadplan-emit-plan-json writes it;
 * text as loadplan_plan_report gives it. */
LOADPLAN_API loadplan_status_t loadplan_plan_json(const loadplan_plan_t *plan,
                                                  char **out_text,
                                                  size_t *out_size);
/* Frees text the runtime gave; NULL is fine. */
LOADPLAN_API void loadplan_text_free(char *text);

/*===----------------------------------------------------------------------===*
 * Binding a plan to live tensors
 *===----------------------------------------------------------------------===*/

typedef enum loadplan_device_type_t {
  LOADPLAN_DEVICE_CPU = 0,
  LOADPLAN_DEVICE_CUDA = 1,
} loadplan_device_type_t;

typedef struct loadplan_device_t {
  uint32_t type; /* loadplan_device_type_t */
  int32_t index; /* CUDA device ordinal; 0 for the CPU */
} loadplan_device_t;

/* One target as the caller sees it, e.g. from a torch tensor `t`:
 * data = t.data_ptr(), byte_offset = t.storage_offset() * t.element_size(),
 * storage_size = t.untyped_storage().nbytes(), dtype, shape = t.shape,
 * stride = t.stride(). `data` points at the target's first byte (not at its
 * storage's), so the storage begins at data - byte_offset. */
typedef struct loadplan_target_layout_t {
  void *data;
  uint64_t byte_offset;
  uint64_t storage_size;
  uint32_t dtype;
  uint32_t rank;
  const int64_t *shape;
  const int64_t *stride;
} loadplan_target_layout_t;

/* Checks a layout against the plan without binding: recomputes the
 * fingerprint (loadplan_fingerprint_target) from the caller's byte offsets,
 * dtypes, shapes and strides, one layout per target in plan order, and
 * refuses a mismatch with FINGERPRINT_MISMATCH naming the first target and
 * field that differ. `data` and `storage_size` are not looked at. */
LOADPLAN_API loadplan_status_t
loadplan_plan_check_layout(const loadplan_plan_t *plan,
                           const loadplan_target_layout_t *layouts,
                           size_t num_layouts);

typedef struct loadplan_binding_t loadplan_binding_t;

typedef struct loadplan_bind_options_t {
  /* Where every target lives; all targets of one plan share a device. */
  loadplan_device_t device;
  /* CPU executor threads, the caller's included; 0 means all hardware
   * threads, at most 4096. The pool is created here and kept until the
   * binding is released. Ignored for CUDA. */
  uint32_t num_threads;
} loadplan_bind_options_t;

/* CPU, all hardware threads. */
LOADPLAN_API void loadplan_bind_options_init(loadplan_bind_options_t *options);

/* Binds `plan` to live memory: checks the layouts as
 * loadplan_plan_check_layout does, then that targets the plan puts in one
 * storage share one storage base (data - byte_offset) and targets in
 * different storages do not overlap, that every storage is at least as large
 * as the plan recorded, and (CUDA) that every target is memory of the
 * device. Then precomputes the copies of both update forms. `options` may be
 * NULL (the defaults). */
LOADPLAN_API loadplan_status_t loadplan_bind(loadplan_plan_t *plan,
                                             const loadplan_target_layout_t *layouts,
                                             size_t num_layouts,
                                             const loadplan_bind_options_t *options,
                                             loadplan_binding_t **out_binding);
/* Frees the binding and its thread pool or device buffers; NULL is fine.
 * Not while an apply on it runs. CUDA: waits for the binding's pending work
 * first. */
LOADPLAN_API void loadplan_binding_release(loadplan_binding_t *binding);

/* The number of CPU threads an apply uses (1 for CUDA). */
LOADPLAN_API loadplan_status_t loadplan_binding_num_threads(const loadplan_binding_t *binding,
                                                            uint32_t *out_num_threads);

/* What a binding's applies have cost so far, counted by the runtime (no
 * profiler needed). A CUDA apply enqueues on the caller's stream one
 * cudaMemcpyAsync of its copy records and one copy kernel (one more per
 * 2^30 chunks of 64 KiB), and one cudaMemcpy2DAsync per copy from pinned
 * host memory with rows of 4 KiB or more; an apply that moves nothing
 * enqueues nothing. The CPU executor launches nothing. */
typedef struct loadplan_binding_stats_t {
  uint64_t applies;         /* apply calls that passed their checks */
  uint64_t kernel_launches; /* copy kernels launched */
  uint64_t memcpy_calls;    /* cudaMemcpyAsync and cudaMemcpy2DAsync calls */
} loadplan_binding_stats_t;

/* Serialized with the binding's applies. */
LOADPLAN_API loadplan_status_t loadplan_binding_stats(loadplan_binding_t *binding,
                                                      loadplan_binding_stats_t *out_stats);

/*===----------------------------------------------------------------------===*
 * Applying an update
 *===----------------------------------------------------------------------===*/

/* A full incoming checkpoint tensor: contiguous (row-major) elements. */
typedef struct loadplan_tensor_t {
  const char *name; /* not NUL-terminated: name_size bytes */
  size_t name_size;
  const void *data;
  uint32_t dtype;
  uint32_t rank;
  const int64_t *shape;
} loadplan_tensor_t;

/* One incoming box of a checkpoint tensor: its elements packed contiguous
 * (row-major over the box's own shape). starts/stops give the box in the
 * checkpoint tensor's coordinates, as loadplan_entry_info_t lists them. */
typedef struct loadplan_box_t {
  const char *name;
  size_t name_size;
  const void *data;
  uint32_t dtype;
  uint32_t rank;
  const int64_t *starts;
  const int64_t *stops;
} loadplan_box_t;

/* Copies each tensor's boxes into every region the plan writes them to.
 * Every name must be a direct entry, sent once, with the plan's dtype and
 * shape. `stream` is a cudaStream_t for a CUDA binding (NULL: the default
 * stream) and must be NULL for the CPU. CPU: returns when all is written.
 * CUDA: returns once the copies are enqueued on `stream`; the sources must
 * stay valid until the stream gets there. Calls on one binding from several
 * threads are serialized. */
LOADPLAN_API loadplan_status_t loadplan_apply_tensors(loadplan_binding_t *binding,
                                                      const loadplan_tensor_t *tensors,
                                                      size_t num_tensors,
                                                      void *stream);

/* As loadplan_apply_tensors, for a caller that has found each tensor's entry
 * itself (its index, as loadplan_plan_entry numbers them): entries[i] is a
 * direct entry, each at most once, and data[i] the contiguous elements of
 * its full tensor, which the caller has checked to have the entry's dtype
 * and shape. Skips looking each name up again: for a fast path that has
 * resolved the names of a batch already (the Python binding's). */
LOADPLAN_API loadplan_status_t loadplan_apply_entries(loadplan_binding_t *binding,
                                                      const uint32_t *entries,
                                                      const void *const *data,
                                                      size_t count, void *stream);

/* As loadplan_apply_tensors, from packed boxes: every name in the batch must
 * be a direct entry and come with each of its boxes exactly once. */
LOADPLAN_API loadplan_status_t loadplan_apply_boxes(loadplan_binding_t *binding,
                                                    const loadplan_box_t *boxes,
                                                    size_t num_boxes,
                                                    void *stream);

/*===----------------------------------------------------------------------===*
 * CUDA
 *===----------------------------------------------------------------------===*/

/* The number of CUDA devices (0 when the driver finds none). UNAVAILABLE if
 * the runtime was built without CUDA. */
LOADPLAN_API loadplan_status_t loadplan_cuda_device_count(int32_t *out_count);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* LOADPLAN_RUNTIME_H */

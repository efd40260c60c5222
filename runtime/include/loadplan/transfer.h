/*===- transfer.h - Weight transfers between ranks: the C API ---*- C -*-===*\
 *
 * Moves a weight update from trainer ranks (senders) into inference ranks
 * (receivers) whose load plans say which boxes of each checkpoint tensor
 * they need and where those land:
 *
 *   1. communicators over Gloo (CPU, TCP) or NCCL (CUDA);
 *   2. a schedule, computed once from the senders' layout (which box of
 *      each checkpoint tensor each sender holds) and every receiver's plan:
 *      per (sender, receiver) the intersections to move, bucketed into
 *      rounds that keep each rank's staging memory under a cap;
 *   3. a transfer engine per rank that runs the schedule on every update:
 *      receives whose destination is contiguous land in the live tensors,
 *      the others in a staging buffer that the runtime's executor scatters.
 *
 * Every call that can fail returns a loadplan_status_t as in runtime.h.
 * Calls marked "collective" must be made by every rank of the
 * communicator; on failure each rank gets an error (the first failing
 * rank's message, prefixed with its rank). See docs/transfers.md.
 *
\*===----------------------------------------------------------------------===*/

#ifndef LOADPLAN_TRANSFER_H
#define LOADPLAN_TRANSFER_H

#include "loadplan/runtime.h"
#include "loadplan/schedule_format.h"

#ifdef __cplusplus
extern "C" {
#endif

/*===----------------------------------------------------------------------===*
 * Communicators
 *===----------------------------------------------------------------------===*/

typedef struct loadplan_comm_t loadplan_comm_t;

typedef enum loadplan_backend_t {
  LOADPLAN_BACKEND_GLOO = 0, /* CPU memory, TCP */
  LOADPLAN_BACKEND_NCCL = 1, /* CUDA memory */
} loadplan_backend_t;

/* Whether `backend` was built into this runtime (NCCL: also whether
 * libnccl.so.2 loads and a GPU is present). */
LOADPLAN_API loadplan_status_t loadplan_backend_available(uint32_t backend,
                                                          int32_t *out_available);

/* The path of the libnccl.so.2 the NCCL backend uses, loaded now if it was
 * not (no GPU needed): $LOADPLAN_NCCL_LIBRARY when set, else the one already
 * in the process (torch's), else the nvidia-nccl package beside loadplan's
 * files in site-packages, else the dynamic linker's search. UNAVAILABLE,
 * saying where it looked, when none loads or NCCL is not built in. The
 * string lives as long as the process. */
LOADPLAN_API loadplan_status_t loadplan_nccl_library(const char **out_path);

/* "gloo", "nccl"; NULL for an unknown backend. */
LOADPLAN_API const char *loadplan_backend_name(uint32_t backend);

/* What loadplan_store_t.get returns when `key` did not come within its
 * timeout, when the store itself cannot be reached (the process that
 * serves it is gone), and when the caller stopped waiting because another
 * rank of the transfer is gone (its process ended). */
#define LOADPLAN_STORE_TIMEOUT (-1)
#define LOADPLAN_STORE_LOST (-2)
#define LOADPLAN_STORE_PEER_GONE (-3)

/* A key-value store the caller implements for rendezvous (e.g. over
 * torch.distributed's TCPStore). Used only during
 * loadplan_comm_create_gloo and loadplan_schedule_agree, from the calling
 * thread. */
typedef struct loadplan_store_t {
  void *context;
  /* Stores `value` under `key`; returns 0 on success (nonzero: the store
   * cannot be reached). */
  int32_t (*set)(void *context, const char *key, size_t key_size,
                 const void *value, size_t value_size);
  /* Waits up to `timeout_ms` (> 0) for `key`, then copies at most
   * `capacity` bytes of its value to `out` and returns the value's full
   * size; LOADPLAN_STORE_TIMEOUT, LOADPLAN_STORE_LOST or
   * LOADPLAN_STORE_PEER_GONE (any other negative value: a lost store). Called again with a larger buffer when the value did
   * not fit. */
  int64_t (*get)(void *context, const char *key, size_t key_size, void *out,
                 size_t capacity, int64_t timeout_ms);
} loadplan_store_t;

typedef struct loadplan_gloo_options_t {
  /* The address this rank listens on (other ranks must reach it); NULL:
   * the address of this machine's hostname. */
  const char *hostname;
  /* Rendezvous: a directory shared by all ranks (a file store), or, when
   * NULL, `store`. */
  const char *store_path;
  const loadplan_store_t *store;
  /* Prefixes every key, so that several communicators can share a store
   * (keys stay behind in a file store). NULL: "". */
  const char *prefix;
  /* Per operation; 0: 60000. A peer whose process ends is noticed at once,
   * when its connections close; this bounds a peer that hangs. */
  int64_t timeout_ms;
} loadplan_gloo_options_t;

LOADPLAN_API void loadplan_gloo_options_init(loadplan_gloo_options_t *options);

/* Collective: connects `size` ranks over TCP. */
LOADPLAN_API loadplan_status_t
loadplan_comm_create_gloo(int32_t rank, int32_t size,
                          const loadplan_gloo_options_t *options,
                          loadplan_comm_t **out_comm);

#define LOADPLAN_NCCL_UNIQUE_ID_BYTES 128

/* A fresh NCCL unique id; one rank makes it and hands it to the others. */
LOADPLAN_API loadplan_status_t loadplan_nccl_unique_id(uint8_t out_id[128]);

/* Collective: an NCCL communicator on CUDA device `device` from the id of
 * loadplan_nccl_unique_id. `timeout_ms` bounds each transfer (0: 60000);
 * a transfer that runs past it aborts the communicator, and so does a peer
 * of this host whose process ends (noticed when its connection closes) or
 * an asynchronous NCCL error (a broken network connection to a peer of
 * another host). */
LOADPLAN_API loadplan_status_t
loadplan_comm_create_nccl(int32_t rank, int32_t size, const uint8_t id[128],
                          int32_t device, int64_t timeout_ms,
                          loadplan_comm_t **out_comm);

typedef struct loadplan_comm_info_t {
  int32_t rank;
  int32_t size;
  uint32_t backend; /* loadplan_backend_t */
  loadplan_device_t device;
  /* Nonzero once a transfer failed in the transport: the communicator is
   * closed and every later call on it fails; make a new one. */
  int32_t failed;
} loadplan_comm_info_t;

LOADPLAN_API loadplan_status_t loadplan_comm_info(const loadplan_comm_t *comm,
                                                  loadplan_comm_info_t *out_info);
/* Drops a reference; engines retain their communicator. NULL is fine. */
LOADPLAN_API void loadplan_comm_release(loadplan_comm_t *comm);

/*===----------------------------------------------------------------------===*
 * Schedules
 *===----------------------------------------------------------------------===*/

typedef struct loadplan_schedule_t loadplan_schedule_t;

/* A checkpoint tensor as the senders send it. */
typedef struct loadplan_checkpoint_tensor_t {
  const char *name; /* name_size bytes, not NUL-terminated */
  size_t name_size;
  uint32_t dtype; /* loadplan_dtype_t */
  uint32_t rank;
  const int64_t *shape;
} loadplan_checkpoint_tensor_t;

/* A box of a checkpoint tensor that a sender holds, packed contiguous
 * (row-major over the box's shape): a full replica, a TP shard, an FSDP row
 * shard, one expert. starts/stops NULL: the whole tensor. */
typedef struct loadplan_holding_t {
  uint32_t tensor; /* index into the schedule's tensors */
  const int64_t *starts;
  const int64_t *stops;
} loadplan_holding_t;

typedef struct loadplan_sender_spec_t {
  int32_t comm_rank;
  /* Bytes this rank may use to pack boxes that are not contiguous in what
   * it holds; 0: LOADPLAN_DEFAULT_STAGING_CAP. */
  uint64_t staging_cap;
  const loadplan_holding_t *holdings; /* at most one per tensor */
  size_t num_holdings;
} loadplan_sender_spec_t;

typedef struct loadplan_receiver_spec_t {
  int32_t comm_rank;
  /* Bytes this rank may use for receives that cannot land in place; 0:
   * LOADPLAN_DEFAULT_STAGING_CAP. Ignored when `atomic`. */
  uint64_t staging_cap;
  /* Nonzero: stage the whole update and write live memory only once every
   * rank has succeeded (staging then holds all this rank receives). */
  uint32_t atomic;
  const loadplan_plan_t *plan;
} loadplan_receiver_spec_t;

#define LOADPLAN_DEFAULT_STAGING_CAP (64ull << 20)

typedef struct loadplan_schedule_spec_t {
  uint32_t engine;     /* loadplan_engine_t */
  int32_t world_size;  /* ranks of the communicator */
  const loadplan_checkpoint_tensor_t *tensors;
  size_t num_tensors;
  const loadplan_sender_spec_t *senders;
  size_t num_senders;
  const loadplan_receiver_spec_t *receivers;
  size_t num_receivers;
  /* Pieces of fewer bytes between one sender and one receiver in a round
   * travel as one message, packed by the sender and scattered (or, where
   * their destinations line up, received in place) by the receiver; 0:
   * LOADPLAN_DEFAULT_JOIN_BELOW, 1: every piece is a message of its own. */
  uint64_t join_below;
  /* Nonzero: rounds run one after another, each with the whole staging
   * cap. Otherwise (and when every cap holds two 64-byte slots) staging is
   * split in two halves so that packing, sending and scattering of
   * consecutive rounds overlap (LOADPLAN_SCHEDULE_OVERLAP). */
  uint32_t sequential;
} loadplan_schedule_spec_t;

#define LOADPLAN_DEFAULT_JOIN_BELOW (256ull << 10)

/* Computes a schedule (see schedule_format.h for what it holds). The same
 * spec gives the same bytes on every machine. INVALID_ARGUMENT says why a
 * spec has none: a needed box no sender holds (or, for SLICED, that no one
 * sender holds whole), plans that disagree with the senders on a tensor's
 * dtype or shape, senders holding overlapping but different boxes, ... */
LOADPLAN_API loadplan_status_t
loadplan_schedule_build(const loadplan_schedule_spec_t *spec,
                        loadplan_schedule_t **out_schedule);
/* What one rank brings to loadplan_schedule_agree. */
typedef enum loadplan_offer_role_t {
  LOADPLAN_OFFER_SENDER = 0,
  LOADPLAN_OFFER_RECEIVER = 1,
  /* A rank that cannot take part: it fails the set-up of every rank. */
  LOADPLAN_OFFER_REFUSAL = 2,
} loadplan_offer_role_t;

typedef struct loadplan_schedule_offer_t {
  uint32_t role; /* loadplan_offer_role_t */
  /* A sender's or receiver's staging cap, as in its spec above. */
  uint64_t staging_cap;
  /* A sender: the checkpoint tensors it declares, and its holdings
   * (`tensor` indexes `tensors`). */
  const loadplan_checkpoint_tensor_t *tensors;
  size_t num_tensors;
  const loadplan_holding_t *holdings;
  size_t num_holdings;
  /* A receiver: its plan and the plan file bytes it was opened from
   * (they travel as they are; their fingerprint must be the plan's). */
  const loadplan_plan_t *plan;
  const void *plan_data;
  size_t plan_size;
  uint32_t atomic;
  /* A refusal: why this rank cannot take part. */
  const char *message;
  size_t message_size;
} loadplan_schedule_offer_t;

typedef struct loadplan_agree_options_t {
  uint32_t engine; /* loadplan_engine_t; ignored for a refusal */
  int32_t rank;
  int32_t world_size;
  /* Ranks 0 .. num_senders-1 send, the others receive (rank 0's counts;
   * ignored for a refusal). */
  int32_t num_senders;
  const loadplan_store_t *store;
  /* Prefixes every key (NULL: ""); one per agreement. */
  const char *prefix;
  /* Per wait; 0: 60000. */
  int64_t timeout_ms;
  /* As in loadplan_schedule_spec_t; every rank must ask for the same. */
  uint64_t join_below;
  uint32_t sequential;
} loadplan_agree_options_t;

LOADPLAN_API void loadplan_agree_options_init(loadplan_agree_options_t *options);

/* Collective over `store` (not a communicator): every rank hands in its
 * offer (schedule_format.h, "Offers"); rank 0 builds the schedule of all
 * of them with loadplan_schedule_build and hands out the schedule file, or
 * why there is none, and every rank returns it. Errors, the same on every
 * rank: a refusal (INVALID_ARGUMENT, "rank N refused the set-up: ..."; the
 * first refusing rank's), rank 0's build errors ("ranks ask for different
 * engines", "senders declare ... differently", "ranks disagree on
 * num_senders", the builder's), a rank's malformed offer ("rank N's
 * set-up data ..."). IO_ERROR, on the rank that saw it: the store is
 * gone ("rank N lost the rendezvous store while ...") or ranks are late
 * ("rank N waited 60 s for ranks [2, 3] while ..., in vain"). Rank 0
 * returns only once every rank has the schedule (it may serve the store). */
LOADPLAN_API loadplan_status_t
loadplan_schedule_agree(const loadplan_agree_options_t *options,
                        const loadplan_schedule_offer_t *offer,
                        loadplan_schedule_t **out_schedule);

/* Parses and checks schedule bytes (copied). INVALID_PLAN on bad bytes. */
LOADPLAN_API loadplan_status_t
loadplan_schedule_open_bytes(const void *data, size_t size,
                             loadplan_schedule_t **out_schedule);
LOADPLAN_API void loadplan_schedule_retain(loadplan_schedule_t *schedule);
LOADPLAN_API void loadplan_schedule_release(loadplan_schedule_t *schedule);

/* The schedule file bytes; valid while the schedule lives. */
LOADPLAN_API loadplan_status_t
loadplan_schedule_bytes(const loadplan_schedule_t *schedule,
                        const void **out_data, size_t *out_size);

typedef struct loadplan_schedule_summary_t {
  uint32_t engine;
  int32_t world_size;
  uint64_t fingerprint; /* of the inputs */
  uint64_t checksum;    /* of the payload */
  uint32_t num_tensors;
  uint32_t num_senders;
  uint32_t num_receivers;
  uint32_t num_rounds;
  uint64_t num_pieces;
  /* Messages between ranks and to themselves: pieces travel together
   * where they are JOINED. */
  uint64_t num_messages;
  uint32_t flags; /* loadplan_schedule_flags_t */
  uint64_t join_below;
  /* Bytes of all pieces, and of those between different ranks. */
  uint64_t bytes_moved;
  uint64_t bytes_between_ranks;
  /* What the receivers' plans need: their direct boxes and fallback
   * tensors (for FULL, whole tensors). */
  uint64_t bytes_needed;
  /* Bytes received in place, and received into staging. */
  uint64_t bytes_in_place;
  uint64_t bytes_staged;
  /* Bytes senders pack before sending. */
  uint64_t bytes_packed;
  /* The largest staging buffer of any sender, any receiver. */
  uint64_t max_sender_staging;
  uint64_t max_receiver_staging;
} loadplan_schedule_summary_t;

LOADPLAN_API loadplan_status_t
loadplan_schedule_summary(const loadplan_schedule_t *schedule,
                          loadplan_schedule_summary_t *out_summary);

/* A readable listing: the summary, the ranks, then (detail 1) each piece
 * grouped by (sender, receiver). NUL-terminated; valid while the schedule
 * lives (until the next call for another detail). */
LOADPLAN_API loadplan_status_t
loadplan_schedule_text(loadplan_schedule_t *schedule, uint32_t detail,
                       const char **out_text, size_t *out_size);

/* "full", "sliced", "m_to_n"; NULL for an unknown engine. */
LOADPLAN_API const char *loadplan_engine_name(uint32_t engine);

/*===----------------------------------------------------------------------===*
 * Transfer engines
 *===----------------------------------------------------------------------===*/

typedef struct loadplan_transfer_t loadplan_transfer_t;

/* A buffer the receiver fills with the whole tensor of a fallback name,
 * for the caller's load_weights; memory of the communicator's device. */
typedef struct loadplan_fallback_buffer_t {
  const char *name;
  size_t name_size;
  void *data;
  uint64_t size_bytes;
} loadplan_fallback_buffer_t;

/* What a receiving rank brings: its plan bound to live memory, as
 * loadplan_bind takes it (the device must be the communicator's), and one
 * buffer per fallback name of the plan. */
typedef struct loadplan_receiver_args_t {
  loadplan_plan_t *plan;
  const loadplan_target_layout_t *layouts;
  size_t num_layouts;
  /* CPU threads of the executor (0: all hardware threads). */
  uint32_t num_threads;
  const loadplan_fallback_buffer_t *fallbacks;
  size_t num_fallbacks;
} loadplan_receiver_args_t;

typedef struct loadplan_transfer_options_t {
  /* CPU threads for packing on a sender (0: all hardware threads). */
  uint32_t num_threads;
  /* For tests: >= 0 makes this rank fail on its own at that round (or at
   * the end, past the last) of the first update that gets there, while
   * keeping the transfer going, as a rank whose copies failed does; -1:
   * off. */
  int32_t debug_fail_round;
  /* Nonzero: at creation, time a link probe (see
   * loadplan_transfer_stats_t.probe_seconds). */
  uint32_t link_probe;
  /* Nonzero: a colocated transfer (every rank gives the same). Receivers
   * read each piece where its sender holds it, in the sender's shared
   * memory, mapped into the receiver (same machine, same PID namespace,
   * CPU memory in shared file mappings: memfd, /dev/shm, torch's
   * share_memory_()); no data crosses the communicator, which carries only
   * each sender's table of where its tensors lie (again only when it
   * changed). The link probe then times a memcpy of the bytes. */
  uint32_t colocated;
  /* Colocated only: -1 (the default) for CPU memory; otherwise the CUDA
   * device whose memory this rank's tensors (held, live and staging) are
   * in. Senders' tensors are then read through CUDA IPC
   * (cudaIpcOpenMemHandle, with peer access where the receiver's device
   * is another) and copied by the CUDA executor on that device; the
   * communicator, which carries only tables and agreements, is Gloo's
   * (NCCL refuses two ranks on one GPU, as colocated ranks often are).
   * loadplan_transfer_update then takes the caller's CUDA stream. */
  int32_t colocated_device;
} loadplan_transfer_options_t;

LOADPLAN_API void loadplan_transfer_options_init(loadplan_transfer_options_t *options);

/* For a colocated sender, before an update: out_shared[i] = 1 when the
 * `bytes[i]` bytes at `data[i]` lie wholly in shared file mappings of this
 * process (where a colocated transfer can read them), else 0; an empty
 * region (bytes[i] == 0) is. Reads /proc/self/maps once. */
LOADPLAN_API loadplan_status_t loadplan_shared_memory_check(const void *const *data,
                                                            const uint64_t *bytes,
                                                            size_t count,
                                                            uint8_t *out_shared);

/* Collective: this rank's engine over `schedule`. Its role comes from the
 * schedule (the sender and/or receiver whose comm_rank is this rank's);
 * `receiver` is required for a receiving rank and must be NULL otherwise.
 * Checks that every rank holds the same schedule and, on a receiver, that
 * the plan is the one the schedule was made for and binds to `layouts`. */
LOADPLAN_API loadplan_status_t
loadplan_transfer_create(loadplan_comm_t *comm, loadplan_schedule_t *schedule,
                         const loadplan_receiver_args_t *receiver,
                         const loadplan_transfer_options_t *options,
                         loadplan_transfer_t **out_transfer);
LOADPLAN_API void loadplan_transfer_release(loadplan_transfer_t *transfer);

/* What a sender holds of one checkpoint tensor for this update: the box
 * the schedule says, packed contiguous, in the communicator's memory. */
typedef struct loadplan_held_tensor_t {
  const char *name;
  size_t name_size;
  const void *data;
  uint32_t dtype;
  uint32_t rank;
  const int64_t *shape; /* the box's extents */
} loadplan_held_tensor_t;

/* Collective: one update. A sending rank passes every tensor it holds
 * (others pass none). First every rank checks its inputs and all agree;
 * on any error nothing moves. Then the rounds run; last, all agree again.
 * Returns OK on every rank, or on every rank the first error. With atomic
 * receivers, live memory changes only after that last agreement; otherwise
 * a failure may leave a partial update. `stream`: a cudaStream_t (NCCL;
 * NULL: the default stream), NULL for Gloo; returns when all bytes have
 * landed. */
LOADPLAN_API loadplan_status_t
loadplan_transfer_update(loadplan_transfer_t *transfer,
                         const loadplan_held_tensor_t *held, size_t num_held,
                         void *stream);

/* Collective: what a rank calls instead of loadplan_transfer_update when
 * it cannot take part in an update (its own inputs are wrong, say): the
 * update fails on every rank, with this rank's `message` and `code` (unless
 * a lower rank reports an error too), and nothing moves. Returns that
 * error. */
LOADPLAN_API loadplan_status_t
loadplan_transfer_fail(loadplan_transfer_t *transfer, uint32_t code,
                       const char *message, size_t message_size);

typedef struct loadplan_transfer_stats_t {
  /* Of the last update, on this rank. Data pieces only (the agreements
   * move 512 bytes per pair of ranks and are not counted). */
  uint64_t bytes_sent;     /* to other ranks */
  uint64_t bytes_received; /* from other ranks */
  uint64_t bytes_local;    /* pieces whose sender is this rank too */
  uint64_t bytes_in_place; /* received straight into live memory */
  uint64_t bytes_staged;   /* received into staging, then scattered */
  uint64_t bytes_packed;   /* packed before sending */
  uint64_t messages_sent;
  uint64_t messages_received;
  uint32_t rounds; /* rounds this rank took part in */
  uint32_t updates; /* updates so far that succeeded */
  double seconds;
  /* The speed of light: the seconds this rank took, at creation, to move
   * the bytes it sends and receives in an update as one message per pair
   * of ranks (chunks of at most 64 MiB), all at once, from and into
   * scratch memory over the same transport, the better of two runs (0: no
   * probe was asked for).
   * seconds / probe_seconds is what an update costs over its bytes. */
  double probe_seconds;
  uint64_t probe_bytes;
  /* Colocated: other ranks' shared files or CUDA allocations this rank
   * has mapped now (0 after loadplan_transfer_release_mappings). */
  uint64_t mappings;
} loadplan_transfer_stats_t;

LOADPLAN_API loadplan_status_t
loadplan_transfer_stats(const loadplan_transfer_t *transfer,
                        loadplan_transfer_stats_t *out_stats);

/* Colocated, between updates, not collective: closes every mapping this
 * rank holds of other ranks' memory (CUDA IPC handles, shared file
 * mappings; loadplan_transfer_stats_t.mappings drops to 0). A receiver
 * calls it before a sender gives that memory back (CUDA calls freeing
 * memory that another process still has open undefined), for instance
 * before a colocated trainer offloads its parameters and empties torch's
 * cache. The next update asks every sender for its table again (in the
 * agreement that opens it) and maps what the tables name. Does nothing on
 * a rank that maps nothing or a transfer that is not colocated. */
LOADPLAN_API loadplan_status_t
loadplan_transfer_release_mappings(loadplan_transfer_t *transfer);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* LOADPLAN_TRANSFER_H */

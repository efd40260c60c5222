/*===- schedule_format.h - The binary transfer-schedule format ---*- C -*-===*\
 *
 * A schedule says, for one set of senders and receivers, which boxes of
 * which checkpoint tensors move from which sender to which receiver, in
 * which round, and where each lands. It is computed once
 * (loadplan_schedule_build) and every rank runs the same one. Plain C, no
 * dependencies; the hashing is plan_format.h's.
 *
 * A schedule file is a 40-byte header followed by a payload. Every integer
 * is little-endian; there is no padding.
 *
 *   header:  char magic[8] = "LPSCHEDL"
 *            u32  version  = LOADPLAN_SCHEDULE_VERSION
 *            u32  header_size = 40
 *            u64  fingerprint   (of the inputs, see below)
 *            u64  payload_size  (bytes after the header)
 *            u64  checksum      (loadplan_checksum64 of the payload)
 *
 *   payload: u32 engine (loadplan_engine_t), u32 world_size, u32 num_rounds,
 *            u32 flags (loadplan_schedule_flags_t), u64 join_below
 *            u32 num_tensors, then per tensor:
 *                str name, u32 dtype, u32 rank, i64 shape[rank]
 *            u32 num_senders, then per sender:
 *                u32 comm_rank, u64 staging_cap, u64 staging_bytes,
 *                u32 num_holdings, per holding:
 *                    u32 tensor, rank x (i64 start, i64 stop)
 *            u32 num_receivers, then per receiver:
 *                u32 comm_rank, u64 staging_cap, u64 staging_bytes,
 *                u8 atomic, u64 plan_fingerprint, u64 plan_digest,
 *                u32 num_needs, per need:
 *                    u32 tensor, u8 kind (loadplan_need_kind_t),
 *                    u32 box (the plan box, for LOADPLAN_NEED_BOX),
 *                    rank x (i64 start, i64 stop)
 *            u64 num_pieces, then per piece, in the order every rank posts
 *            them:
 *                u32 sender, u32 receiver (indices into the lists above),
 *                u32 holding (of the sender), u32 need (of the receiver),
 *                u32 round, u8 flags (loadplan_piece_flags_t),
 *                u64 send_offset, u64 recv_offset,
 *                rank x (i64 start, i64 stop)
 *
 *   str:     u32 length, then that many bytes (UTF-8, no terminator)
 *
 * Boxes are in the checkpoint tensor's coordinates. A piece is a box inside
 * both its holding and its need. send_offset is a byte offset into the
 * sender's staging buffer when the piece is PACKED, else into the holding
 * (where the piece is one contiguous run). recv_offset is a byte offset
 * into the receiver's staging buffer when the piece is STAGED (else 0: it
 * lands in place, where the receiver's plan puts it). staging_bytes is the
 * buffer each rank allocates: the most any round uses (for an atomic
 * receiver, the sum over all rounds; with LOADPLAN_SCHEDULE_OVERLAP, the
 * most an even round uses, rounded up to 64, plus the most an odd round
 * uses, whose offsets start after the even rounds' part).
 *
 * Messages. Each piece travels as a message of its own, unless it is
 * JOINED: then it travels in the message of the piece before it, which has
 * the same sender, receiver, round and holding-or-staging choices
 * (PACKED and STAGED alike), and its bytes follow that piece's at once on
 * both sides: send_offset is the previous piece's send_offset plus its
 * bytes (in the sender's staging when packed, else in the same holding),
 * and recv_offset likewise when staged (else its destination in live
 * memory follows the previous piece's, which the receiver checks against
 * its plan). A joined piece's offsets are multiples of its element size;
 * the first piece of a packed or staged message starts 64-byte aligned.
 * The builder joins the pieces of fewer than join_below bytes between one
 * sender and one receiver in a round (largest elements first, then in
 * destination order), up to the per-round staging cap: one message instead
 * of one per piece.
 *
 * Rounds. With LOADPLAN_SCHEDULE_OVERLAP, a rank's staging is two halves
 * (even and odd rounds), each at most half its cap: a sender packs round
 * r+1 while round r is in flight, and a receiver scatters round r while
 * round r+1 arrives. Without it, rounds run one after another and each
 * may use the whole cap.
 *
 * plan_digest is loadplan_fnv1a64 over the receiver plan's fingerprint and,
 * per entry, its name, kind, dtype, shape, boxes and writes (target, box,
 * offset, shape, stride), each integer as a u64 and each string as u64
 * length then bytes: a receiver refuses a schedule made for another plan.
 *
 * The fingerprint is loadplan_fnv1a64 over the engine, world_size, flags,
 * join_below, each tensor (name, dtype, rank, shape), each sender (comm_rank, staging_cap,
 * holdings) and each receiver (comm_rank, staging_cap, atomic,
 * plan_fingerprint, plan_digest), hashed the same way: equal inputs give
 * equal fingerprints.
 *
 * Version 2 made the checksum XXH64, as plan files' version 3 did; version
 * 3 added flags, join_below and joined pieces. Earlier versions are
 * refused (make the schedule again).
 *
 * Offers and the answer (loadplan_schedule_agree): what each rank hands
 * rank 0 through the store, and what rank 0 hands back; same integers and
 * strings as above, no header (they live for one set-up):
 *
 *   offer:   char magic[8] = "LPOFFER2", u32 rank, u32 role
 *            (loadplan_offer_role_t), u32 engine, u64 join_below,
 *            u32 sequential (loadplan_agree_options_t's), then by role:
 *            sender:   u64 staging_cap, u32 num_tensors, per tensor:
 *                          str name, u32 dtype, u32 rank, i64 shape[rank]
 *                      u32 num_holdings, per holding: u32 tensor (of this
 *                          offer's), u8 boxed, rank x (i64 start, i64 stop)
 *                          when boxed (else the whole tensor)
 *            receiver: u64 staging_cap, u8 atomic, u64 plan_size, then
 *                      the plan file's bytes
 *            refusal:  str message
 *   answer:  u32 status (loadplan_status_code_t); OK: the schedule file
 *            follows, else the message (the rest of the bytes)
 *
\*===----------------------------------------------------------------------===*/

#ifndef LOADPLAN_SCHEDULE_FORMAT_H
#define LOADPLAN_SCHEDULE_FORMAT_H

#include "loadplan/plan_format.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LOADPLAN_SCHEDULE_MAGIC "LPSCHEDL"
#define LOADPLAN_SCHEDULE_MAGIC_SIZE 8
#define LOADPLAN_SCHEDULE_VERSION 3u
#define LOADPLAN_SCHEDULE_HEADER_SIZE 40u
#define LOADPLAN_OFFER_MAGIC "LPOFFER2"
#define LOADPLAN_OFFER_MAGIC_SIZE 8

/* How updates reach the receivers. */
typedef enum loadplan_engine_t {
  /* Every receiver gets every whole tensor and applies its plan: moves N
   * times the model; the baseline. */
  LOADPLAN_ENGINE_FULL = 0,
  /* Each receiver gets exactly its boxes (and whole fallback tensors),
   * each box from one sender that holds it whole. */
  LOADPLAN_ENGINE_SLICED = 1,
  /* Each receiver gets exactly its boxes, each as the intersections with
   * the senders' boxes (FSDP/TP shards, expert subsets). */
  LOADPLAN_ENGINE_M_TO_N = 2,
  LOADPLAN_ENGINE_COUNT_ = 3,
} loadplan_engine_t;

/* What a receiver needs of a tensor. */
typedef enum loadplan_need_kind_t {
  /* A box of a direct entry, written where the plan's writes say. */
  LOADPLAN_NEED_BOX = 0,
  /* A fallback entry's whole tensor, into the caller's fallback buffer. */
  LOADPLAN_NEED_FALLBACK = 1,
  /* FULL: the whole tensor, of which the plan's boxes are written (and a
   * fallback's buffer filled); the rest is dropped. */
  LOADPLAN_NEED_WHOLE = 2,
} loadplan_need_kind_t;

typedef enum loadplan_piece_flags_t {
  /* Not one contiguous run of the holding: packed into the sender's
   * staging buffer first. */
  LOADPLAN_PIECE_PACKED = 1,
  /* Not one contiguous run of live memory in the piece's order (or the
   * receiver is atomic): received into staging, then scattered. */
  LOADPLAN_PIECE_STAGED = 2,
  /* Travels in the message of the piece before it (see "Messages"). */
  LOADPLAN_PIECE_JOINED = 4,
} loadplan_piece_flags_t;

typedef enum loadplan_schedule_flags_t {
  /* Staging in two halves: round r+1 is packed, and round r scattered,
   * while the other is in flight (see "Rounds"). */
  LOADPLAN_SCHEDULE_OVERLAP = 1,
} loadplan_schedule_flags_t;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* LOADPLAN_SCHEDULE_FORMAT_H */

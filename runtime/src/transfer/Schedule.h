//===- Schedule.h - Transfer schedules: build, serialize, parse -*- C++ -*-===//
//
// A schedule is computed once from the senders' layout and the receivers'
// plans (buildSchedule) and run on every update by each rank's engine. It
// travels as bytes (schedule_format.h); parseSchedule accepts only bytes
// whose every index, box and offset an engine can trust.
//
// Declared here, defined by job:
//   ScheduleLanding.cpp  Landing: a receiver's needs and where its pieces
//                        land in its plan's targets
//   ScheduleBuilder.cpp  buildSchedule: cutting needs along the senders'
//                        boxes, staging and rounds
//   ScheduleFormat.cpp   the bytes: serializeSchedule, parseSchedule, the
//                        fingerprint and planDigest
//   ScheduleText.cpp     Schedule::summary, Schedule::text and the labels
//                        messages share
//   ScheduleAgreement.cpp  agreeOnSchedule: every rank's offer through
//                        the caller's store, rank 0's build, the answer
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_RUNTIME_TRANSFER_SCHEDULE_H
#define LOADPLAN_RUNTIME_TRANSFER_SCHEDULE_H

#include "../Plan.h"
#include "Geometry.h"
#include "loadplan/transfer.h"

#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace loadplan::transfer {

/// Staging offsets are aligned to this (any dtype's size divides it).
constexpr uint64_t kStagingAlign = 64;

struct Tensor {
  std::string name;
  uint32_t dtype = 0;
  std::vector<int64_t> shape;
  int64_t itemSize() const {
    return static_cast<int64_t>(loadplan_dtype_size(dtype));
  }
};

struct Holding {
  uint32_t tensor = 0;
  Box box;
};

struct Sender {
  uint32_t commRank = 0;
  uint64_t stagingCap = 0;
  uint64_t stagingBytes = 0;
  std::vector<Holding> holdings;
};

struct Need {
  uint32_t tensor = 0;
  uint8_t kind = LOADPLAN_NEED_BOX;
  uint32_t box = 0;
  Box range;
};

struct Receiver {
  uint32_t commRank = 0;
  uint64_t stagingCap = 0;
  uint64_t stagingBytes = 0;
  bool atomic = false;
  uint64_t planFingerprint = 0;
  uint64_t planDigest = 0;
  std::vector<Need> needs;
};

struct Piece {
  uint32_t sender = 0, receiver = 0, holding = 0, need = 0, round = 0;
  uint8_t flags = 0;
  uint64_t sendOffset = 0, recvOffset = 0;
  Box box;
};

struct Schedule {
  uint32_t engine = 0;
  uint32_t worldSize = 0;
  uint32_t numRounds = 0;
  /// loadplan_schedule_flags_t.
  uint32_t flags = 0;
  /// Pieces of fewer bytes were joined into messages (schedule_format.h).
  uint64_t joinBelow = 0;
  std::vector<Tensor> tensors;
  std::vector<Sender> senders;
  std::vector<Receiver> receivers;
  std::vector<Piece> pieces;
  uint64_t fingerprint = 0;
  uint64_t checksum = 0;
  /// The file: header and payload.
  std::vector<uint8_t> bytes;

  uint64_t pieceBytes(const Piece &p) const {
    return uint64_t(p.box.volume()) * uint64_t(pieceTensor(p).itemSize());
  }
  const Tensor &pieceTensor(const Piece &p) const {
    return tensors[receivers[p.receiver].needs[p.need].tensor];
  }
  bool overlaps() const { return flags & LOADPLAN_SCHEDULE_OVERLAP; }
  /// Messages: pieces that are not joined to the one before them.
  uint64_t numMessages() const;
  loadplan_schedule_summary_t summary() const;
  std::string text(uint32_t detail) const;
};

/// What the receiver's plan makes of a need: the (box, region, target)
/// triples its pieces land in. Targets past the plan's are the fallback
/// buffers, in the order of the plan's fallback entries.
struct Destination {
  Box box;
  const Region *region;
  uint32_t target;
  uint32_t convertTo; // the write's: 0, or the dtype it converts into
  uint32_t transform; // the write's: 0, or the transform it applies
};

/// The plan side of a receiver, shared by the builder (to decide which
/// pieces land in place) and the engine (to land them).
class Landing {
public:
  Landing(const Plan &plan, const std::vector<Tensor> &tensors);

  /// The needs of a receiver of `engine` with this plan; throws
  /// INVALID_ARGUMENT where the plan and the tensors disagree.
  std::vector<Need> needs(uint32_t engine, const std::string &who) const;

  /// Where `piece` (a sub-box of `need`) lands: appends its parts; returns
  /// whether it can be received in place (one part, the whole piece, one
  /// contiguous run, neither converted nor transformed), and then its
  /// target and element offset. Throws INVALID_ARGUMENT when `piece` cuts
  /// the atoms of a transforming write.
  bool land(const Need &need, const Box &piece, std::vector<Part> &parts,
            uint32_t &target) const;

  /// Where element `offset` (of `itemSize` bytes) of `target` lies: a
  /// storage of the plan, or past them one per fallback buffer, and a byte
  /// in it. Two pieces received in place follow one another in memory when
  /// the second starts at the same storage and the first's end.
  std::pair<uint32_t, uint64_t> address(uint32_t target, int64_t offset,
                                        int64_t itemSize) const;

  /// The extents, per dim, that pieces of `need` are whole multiples of
  /// (from the need's first element): a transform's atom where its plan
  /// writes the box through one, else none (empty).
  std::vector<int64_t> granule(const Need &need) const;

  /// The fallback target of plan entry `entry`.
  uint32_t fallbackTarget(uint32_t entry) const;
  uint32_t numPlanTargets() const { return numTargets; }

private:
  void destinations(const Need &need, std::vector<Destination> &out) const;
  /// Appends the parts of transforming destination `d` restricted to
  /// `sub`: its atoms there, as boxes of the tensor `name`.
  void restrictTransformed(const std::string &name, const Destination &d,
                           const Box &sub, std::vector<Part> &out) const;

  const Plan &plan;
  const std::vector<Tensor> &tensors;
  uint32_t numTargets;
  /// Per tensor: its plan entry, or -1.
  std::vector<int64_t> entryOf;
  /// Per plan entry: its index among fallbacks, or -1.
  std::vector<int64_t> fallbackIndex;
  /// Per plan entry: the whole tensor's contiguous region.
  std::vector<Region> wholeRegion;
  /// Per plan entry: its boxes.
  std::vector<std::vector<Box>> boxes;
  /// Per plan entry, per box: its writes' regions, targets and conversions.
  struct BoxWrite {
    Region region;
    uint32_t target, convertTo, transform;
  };
  std::vector<std::vector<std::vector<BoxWrite>>> writes;
};

/// The content digest of a plan (schedule_format.h).
uint64_t planDigest(const Plan &plan);

/// Throws INVALID_ARGUMENT saying what in `spec` is wrong.
std::unique_ptr<Schedule> buildSchedule(const loadplan_schedule_spec_t &spec);

/// Collective over `options.store` (loadplan_schedule_agree): the schedule
/// rank 0 builds from every rank's offer; throws its refusal on every rank.
std::unique_ptr<Schedule> agreeOnSchedule(const loadplan_agree_options_t &options,
                                          const loadplan_schedule_offer_t &offer);

/// Sets the fingerprint, checksum and bytes of a built schedule.
void serializeSchedule(Schedule &s);

/// Throws INVALID_PLAN saying what is wrong.
std::unique_ptr<Schedule> parseSchedule(const uint8_t *data, size_t size);

/// "sender 1 (rank 3)", "receiver 0 (rank 2)": how messages name them.
std::string senderLabel(const Schedule &s, uint32_t index);
std::string receiverLabel(const Schedule &s, uint32_t index);
/// "bfloat16 [16, 8]".
std::string tensorText(const Tensor &t);

} // namespace loadplan::transfer

/// The C handle: a reference-counted schedule.
struct loadplan_schedule_t {
  std::atomic<int64_t> refs{1};
  std::unique_ptr<loadplan::transfer::Schedule> schedule;
  std::string text;
};

#endif // LOADPLAN_RUNTIME_TRANSFER_SCHEDULE_H

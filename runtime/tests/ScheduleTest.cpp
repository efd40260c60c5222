//===- ScheduleTest.cpp - Transfer geometry and schedules --------*- C++ -*-===//
//
// The geometry against element-by-element references (restricting a plan
// region to a sub-box, cutting boxes to a cap); schedules for replicas, TP
// and FSDP shards and expert subsets: pieces that cover exactly what each
// receiver's plan needs, balanced senders, rounds that keep every rank's
// staging under its cap, atomic receivers, every refused spec; and the
// schedule file: round trips, determinism, and every malformed-file case
// (truncation at every byte, random byte flips with the checksum fixed).
//
//===----------------------------------------------------------------------===//

#include "TransferTestUtil.h"

#include "../src/transfer/Geometry.h"
#include "../src/transfer/Schedule.h"

#include <functional>
#include <set>

using namespace loadplan::testing;
using loadplan::transfer::Box;
using loadplan::transfer::Part;
using loadplan::transfer::Region;

namespace {

//===----------------------------------------------------------------------===//
// Geometry
//===----------------------------------------------------------------------===//

/// Where element `index` (row-major within `box`) lands under `region`,
/// whose shape splits the box's dims: the same row-major index in it.
int64_t landingOf(int64_t index, const Region &region) {
  int64_t at = region.offset;
  for (size_t k = region.shape.size(); k-- > 0;) {
    at += index % region.shape[k] * region.stride[k];
    index /= region.shape[k];
  }
  return at;
}

/// The row-major index of `point` within `box`.
int64_t indexIn(const std::vector<int64_t> &point, const Box &box) {
  int64_t index = 0;
  for (uint32_t k = 0; k < box.rank(); ++k)
    index = index * box.extent(k) + point[k] - box.lo[k];
  return index;
}

/// A random region for a box: each dim of size > 1 split into up to three
/// factors, the resulting dims given strides in a random order (with gaps).
Region randomRegion(const Box &box, std::mt19937_64 &rng) {
  Region r;
  r.offset = int64_t(rng() % 7);
  for (uint32_t k = 0; k < box.rank(); ++k) {
    int64_t n = box.extent(k);
    std::vector<int64_t> factors;
    for (int64_t f = 2; f <= n && factors.size() < 2; ++f)
      if (n % f == 0 && rng() % 2) {
        factors.push_back(f);
        n /= f;
      }
    factors.push_back(n);
    if (rng() % 3 == 0)
      factors.insert(factors.begin() + rng() % factors.size(), 1);
    r.shape.insert(r.shape.end(), factors.begin(), factors.end());
  }
  std::vector<size_t> order(r.shape.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  r.stride.assign(r.shape.size(), 0);
  int64_t stride = 1;
  for (size_t k : order) {
    r.stride[k] = stride;
    stride *= r.shape[k] + int64_t(rng() % 2);
  }
  return r;
}

TEST(Geometry, RestrictedRegionsLandEveryElementWhereTheRegionDoes) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 400; ++trial) {
    uint32_t rank = 1 + rng() % 3;
    Box box, sub;
    for (uint32_t k = 0; k < rank; ++k) {
      int64_t lo = rng() % 4, n = 1 + rng() % 12;
      box.lo.push_back(lo);
      box.hi.push_back(lo + n);
      int64_t a = lo + rng() % n;
      sub.lo.push_back(a);
      sub.hi.push_back(a + 1 + rng() % (lo + n - a));
    }
    Region region = randomRegion(box, rng);
    std::vector<Part> parts;
    loadplan::transfer::restrictRegion(box, region, sub, parts);
    std::map<int64_t, int> seen; // landing -> times
    int64_t elements = 0;
    for (const Part &p : parts) {
      ASSERT_TRUE(loadplan::transfer::contains(sub, p.box));
      // The part's region is a split of its box, as plans require.
      int64_t n = p.box.volume(), m = 1;
      for (int64_t s : p.region.shape)
        m *= s;
      ASSERT_EQ(n, m);
      std::vector<int64_t> point(rank);
      for (int64_t i = 0; i < n; ++i) {
        int64_t rest = i;
        for (uint32_t k = rank; k-- > 0;) {
          point[k] = p.box.lo[k] + rest % p.box.extent(k);
          rest /= p.box.extent(k);
        }
        int64_t expected = landingOf(indexIn(point, box), region);
        ASSERT_EQ(landingOf(i, p.region), expected) << "trial " << trial;
        ++seen[expected];
      }
      elements += n;
    }
    EXPECT_EQ(elements, sub.volume());
    for (const auto &[at, times] : seen)
      ASSERT_EQ(times, 1);
  }
}

TEST(Geometry, AlignedSubBoxesOfSplitDimsStayOnePart) {
  // Rows [4, 8) of a box of 8 rows split (2, 4): one block.
  Box box{{0, 0}, {8, 3}}, sub{{4, 0}, {8, 3}};
  Region region{0, {2, 4, 3}, {12, 3, 1}};
  std::vector<Part> parts;
  loadplan::transfer::restrictRegion(box, region, sub, parts);
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].region.offset, 12);
  EXPECT_TRUE(loadplan::transfer::isContiguousRun(parts[0].region));
  // Rows [3, 6) cross a block boundary: a head and a tail.
  parts.clear();
  loadplan::transfer::restrictRegion(box, region, Box{{3, 0}, {6, 3}}, parts);
  EXPECT_EQ(parts.size(), 2u);
}

TEST(Geometry, ContiguityAndOffsets) {
  Box outer{{2, 0, 0}, {6, 4, 5}};
  EXPECT_TRUE(loadplan::transfer::contiguousIn(Box{{3, 0, 0}, {5, 4, 5}}, outer));
  EXPECT_TRUE(loadplan::transfer::contiguousIn(Box{{3, 1, 0}, {4, 3, 5}}, outer));
  EXPECT_TRUE(loadplan::transfer::contiguousIn(Box{{3, 1, 1}, {4, 2, 4}}, outer));
  EXPECT_FALSE(loadplan::transfer::contiguousIn(Box{{3, 1, 0}, {5, 3, 5}}, outer));
  EXPECT_FALSE(loadplan::transfer::contiguousIn(Box{{3, 0, 1}, {4, 4, 5}}, outer));
  EXPECT_EQ(loadplan::transfer::offsetIn(Box{{3, 1, 2}, {4, 2, 3}}, outer),
            1 * 20 + 1 * 5 + 2);
  EXPECT_TRUE(loadplan::transfer::isContiguousRun(Region{0, {3, 1, 4}, {4, 99, 1}}));
  EXPECT_FALSE(loadplan::transfer::isContiguousRun(Region{0, {3, 4}, {1, 3}}));
}

TEST(Geometry, SplitBoxesFitTheCapAndStayContiguous) {
  std::mt19937_64 rng(9);
  for (int trial = 0; trial < 200; ++trial) {
    Box box;
    uint32_t rank = 1 + rng() % 3;
    for (uint32_t k = 0; k < rank; ++k) {
      int64_t lo = rng() % 3;
      box.lo.push_back(lo);
      box.hi.push_back(lo + 1 + rng() % 9);
    }
    int64_t cap = 1 + rng() % 40;
    std::vector<Box> chunks;
    loadplan::transfer::splitBox(box, cap, chunks);
    int64_t total = 0;
    for (const Box &c : chunks) {
      EXPECT_LE(c.volume(), cap);
      EXPECT_TRUE(loadplan::transfer::contains(box, c));
      EXPECT_TRUE(loadplan::transfer::contiguousIn(c, box));
      total += c.volume();
    }
    EXPECT_EQ(total, box.volume());
  }
}

//===----------------------------------------------------------------------===//
// Building
//===----------------------------------------------------------------------===//

class ScheduleBuild : public ::testing::Test {
protected:
  /// `receivers` TP ranks after `senders` sender ranks.
  void setUp(int64_t senders, int64_t receivers) {
    for (int64_t r = 0; r < receivers; ++r) {
      plans.push_back(tpPlan(receivers, r));
      handles.push_back(openPlan(plans.back()));
    }
    decl.world = int32_t(senders + receivers);
    decl.tensors = tensorsOf(plans[0]);
    for (int64_t r = 0; r < receivers; ++r)
      decl.receivers.push_back({int32_t(senders + r), 0, false, handles[r].get()});
    for (int64_t s = 0; s < senders; ++s)
      decl.senders.push_back({int32_t(s), 0, {}});
  }

  void setUpFullStaged(uint64_t cap);

  uint64_t needed() const {
    uint64_t n = 0;
    for (const PlanPtr &p : handles)
      n += neededBytes(p.get());
    return n;
  }
  uint64_t model() const {
    uint64_t n = 0;
    for (const TensorDecl &t : decl.tensors)
      n += uint64_t(t.bytes());
    return n;
  }

  std::vector<TestPlan> plans;
  std::vector<PlanPtr> handles;
  ScheduleDecl decl;
};

TEST_F(ScheduleBuild, SlicedFromOneReplicaMovesExactlyWhatThePlansNeed) {
  setUp(1, 2);
  decl.engine = LOADPLAN_ENGINE_SLICED;
  decl.joinBelow = 1; // each piece a message of its own: where each lands
  decl.senders[0].holdings = wholeOf(decl.tensors);
  SchedulePtr s = decl.make();
  loadplan_schedule_summary_t sum = summaryOf(s.get());
  EXPECT_EQ(sum.bytes_moved, needed());
  EXPECT_EQ(sum.bytes_needed, needed());
  EXPECT_EQ(sum.bytes_between_ranks, needed());
  // One piece per box: qkv, o, norm, scale, two experts; per receiver.
  EXPECT_EQ(sum.num_pieces, 12u);
  // "o" is a column block: packed by the sender, in place on the receiver
  // (its live tensor is exactly the block). "norm" goes to two places:
  // staged.
  EXPECT_GT(sum.bytes_packed, 0u);
  EXPECT_EQ(sum.bytes_staged, 2u * 8 * 2);
  EXPECT_EQ(sum.num_rounds, 1u);
}

TEST_F(ScheduleBuild, FullBroadcastMovesTheModelToEveryReceiver) {
  setUp(1, 2);
  decl.engine = LOADPLAN_ENGINE_FULL;
  decl.senders[0].holdings = wholeOf(decl.tensors);
  loadplan_schedule_summary_t sum = summaryOf(decl.make().get());
  EXPECT_EQ(sum.bytes_moved, 2 * model());
  EXPECT_EQ(sum.bytes_needed, 2 * model());
  EXPECT_GT(2 * model(), needed());
}

TEST_F(ScheduleBuild, MToNGathersRowShardsIntoColumnBlocks) {
  setUp(4, 2);
  for (int64_t s = 0; s < 4; ++s)
    decl.senders[s].holdings = shardsOf(decl.tensors, 4, s);
  SchedulePtr s = decl.make();
  loadplan_schedule_summary_t sum = summaryOf(s.get());
  EXPECT_EQ(sum.bytes_moved, needed());
  // Each receiver's "o" column block comes from all four row shards.
  std::string text;
  const char *raw = nullptr;
  ASSERT_TRUE(isOk(loadplan_schedule_text(s.get(), 1, &raw, nullptr)));
  text = raw;
  for (int sender = 0; sender < 4; ++sender)
    EXPECT_NE(text.find("sender " + std::to_string(sender) +
                        " (rank " + std::to_string(sender) +
                        ") -> receiver 1 (rank 5)"),
              std::string::npos)
        << text;
  EXPECT_NE(text.find("'o' [(2, 4), (8, 16)]"), std::string::npos) << text;
  // The same spec refused by the sliced engine: no sender holds a whole box.
  decl.engine = LOADPLAN_ENGINE_SLICED;
  loadplan_schedule_t *out = nullptr;
  EXPECT_TRUE(isError(decl.build(&out), LOADPLAN_STATUS_INVALID_ARGUMENT,
                      "but no sender holds it whole"));
  EXPECT_EQ(out, nullptr);
}

TEST_F(ScheduleBuild, TpShardsToMoreReceiversAreSliced) {
  // A TP=2 trainer (rows of qkv, columns of o, experts split) to TP=4.
  setUp(2, 4);
  decl.engine = LOADPLAN_ENGINE_SLICED;
  for (int64_t s = 0; s < 2; ++s)
    for (uint32_t t = 0; t < decl.tensors.size(); ++t) {
      const TensorDecl &td = decl.tensors[t];
      if (td.name == "qkv" || td.name == "o") {
        size_t dim = td.name == "o" ? 1 : 0;
        TestBox box{{0, 0}, td.shape};
        std::tie(box.lo[dim], box.hi[dim]) = chunkOf(td.shape[dim], 2, s);
        decl.senders[s].holdings.push_back({t, box});
      } else if (td.name.rfind("expert.", 0) == 0) {
        if (std::stoi(td.name.substr(7)) % 2 == s)
          decl.senders[s].holdings.push_back({t, {}});
      } else {
        decl.senders[s].holdings.push_back({t, {}});
      }
    }
  loadplan_schedule_summary_t sum = summaryOf(decl.make().get());
  EXPECT_EQ(sum.bytes_moved, needed());
  decl.engine = LOADPLAN_ENGINE_M_TO_N;
  EXPECT_EQ(summaryOf(decl.make().get()).bytes_moved, needed());
}

TEST_F(ScheduleBuild, ReplicasShareTheWork) {
  setUp(2, 4);
  decl.engine = LOADPLAN_ENGINE_FULL;
  for (SenderDecl &x : decl.senders)
    x.holdings = wholeOf(decl.tensors);
  SchedulePtr s = decl.make();
  // Each sender sends about half of 4 receivers x the model: the greedy
  // choice keeps them within the largest tensor of each other.
  const loadplan::transfer::Schedule &sched = *s->schedule;
  uint64_t sent[2] = {0, 0};
  for (const auto &p : sched.pieces)
    sent[p.sender] += sched.pieceBytes(p);
  EXPECT_EQ(sent[0] + sent[1], 4 * model());
  EXPECT_LE(std::max(sent[0], sent[1]) - std::min(sent[0], sent[1]), 256u);
}

/// Staging per (round, rank) from the messages of a schedule (each takes
/// whole 64-byte slots), and the checks that it stays under each rank's
/// cap: under half of it in each round when rounds overlap.
void expectRoundsUnderCaps(const loadplan_schedule_t *s, uint64_t cap) {
  const loadplan::transfer::Schedule &sched = *s->schedule;
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> send, recv;
  // Bytes of the message each piece ends, added when the next one starts.
  uint64_t message = 0;
  const loadplan::transfer::Piece *last = nullptr;
  auto close = [&] {
    if (!last)
      return;
    uint64_t slot = (message + 63) / 64 * 64;
    if (last->flags & LOADPLAN_PIECE_PACKED)
      send[{last->round, last->sender}] += slot;
    if ((last->flags & LOADPLAN_PIECE_STAGED) &&
        !sched.receivers[last->receiver].atomic)
      recv[{last->round, last->receiver}] += slot;
    message = 0;
  };
  for (const auto &p : sched.pieces) {
    if (!(p.flags & LOADPLAN_PIECE_JOINED))
      close();
    message += sched.pieceBytes(p);
    last = &p;
  }
  close();
  uint64_t round = sched.overlaps() ? cap / 2 : cap;
  for (const auto &[key, bytes] : send)
    EXPECT_LE(bytes, round) << "round " << key.first << " sender " << key.second;
  for (const auto &[key, bytes] : recv)
    EXPECT_LE(bytes, round) << "round " << key.first << " receiver "
                            << key.second;
  for (const auto &x : sched.senders)
    EXPECT_LE(x.stagingBytes, cap);
}

TEST_F(ScheduleBuild, SmallCapsMakeMoreRoundsButNeverMoreStaging) {
  setUp(1, 2);
  decl.engine = LOADPLAN_ENGINE_FULL; // every receive staged
  decl.senders[0].holdings = shardsOf(decl.tensors, 1, 0);
  for (uint64_t cap : {64ull, 128ull, 256ull, 100000ull}) {
    for (SenderDecl &x : decl.senders)
      x.cap = cap;
    for (ReceiverDecl &r : decl.receivers)
      r.cap = cap;
    SchedulePtr s = decl.make();
    loadplan_schedule_summary_t sum = summaryOf(s.get());
    EXPECT_EQ(sum.bytes_moved, 2 * model());
    EXPECT_LE(sum.max_receiver_staging, cap);
    expectRoundsUnderCaps(s.get(), cap);
    if (cap == 64) {
      EXPECT_GT(sum.num_rounds, 4u);
    }
    if (cap == 100000) {
      EXPECT_EQ(sum.num_rounds, 1u);
    }
  }
  // Atomic receivers stage everything, past their cap.
  for (ReceiverDecl &r : decl.receivers) {
    r.cap = 64;
    r.atomic = true;
  }
  loadplan_schedule_summary_t sum = summaryOf(decl.make().get());
  EXPECT_EQ(sum.bytes_staged, sum.bytes_moved);
  EXPECT_GE(sum.max_receiver_staging, model());
}

TEST_F(ScheduleBuild, RefusesSpecsItCannotServe) {
  setUp(2, 2);
  decl.senders[0].holdings = shardsOf(decl.tensors, 2, 0);
  decl.senders[1].holdings = shardsOf(decl.tensors, 2, 1);
  loadplan_schedule_t *out = nullptr;
  auto refused = [&](const ScheduleDecl &d, loadplan_status_code_t code,
                     const std::string &text) {
    return isError(d.build(&out), code, text);
  };
  ASSERT_TRUE(isOk(decl.build(&out)));
  loadplan_schedule_release(out);

  ScheduleDecl d = decl;
  d.senders[1].holdings.clear();
  EXPECT_TRUE(refused(d, LOADPLAN_STATUS_INVALID_ARGUMENT,
                      "but the senders hold only"));
  d = decl;
  d.senders[1].holdings = wholeOf(d.tensors);
  EXPECT_TRUE(refused(d, LOADPLAN_STATUS_INVALID_ARGUMENT,
                      "hold overlapping but different boxes of 'qkv'"));
  d = decl;
  d.tensors[0].dtype = LOADPLAN_DTYPE_FLOAT32;
  EXPECT_TRUE(refused(d, LOADPLAN_STATUS_INVALID_ARGUMENT,
                      "its plan has 'qkv' as bfloat16 [16, 8] but the senders "
                      "declare float32 [16, 8]"));
  d = decl;
  d.tensors[0].name = "renamed";
  EXPECT_TRUE(refused(d, LOADPLAN_STATUS_INVALID_ARGUMENT,
                      "its plan needs 'qkv' but no sender declares it"));
  d = decl;
  d.tensors.push_back(d.tensors[0]);
  EXPECT_TRUE(refused(d, LOADPLAN_STATUS_INVALID_ARGUMENT, "is declared twice"));
  d = decl;
  d.senders[1].holdings.push_back(d.senders[1].holdings[0]);
  EXPECT_TRUE(refused(d, LOADPLAN_STATUS_INVALID_ARGUMENT, "holds 'qkv' twice"));
  d = decl;
  d.senders[0].holdings[0].box = {{0, 0}, {17, 8}};
  EXPECT_TRUE(refused(d, LOADPLAN_STATUS_INVALID_ARGUMENT,
                      "holds box [(0, 17), (0, 8)] of 'qkv'"));
  d = decl;
  d.senders[1].rank = 0;
  EXPECT_TRUE(refused(d, LOADPLAN_STATUS_INVALID_ARGUMENT, "is already a sender"));
  d = decl;
  d.receivers[1].rank = 7;
  EXPECT_TRUE(refused(d, LOADPLAN_STATUS_INVALID_ARGUMENT,
                      "comm_rank 7 is not in [0, 4)"));
  d = decl;
  d.receivers[0].plan = nullptr;
  EXPECT_TRUE(refused(d, LOADPLAN_STATUS_INVALID_ARGUMENT, "plan is NULL"));
  d = decl;
  d.engine = 7;
  EXPECT_TRUE(refused(d, LOADPLAN_STATUS_INVALID_ARGUMENT, "unknown engine 7"));
  d = decl;
  d.engine = LOADPLAN_ENGINE_FULL;
  for (ReceiverDecl &r : d.receivers)
    r.cap = 1;
  EXPECT_TRUE(refused(d, LOADPLAN_STATUS_INVALID_ARGUMENT,
                      "receiver 0 (rank 2): staging cap 1 is below the minimum "
                      "of 64 bytes"));
  EXPECT_TRUE(isError(loadplan_schedule_build(nullptr, &out),
                      LOADPLAN_STATUS_INVALID_ARGUMENT, "spec is NULL"));
}

// A transforming write's pieces are whole atoms of its box: the builder
// cuts them between atoms to fit a staging cap, and refuses senders whose
// holdings cut an atom and caps below one.
TEST(ScheduleBuildTransforms, PiecesAreWholeAtoms) {
  TestPlan p = tpPlan(2, 0);
  addTransformingNames(p, 2, 0);
  PlanPtr plan = openPlan(p);
  ASSERT_TRUE(plan);
  ScheduleDecl d;
  d.world = 3;
  d.tensors = tensorsOf(p);
  d.senders = {{0, 0, shardsOf(d.tensors, 2, 0)}, {1, 0, shardsOf(d.tensors, 2, 1)}};
  d.receivers = {{2, 1024, false, plan.get()}};
  SchedulePtr s = d.make();
  ASSERT_TRUE(s);
  // Every piece of a transformed box starts and ends on its atoms, and
  // the cap cut some (rank 0's gate box is 3 KiB).
  const loadplan::transfer::Schedule &sched = *s->schedule;
  int transformed = 0;
  for (const auto &piece : sched.pieces) {
    const auto &need = sched.receivers[piece.receiver].needs[piece.need];
    const std::string &name = sched.tensors[need.tensor].name;
    if (name.rfind("marlin.", 0) != 0)
      continue;
    ++transformed;
    EXPECT_EQ((piece.box.lo[0] - need.range.lo[0]) % 16, 0) << name;
    EXPECT_EQ((piece.box.hi[0] - need.range.lo[0]) % 16, 0) << name;
    EXPECT_EQ((piece.box.lo[1] - need.range.lo[1]) % 2, 0) << name;
    EXPECT_EQ((piece.box.hi[1] - need.range.lo[1]) % 2, 0) << name;
    EXPECT_TRUE(piece.flags & LOADPLAN_PIECE_STAGED) << name;
  }
  EXPECT_GT(transformed, 6);

  // Four senders: 48 rows each of gate's 192 and 16 of down's 64, whole
  // subtiles (rank 0's 96 rows cut mid-tile: two pieces, one write's box
  // each, and pieces of a box). Five: 39 rows each, mid-atom.
  for (int senders : {4, 5}) {
    ScheduleDecl cut = d;
    cut.world = senders + 1;
    cut.senders.clear();
    for (int x = 0; x < senders; ++x)
      cut.senders.push_back({x, 0, shardsOf(cut.tensors, senders, x)});
    cut.receivers[0].rank = senders;
    loadplan_schedule_t *out = nullptr;
    if (senders == 4) {
      EXPECT_TRUE(isOk(cut.build(&out)));
    } else {
      EXPECT_TRUE(isError(cut.build(&out), LOADPLAN_STATUS_INVALID_ARGUMENT,
                          "piece [(0, 39), (0, 8)] of 'marlin.gate' cuts the "
                          "atoms of its plan's transform marlin_w4 (16 rows by "
                          "2 columns from the first element of box [(0, 64), "
                          "(0, 8)]): every sender must hold whole atoms of it"));
    }
    SchedulePtr keep(out);
  }

  // A staging cap whose round cannot hold one atom (128 bytes).
  ScheduleDecl small = d;
  small.receivers[0].cap = 128;
  loadplan_schedule_t *out = nullptr;
  EXPECT_TRUE(isError(small.build(&out), LOADPLAN_STATUS_INVALID_ARGUMENT,
                      "is at least one atom of its plan's transform (16 x 2 "
                      "elements, 128 bytes), more than a round's part of the "
                      "staging cap of receiver 0 (rank 2)"));
  EXPECT_EQ(out, nullptr);
}

//===----------------------------------------------------------------------===//
// Messages and overlapping rounds
//===----------------------------------------------------------------------===//

/// Counts what `s` does with each piece: joined pieces, messages.
struct MessageCount {
  uint64_t pieces = 0, messages = 0, joined = 0;
  explicit MessageCount(const loadplan_schedule_t *s) {
    for (const auto &p : s->schedule->pieces) {
      ++pieces;
      (p.flags & LOADPLAN_PIECE_JOINED ? joined : messages) += 1;
    }
  }
};

TEST_F(ScheduleBuild, SmallPiecesBetweenAPairTravelAsOneMessage) {
  setUp(1, 2);
  decl.engine = LOADPLAN_ENGINE_SLICED;
  decl.senders[0].holdings = wholeOf(decl.tensors);
  decl.joinBelow = 1;
  loadplan_schedule_summary_t alone = summaryOf(decl.make().get());
  EXPECT_EQ(alone.num_messages, alone.num_pieces);
  EXPECT_EQ(alone.join_below, 1u);
  decl.joinBelow = 0; // the default: every piece here is small
  SchedulePtr s = decl.make();
  loadplan_schedule_summary_t sum = summaryOf(s.get());
  EXPECT_EQ(sum.join_below, LOADPLAN_DEFAULT_JOIN_BELOW);
  EXPECT_EQ(sum.num_pieces, alone.num_pieces);
  EXPECT_EQ(sum.num_messages, 2u); // one per receiver
  EXPECT_EQ(MessageCount(s.get()).messages, 2u);
  // The same bytes; their destinations are several tensors: packed by the
  // sender, scattered by the receiver.
  EXPECT_EQ(sum.bytes_moved, alone.bytes_moved);
  EXPECT_EQ(sum.bytes_needed, needed());
  EXPECT_EQ(sum.bytes_packed, sum.bytes_moved);
  EXPECT_EQ(sum.bytes_staged, sum.bytes_moved);
  // Largest elements first: every offset stays a multiple of its element
  // size, and each message's pieces follow one another.
  const loadplan::transfer::Schedule &sched = *s->schedule;
  for (size_t i = 1; i < sched.pieces.size(); ++i) {
    const auto &p = sched.pieces[i], &prev = sched.pieces[i - 1];
    if (!(p.flags & LOADPLAN_PIECE_JOINED))
      continue;
    EXPECT_EQ(p.sendOffset, prev.sendOffset + sched.pieceBytes(prev));
    EXPECT_EQ(p.recvOffset, prev.recvOffset + sched.pieceBytes(prev));
    EXPECT_EQ(p.sendOffset % uint64_t(sched.pieceTensor(p).itemSize()), 0u);
  }
  // A threshold below every piece joins none.
  decl.joinBelow = 8;
  EXPECT_EQ(summaryOf(decl.make().get()).num_messages, alone.num_messages);
}

/// A receiver of `experts` experts [4, 4] bf16, expert e at slot
/// `slot(e)` of one target of `slots` slots.
TestPlan expertPlan(int64_t experts, int64_t slots,
                    const std::function<int64_t(int64_t)> &slot) {
  constexpr uint32_t bf16 = LOADPLAN_DTYPE_BFLOAT16;
  TestPlan p;
  p.storageSizes = {uint64_t(slots * 16 * 2)};
  uint32_t w = p.addTarget({"experts", "w", 0, 0, bf16, {slots, 4, 4}, {16, 4, 1}});
  for (int64_t e = 0; e < experts; ++e)
    p.entries.push_back({"expert." + std::to_string(e), LOADPLAN_KIND_DIRECT, bf16,
                         {4, 4}, std::nullopt, {{{0, 0}, {4, 4}}},
                         {{w, 0, slot(e) * 16, {4, 4}, {4, 1}}}});
  return p;
}

/// Rank 0 holding every tensor of `plan` whole, rank 1 receiving by
/// `handle` (its plan), not atomic.
ScheduleDecl oneToOne(const TestPlan &plan, loadplan_plan_t *handle) {
  ScheduleDecl d;
  d.world = 2;
  d.tensors = tensorsOf(plan);
  d.senders.push_back({0, 0, wholeOf(d.tensors)});
  d.receivers.push_back({1, 0, false, handle});
  return d;
}

TEST_F(ScheduleBuild, JoinedPiecesThatLineUpArriveInPlace) {
  // Experts in reverse order of their slots: the builder orders a message
  // by destination, so they still arrive as one run; with a gap between
  // slots they cannot, and are staged.
  for (bool gap : {false, true}) {
    int64_t experts = 32;
    TestPlan plan = expertPlan(experts, gap ? 2 * experts : experts, [&](int64_t e) {
      return (experts - 1 - e) * (gap ? 2 : 1);
    });
    PlanPtr handle = openPlan(plan);
    ScheduleDecl d = oneToOne(plan, handle.get());
    SchedulePtr s = d.make();
    loadplan_schedule_summary_t sum = summaryOf(s.get());
    EXPECT_EQ(sum.num_pieces, uint64_t(experts));
    EXPECT_EQ(sum.num_messages, 1u);
    // Each expert is a tensor of its own on the sender: packed.
    EXPECT_EQ(sum.bytes_packed, sum.bytes_moved);
    EXPECT_EQ(sum.bytes_in_place, gap ? 0u : sum.bytes_moved) << gap;
    EXPECT_EQ(sum.max_receiver_staging, gap ? sum.bytes_moved : 0u) << gap;
    // An atomic receiver stages it all the same.
    d.receivers[0].atomic = true;
    EXPECT_EQ(summaryOf(d.make().get()).bytes_staged, sum.bytes_moved);
  }
}

TEST_F(ScheduleBuild, LongRunsOfSmallPiecesArriveInPlaceEachAsItsMessage) {
  // Two layers' experts, each layer's into a tensor of its own: joined
  // into one message they would be staged (several runs); each run of at
  // least join_below bytes is a message of its own, received in place.
  // Short runs are joined with the rest, staged, as before.
  constexpr uint32_t bf16 = LOADPLAN_DTYPE_BFLOAT16;
  int64_t experts = 32;
  TestPlan plan;
  for (int64_t layer = 0; layer < 4; ++layer) {
    // Layers 2 and 3 have 2 experts: runs of 64 bytes.
    int64_t n = layer >= 2 ? 2 : experts;
    plan.storageSizes.push_back(uint64_t(n * 16 * 2));
    uint32_t w = plan.addTarget({"layer" + std::to_string(layer), "w",
                                 uint32_t(layer), 0, bf16, {n, 4, 4}, {16, 4, 1}});
    for (int64_t e = 0; e < n; ++e)
      plan.entries.push_back(
          {"layer" + std::to_string(layer) + ".expert." + std::to_string(e),
           LOADPLAN_KIND_DIRECT, bf16, {4, 4}, std::nullopt, {{{0, 0}, {4, 4}}},
           {{w, 0, e * 16, {4, 4}, {4, 1}}}});
  }
  PlanPtr handle = openPlan(plan);
  ScheduleDecl d = oneToOne(plan, handle.get());
  d.joinBelow = 512; // each piece 32 bytes, each long run 1024
  SchedulePtr s = d.make();
  loadplan_schedule_summary_t sum = summaryOf(s.get());
  EXPECT_EQ(sum.num_pieces, uint64_t(2 * experts + 4));
  EXPECT_EQ(sum.num_messages, 3u);
  EXPECT_EQ(sum.bytes_in_place, uint64_t(2 * experts * 32));
  EXPECT_EQ(sum.bytes_staged, 128u);
  // Each run's pieces follow one another in its message.
  const loadplan::transfer::Schedule &sched = *s->schedule;
  for (size_t i = 1; i < sched.pieces.size(); ++i) {
    if (sched.pieces[i].flags & LOADPLAN_PIECE_JOINED) {
      EXPECT_EQ(sched.pieces[i].sendOffset,
                sched.pieces[i - 1].sendOffset + sched.pieceBytes(sched.pieces[i - 1]));
    }
  }
  // An atomic receiver stages everything: one message, as before.
  d.receivers[0].atomic = true;
  loadplan_schedule_summary_t atomic = summaryOf(d.make().get());
  EXPECT_EQ(atomic.num_messages, 1u);
  EXPECT_EQ(atomic.bytes_staged, atomic.bytes_moved);
  // A threshold above the long runs joins them all, staged.
  d.receivers[0].atomic = false;
  d.joinBelow = 4096;
  loadplan_schedule_summary_t joined = summaryOf(d.make().get());
  EXPECT_EQ(joined.num_messages, 1u);
  EXPECT_EQ(joined.bytes_in_place, 0u);
}

/// One sender holding everything to two receivers that stage every
/// receive (full broadcast), every rank's staging capped at `cap`.
void ScheduleBuild::setUpFullStaged(uint64_t cap) {
  setUp(1, 2);
  decl.engine = LOADPLAN_ENGINE_FULL;
  decl.senders[0].holdings = shardsOf(decl.tensors, 1, 0);
  for (ReceiverDecl &r : decl.receivers)
    r.cap = cap;
  decl.senders[0].cap = cap;
}

TEST_F(ScheduleBuild, OverlappingRoundsUseHalfTheCapEach) {
  setUpFullStaged(256);
  SchedulePtr s = decl.make();
  const loadplan::transfer::Schedule &sched = *s->schedule;
  ASSERT_TRUE(sched.overlaps());
  EXPECT_GT(sched.numRounds, 2u);
  expectRoundsUnderCaps(s.get(), 256);
  // Odd rounds' staging lies after the most any even round uses.
  for (uint32_t r = 0; r < sched.receivers.size(); ++r) {
    uint64_t evenEnd = 0, oddBegin = UINT64_MAX;
    for (const auto &p : sched.pieces)
      if (p.receiver == r) {
        if (p.round & 1)
          oddBegin = std::min(oddBegin, p.recvOffset);
        else
          evenEnd = std::max(evenEnd, p.recvOffset + sched.pieceBytes(p));
      }
    EXPECT_LE(evenEnd, oddBegin) << "receiver " << r;
    EXPECT_LE(sched.receivers[r].stagingBytes, 256u);
  }
  // Asked to run rounds in turn, or with a cap of one slot: no halves.
  decl.sequential = true;
  SchedulePtr inTurn = decl.make();
  EXPECT_FALSE(inTurn->schedule->overlaps());
  EXPECT_LT(inTurn->schedule->numRounds, sched.numRounds);
  expectRoundsUnderCaps(inTurn.get(), 256);
  decl.sequential = false;
  decl.receivers[0].cap = 64;
  EXPECT_FALSE(decl.make()->schedule->overlaps());
  EXPECT_NE(summaryOf(inTurn.get()).fingerprint, summaryOf(s.get()).fingerprint);
}

TEST_F(ScheduleBuild, AFileThatUsesStagingTwiceAtOnceIsRefused) {
  using loadplan::transfer::Schedule;
  setUpFullStaged(1024);
  decl.joinBelow = 1; // each piece a message of its own
  SchedulePtr made = decl.make();
  const Schedule &good = *made->schedule;
  ASSERT_TRUE(good.overlaps());
  // Receiver 0's staged pieces that are a message alone, by round.
  std::map<uint32_t, std::vector<size_t>> alone;
  for (size_t i = 0; i < good.pieces.size(); ++i) {
    const auto &p = good.pieces[i];
    bool joinedNext = i + 1 < good.pieces.size() &&
                      (good.pieces[i + 1].flags & LOADPLAN_PIECE_JOINED);
    if (p.receiver == 0 && (p.flags & LOADPLAN_PIECE_STAGED) &&
        !(p.flags & LOADPLAN_PIECE_JOINED) && !joinedNext)
      alone[p.round].push_back(i);
  }
  ASSERT_GE(alone[0].size(), 2u);
  ASSERT_GE(alone[1].size(), 1u);
  auto refused = [&](size_t moved, size_t onto) {
    Schedule bad = good;
    bad.pieces[moved].recvOffset = bad.pieces[onto].recvOffset;
    loadplan::transfer::serializeSchedule(bad);
    loadplan_schedule_t *raw = nullptr;
    loadplan_status_t status = loadplan_schedule_open_bytes(bad.bytes.data(),
                                                             bad.bytes.size(), &raw);
    loadplan_schedule_release(raw);
    return isError(status, LOADPLAN_STATUS_INVALID_PLAN,
                   "share bytes of receiver 0's staging, which both use at once");
  };
  // Two pieces of one round in one slot; a piece of round 1 in round 0's
  // slot, which is scattered while round 1 arrives.
  EXPECT_TRUE(refused(alone[0][1], alone[0][0]));
  EXPECT_TRUE(refused(alone[1][0], alone[0][0]));
  // As built, the file opens.
  loadplan_schedule_t *raw = nullptr;
  EXPECT_TRUE(isOk(loadplan_schedule_open_bytes(good.bytes.data(), good.bytes.size(), &raw)));
  loadplan_schedule_release(raw);
}

//===----------------------------------------------------------------------===//
// The file
//===----------------------------------------------------------------------===//

class ScheduleFile : public ScheduleBuild {
protected:
  void SetUp() override {
    setUp(2, 2);
    decl.senders[0].holdings = shardsOf(decl.tensors, 2, 0);
    decl.senders[1].holdings = shardsOf(decl.tensors, 2, 1);
    for (ReceiverDecl &r : decl.receivers)
      r.cap = 64;
    schedule = decl.make();
    bytes = bytesOf(schedule.get());
  }

  loadplan_status_t open(const std::vector<uint8_t> &b) {
    loadplan_schedule_t *raw = nullptr;
    loadplan_status_t s = loadplan_schedule_open_bytes(b.data(), b.size(), &raw);
    loadplan_schedule_release(raw);
    return s;
  }

  /// `b` with its header's payload size and checksum made right for its
  /// payload.
  static std::vector<uint8_t> resealed(std::vector<uint8_t> b) {
    loadplan_format::resealHeader(b.data(), b.size());
    return b;
  }

  SchedulePtr schedule;
  std::vector<uint8_t> bytes;
};

TEST_F(ScheduleFile, RoundTripsAndIsDeterministic) {
  loadplan_schedule_t *raw = nullptr;
  ASSERT_TRUE(isOk(loadplan_schedule_open_bytes(bytes.data(), bytes.size(), &raw)));
  SchedulePtr reopened(raw);
  EXPECT_EQ(bytesOf(reopened.get()), bytes);
  loadplan_schedule_summary_t a = summaryOf(schedule.get()),
                              b = summaryOf(reopened.get());
  EXPECT_EQ(a.fingerprint, b.fingerprint);
  EXPECT_EQ(a.checksum, b.checksum);
  EXPECT_EQ(a.num_pieces, b.num_pieces);
  EXPECT_EQ(a.bytes_moved, b.bytes_moved);
  EXPECT_GT(a.num_rounds, 1u);
  // The same inputs give the same bytes; other inputs another fingerprint.
  EXPECT_EQ(bytesOf(decl.make().get()), bytes);
  ScheduleDecl other = decl;
  other.receivers[0].cap = 128;
  EXPECT_NE(summaryOf(other.make().get()).fingerprint, a.fingerprint);
  other = decl;
  TestPlan changed = plans[1];
  changed.targets[0].module = "attn.qkv2";
  PlanPtr changedPlan = openPlan(changed);
  other.receivers[1].plan = changedPlan.get();
  EXPECT_NE(summaryOf(other.make().get()).fingerprint, a.fingerprint);
}

TEST_F(ScheduleFile, RefusesBadHeaders) {
  std::vector<uint8_t> b = bytes;
  b[0] = 'X';
  EXPECT_TRUE(isError(open(b), LOADPLAN_STATUS_INVALID_PLAN, "not a schedule file"));
  b = bytes;
  b[FileHeader::kVersionAt] = 9;
  EXPECT_TRUE(isError(open(b), LOADPLAN_STATUS_INVALID_PLAN, "version 9 is not 3"));
  b[FileHeader::kVersionAt] = 2; // a schedule of the last format
  EXPECT_TRUE(isError(open(resealed(b)), LOADPLAN_STATUS_INVALID_PLAN,
                      "version 2 is not 3, the version this runtime reads; the "
                      "schedule was made by an older loadplan: make it again"));
  b = bytes;
  b.push_back(0);
  EXPECT_TRUE(isError(open(b), LOADPLAN_STATUS_INVALID_PLAN,
                      "payload bytes but"));
  b = bytes;
  b.back() ^= 1;
  EXPECT_TRUE(isError(open(b), LOADPLAN_STATUS_INVALID_PLAN, "checksum"));
  b = bytes;
  b[FileHeader::kFingerprintAt] ^= 1;
  EXPECT_TRUE(isError(open(b), LOADPLAN_STATUS_INVALID_PLAN,
                      "is not that of its inputs"));
  // A plan file is not a schedule.
  std::vector<uint8_t> plan = plans[0].bytes();
  EXPECT_TRUE(isError(open(plan), LOADPLAN_STATUS_INVALID_PLAN,
                      "not a schedule file"));
}

TEST_F(ScheduleFile, RefusesJoinedPiecesThatDoNotFollow) {
  using loadplan::transfer::Schedule;
  const Schedule &good = *schedule->schedule;
  size_t joined = 0;
  while (joined < good.pieces.size() &&
         !(good.pieces[joined].flags & LOADPLAN_PIECE_JOINED))
    ++joined;
  ASSERT_LT(joined, good.pieces.size()) << "the fixture joins no pieces";
  auto refused = [&](const std::function<void(Schedule &)> &change,
                     const std::string &message) {
    Schedule bad = good;
    change(bad);
    loadplan::transfer::serializeSchedule(bad);
    return isError(open(bad.bytes), LOADPLAN_STATUS_INVALID_PLAN, message);
  };
  EXPECT_TRUE(refused(
      [](Schedule &s) { s.pieces[0].flags |= LOADPLAN_PIECE_JOINED; },
      "piece 0: it is joined but is the first piece"));
  EXPECT_TRUE(refused(
      [&](Schedule &s) { s.pieces[joined].sendOffset += 2; },
      "does not follow the piece before it"));
  EXPECT_TRUE(refused(
      [&](Schedule &s) { s.pieces[joined].flags ^= LOADPLAN_PIECE_STAGED; },
      "it is joined to the piece before it but has another sender, receiver, "
      "round, or packing or staging"));
  EXPECT_TRUE(refused([](Schedule &s) { s.flags = 6; }, "unknown flags 6"));
}

TEST_F(ScheduleFile, TruncatedAnywhereIsRefused) {
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<uint8_t> b(bytes.begin(), bytes.begin() + n);
    // Make the header agree, so that the payload checks are reached.
    if (n >= FileHeader::kSize)
      b = resealed(b);
    ASSERT_TRUE(isError(open(b), LOADPLAN_STATUS_INVALID_PLAN, "")) << n;
  }
}

TEST_F(ScheduleFile, RandomByteFlipsNeverCrash) {
  std::mt19937_64 rng(3);
  int refused = 0;
  for (int trial = 0; trial < 5000; ++trial) {
    std::vector<uint8_t> b = bytes;
    int flips = 1 + int(rng() % 3);
    for (int f = 0; f < flips; ++f)
      b[FileHeader::kSize + rng() % (b.size() - FileHeader::kSize)] ^=
          uint8_t(1 + rng() % 255);
    loadplan_status_t s = open(resealed(b));
    if (s) {
      ++refused;
      EXPECT_EQ(loadplan_status_code(s), LOADPLAN_STATUS_INVALID_PLAN)
          << loadplan_status_message(s);
      loadplan_status_free(s);
    }
  }
  EXPECT_GT(refused, 4000);
}

TEST_F(ScheduleFile, NullArguments) {
  loadplan_schedule_t *raw = nullptr;
  EXPECT_TRUE(isError(loadplan_schedule_open_bytes(nullptr, 10, &raw),
                      LOADPLAN_STATUS_INVALID_ARGUMENT, "schedule data is NULL"));
  EXPECT_TRUE(isError(loadplan_schedule_open_bytes(bytes.data(), bytes.size(), nullptr),
                      LOADPLAN_STATUS_INVALID_ARGUMENT, "out_schedule is NULL"));
  loadplan_schedule_summary_t sum;
  EXPECT_TRUE(isError(loadplan_schedule_summary(nullptr, &sum),
                      LOADPLAN_STATUS_INVALID_ARGUMENT, "schedule is NULL"));
  EXPECT_STREQ(loadplan_engine_name(LOADPLAN_ENGINE_M_TO_N), "m_to_n");
  EXPECT_EQ(loadplan_engine_name(9), nullptr);
}

} // namespace

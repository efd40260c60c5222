//===- ScheduleFormat.cpp - Write and parse schedule bytes ------*- C++ -*-===//
//
// The schedule file (schedule_format.h): its one writer and its reader,
// and the fingerprint and plan digest it carries. Parsing: every byte is
// hostile until checked, as for plans; a schedule that parses can be run
// by an engine without further checks of its indices, boxes and offsets.
//
//===----------------------------------------------------------------------===//

#include "Schedule.h"
#include "../Status.h"
#include "loadplan/format/ByteIO.h"

#include <algorithm>
#include <cstring>
#include <tuple>
#include <unordered_set>

using namespace loadplan;
using namespace loadplan::transfer;
using loadplan_format::ByteReader;
using loadplan_format::ByteWriter;
using loadplan_format::Hasher;
using loadplan_format::hex64;

//===----------------------------------------------------------------------===//
// Fingerprint and digest
//===----------------------------------------------------------------------===//

namespace {

/// A box as the fingerprint hashes it: its starts, then its stops.
void hashBox(Hasher &h, const Box &b) {
  h.i64s(b.lo);
  h.i64s(b.hi);
}

/// The fingerprint of what a schedule was built from (schedule_format.h).
uint64_t inputFingerprint(const Schedule &s) {
  Hasher h;
  h.u64(s.engine);
  h.u64(s.worldSize);
  h.u64(s.flags);
  h.u64(s.joinBelow);
  for (const Tensor &t : s.tensors) {
    h.str(t.name);
    h.u64(t.dtype);
    h.u64(t.shape.size());
    h.i64s(t.shape);
  }
  for (const Sender &x : s.senders) {
    h.u64(x.commRank);
    h.u64(x.stagingCap);
    h.u64(x.holdings.size());
    for (const Holding &hd : x.holdings) {
      h.u64(hd.tensor);
      hashBox(h, hd.box);
    }
  }
  for (const Receiver &r : s.receivers) {
    h.u64(r.commRank);
    h.u64(r.stagingCap);
    h.u64(r.atomic);
    h.u64(r.planFingerprint);
    h.u64(r.planDigest);
  }
  return h.value;
}

} // namespace

uint64_t loadplan::transfer::planDigest(const Plan &plan) {
  Hasher h;
  h.u64(plan.fingerprint);
  for (const Entry &e : plan.entries) {
    h.str(e.name);
    h.u64(e.kind);
    h.u64(e.dtype);
    h.u64(e.rank());
    h.i64s(e.shape);
    h.u64(e.boxes.size());
    for (const Box &b : e.boxes)
      for (uint32_t k = 0; k < b.rank(); ++k) {
        h.u64(uint64_t(b.lo[k]));
        h.u64(uint64_t(b.hi[k]));
      }
    h.u64(e.writes.size());
    for (const Write &w : e.writes) {
      h.u64(w.target);
      h.u64(w.box);
      h.u64(w.convertTo);
      if (w.transform) // absent for plans without: their digests stay
        h.u64(w.transform);
      h.u64(uint64_t(w.offset));
      h.u64(w.shape.size());
      h.i64s(w.shape);
      h.i64s(w.stride);
    }
  }
  return h.value;
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

namespace {

/// A box as schedule_format.h lays it out: (start, stop) per dim.
void writeBox(ByteWriter &w, const Box &b) {
  for (uint32_t k = 0; k < b.rank(); ++k) {
    w.i64(b.lo[k]);
    w.i64(b.hi[k]);
  }
}

} // namespace

void loadplan::transfer::serializeSchedule(Schedule &s) {
  ByteWriter p = loadplan_format::startFile();
  p.u32(s.engine);
  p.u32(s.worldSize);
  p.u32(s.numRounds);
  p.u32(s.flags);
  p.u64(s.joinBelow);
  p.u32(uint32_t(s.tensors.size()));
  for (const Tensor &t : s.tensors) {
    p.str(t.name);
    p.u32(t.dtype);
    p.u32(uint32_t(t.shape.size()));
    p.i64s(t.shape);
  }
  p.u32(uint32_t(s.senders.size()));
  for (const Sender &x : s.senders) {
    p.u32(x.commRank);
    p.u64(x.stagingCap);
    p.u64(x.stagingBytes);
    p.u32(uint32_t(x.holdings.size()));
    for (const Holding &h : x.holdings) {
      p.u32(h.tensor);
      writeBox(p, h.box);
    }
  }
  p.u32(uint32_t(s.receivers.size()));
  for (const Receiver &r : s.receivers) {
    p.u32(r.commRank);
    p.u64(r.stagingCap);
    p.u64(r.stagingBytes);
    p.u8(r.atomic);
    p.u64(r.planFingerprint);
    p.u64(r.planDigest);
    p.u32(uint32_t(r.needs.size()));
    for (const Need &n : r.needs) {
      p.u32(n.tensor);
      p.u8(n.kind);
      p.u32(n.box);
      writeBox(p, n.range);
    }
  }
  p.u64(s.pieces.size());
  for (const Piece &x : s.pieces) {
    p.u32(x.sender);
    p.u32(x.receiver);
    p.u32(x.holding);
    p.u32(x.need);
    p.u32(x.round);
    p.u8(x.flags);
    p.u64(x.sendOffset);
    p.u64(x.recvOffset);
    writeBox(p, x.box);
  }
  s.fingerprint = inputFingerprint(s);
  s.checksum = loadplan_format::writeHeader(
      p, LOADPLAN_SCHEDULE_MAGIC, LOADPLAN_SCHEDULE_VERSION, s.fingerprint);
  s.bytes.assign(p.bytes.begin(), p.bytes.end());
}

//===----------------------------------------------------------------------===//
// Parsing
//===----------------------------------------------------------------------===//

namespace {

[[noreturn]] void invalid(const std::string &message) {
  throw StatusError(LOADPLAN_STATUS_INVALID_PLAN, "schedule: " + message);
}

/// Reads of schedule bytes: running out of bytes is an INVALID_PLAN that
/// says which field ran out where.
class Reader : public ByteReader {
public:
  using ByteReader::ByteReader;

  /// A count of records of at least `minBytes` each, checked against the
  /// bytes left before anything is allocated for them.
  uint64_t count(uint64_t n, size_t minBytes, const std::string &what) {
    if (minBytes && n > left() / minBytes)
      invalid(concat(what, ": ", n, " records cannot fit in the ", left(),
                     " bytes left at byte ", offset()));
    return n;
  }
  Box box(uint32_t rank, const std::string &what) {
    count(rank, 16, what);
    Box b;
    for (uint32_t k = 0; k < rank; ++k) {
      b.lo.push_back(i64(what));
      b.hi.push_back(i64(what));
    }
    return b;
  }

protected:
  [[noreturn]] void truncated(const loadplan_format::Field &what,
                              size_t n) override {
    invalid("truncated: " + shortfall(what, n));
  }
};

/// A joined piece `p` (not yet in `s.pieces`) travels with the piece
/// before it: same ends, round and flags, its bytes right after that
/// piece's where they are in staging or in one holding.
void checkJoined(const Schedule &s, const Piece &p, const std::string &label) {
  if (s.pieces.empty())
    invalid(concat(label, ": it is joined but is the first piece"));
  const Piece &prev = s.pieces.back();
  uint8_t how = LOADPLAN_PIECE_PACKED | LOADPLAN_PIECE_STAGED;
  if (prev.sender != p.sender || prev.receiver != p.receiver ||
      prev.round != p.round || (prev.flags & how) != (p.flags & how))
    invalid(concat(label, ": it is joined to the piece before it but has "
                   "another sender, receiver, round, or packing or staging"));
  uint64_t after = prev.sendOffset + s.pieceBytes(prev);
  if (p.sendOffset != after ||
      (!(p.flags & LOADPLAN_PIECE_PACKED) && prev.holding != p.holding))
    invalid(concat(label, ": it is joined but its send offset ", p.sendOffset,
                   " does not follow the piece before it (", after,
                   " in the same staging or holding)"));
  after = prev.recvOffset + s.pieceBytes(prev);
  if ((p.flags & LOADPLAN_PIECE_STAGED) && p.recvOffset != after)
    invalid(concat(label, ": it is joined but its receive offset ",
                   p.recvOffset, " does not follow the piece before it (",
                   after, ")"));
}

/// Where piece `piece` uses a rank's staging in round `round`.
struct StagingUse {
  uint64_t begin, end;
  uint32_t round;
  uint64_t piece;
};

/// Refuses two uses in `uses` (of one rank's staging, `who`) that share
/// bytes. Of a start-sorted list of ranges, some two that overlap are
/// next to each other.
void checkApart(std::vector<StagingUse> &uses, const std::string &who) {
  std::sort(uses.begin(), uses.end(), [](const StagingUse &a, const StagingUse &b) {
    return std::tie(a.begin, a.end, a.piece) < std::tie(b.begin, b.end, b.piece);
  });
  for (size_t k = 1; k < uses.size(); ++k)
    if (uses[k - 1].end > uses[k].begin)
      invalid(concat("pieces ", uses[k - 1].piece, " and ", uses[k].piece,
                     " (rounds ", uses[k - 1].round, " and ", uses[k].round,
                     ") share bytes of ", who,
                     "'s staging, which both use at once"));
}

/// The staging a rank uses at once is apart: the pieces of one round; with
/// overlap, those of two consecutive rounds (one is packed or scattered
/// while the other is in flight); on an atomic receiver, every piece (its
/// staging keeps the whole update). The engine writes staging where the
/// schedule says: a schedule that reused bytes still in use would mix up
/// two pieces' bytes.
void checkStagingApart(const Schedule &s) {
  std::vector<std::vector<StagingUse>> send(s.senders.size()), recv(s.receivers.size());
  for (uint64_t i = 0; i < s.pieces.size(); ++i) {
    const Piece &p = s.pieces[i];
    uint64_t bytes = s.pieceBytes(p);
    if (p.flags & LOADPLAN_PIECE_PACKED)
      send[p.sender].push_back({p.sendOffset, p.sendOffset + bytes, p.round, i});
    if (p.flags & LOADPLAN_PIECE_STAGED)
      recv[p.receiver].push_back({p.recvOffset, p.recvOffset + bytes, p.round, i});
  }
  auto byRounds = [&](std::vector<StagingUse> &uses, const std::string &who) {
    // Grouped by round (pieces come in round order), then each round alone
    // or, with overlap, with the round after it.
    std::stable_sort(uses.begin(), uses.end(), [](const StagingUse &a, const StagingUse &b) {
      return a.round < b.round;
    });
    size_t begin = 0;
    while (begin < uses.size()) {
      size_t end = begin;
      while (end < uses.size() && uses[end].round == uses[begin].round)
        ++end;
      size_t next = end;
      if (s.overlaps())
        while (next < uses.size() && uses[next].round == uses[begin].round + 1)
          ++next;
      std::vector<StagingUse> atOnce(uses.begin() + long(begin), uses.begin() + long(next));
      checkApart(atOnce, who);
      begin = end;
    }
  };
  for (size_t i = 0; i < send.size(); ++i)
    byRounds(send[i], concat("sender ", i));
  for (size_t i = 0; i < recv.size(); ++i) {
    if (s.receivers[i].atomic)
      checkApart(recv[i], concat("receiver ", i));
    else
      byRounds(recv[i], concat("receiver ", i));
  }
}

void checkBox(const Box &b, const Tensor &t, const std::string &what) {
  if (!boxInside(b, t.shape))
    invalid(concat(what, ": box ", boxText(b), " is empty or not inside ",
                   quote(t.name), " ", t.shape));
}

} // namespace

std::unique_ptr<Schedule> loadplan::transfer::parseSchedule(const uint8_t *data,
                                                            size_t size) {
  if (!data && size)
    fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "schedule data is NULL");
  if (size < LOADPLAN_SCHEDULE_HEADER_SIZE)
    invalid(concat("truncated: ", size, " bytes, but the header alone takes ",
                   LOADPLAN_SCHEDULE_HEADER_SIZE));
  if (std::memcmp(data, LOADPLAN_SCHEDULE_MAGIC, LOADPLAN_SCHEDULE_MAGIC_SIZE))
    invalid("not a schedule file: the magic is not \"LPSCHEDL\"");
  Reader h(data + 8, LOADPLAN_SCHEDULE_HEADER_SIZE - 8, 8);
  uint32_t version = h.u32("version");
  if (version != LOADPLAN_SCHEDULE_VERSION)
    invalid(concat("version ", version, " is not ", LOADPLAN_SCHEDULE_VERSION,
                   version < LOADPLAN_SCHEDULE_VERSION
                       ? ", the version this runtime reads; the schedule was "
                         "made by an older loadplan: make it again"
                       : ", the version this runtime reads"));
  uint32_t headerSize = h.u32("header size");
  if (headerSize != LOADPLAN_SCHEDULE_HEADER_SIZE)
    invalid(concat("header size ", headerSize, " is not ",
                   LOADPLAN_SCHEDULE_HEADER_SIZE));
  uint64_t fingerprint = h.u64("fingerprint");
  uint64_t payloadSize = h.u64("payload size");
  uint64_t checksum = h.u64("checksum");
  if (payloadSize != size - LOADPLAN_SCHEDULE_HEADER_SIZE)
    invalid(concat("the header says ", payloadSize, " payload bytes but ",
                   size - LOADPLAN_SCHEDULE_HEADER_SIZE, " follow"));
  const uint8_t *payload = data + LOADPLAN_SCHEDULE_HEADER_SIZE;
  uint64_t actual = loadplan_checksum64(payload, payloadSize);
  if (actual != checksum)
    invalid(concat("checksum ", hex64(actual), " of the payload is not the "
                   "header's ", hex64(checksum)));

  auto s = std::make_unique<Schedule>();
  Reader r(payload, payloadSize, LOADPLAN_SCHEDULE_HEADER_SIZE);
  s->engine = r.u32("engine");
  if (s->engine >= LOADPLAN_ENGINE_COUNT_)
    invalid(concat("unknown engine ", s->engine));
  s->worldSize = r.u32("world size");
  if (s->worldSize == 0 || s->worldSize > (1u << 24))
    invalid(concat("world size ", s->worldSize, " is not in [1, 2^24]"));
  s->numRounds = r.u32("rounds");
  s->flags = r.u32("flags");
  if (s->flags & ~uint32_t(LOADPLAN_SCHEDULE_OVERLAP))
    invalid(concat("unknown flags ", s->flags));
  s->joinBelow = r.u64("join_below");

  uint64_t numTensors = r.count(r.u32("tensor count"), 12, "tensors");
  std::unordered_set<std::string> names;
  for (uint64_t i = 0; i < numTensors; ++i) {
    std::string label = concat("tensor ", i);
    Tensor t;
    t.name = r.str(label + " name");
    if (!names.insert(t.name).second)
      invalid(concat(label, " ", quote(t.name), " is declared twice"));
    t.dtype = r.u32(label + " dtype");
    if (!loadplan_dtype_size(t.dtype))
      invalid(concat(label, ": unknown dtype ", t.dtype));
    uint32_t rank = r.u32(label + " rank");
    if (rank > kMaxRank)
      invalid(concat(label, ": rank ", rank, " is more than ", kMaxRank));
    int64_t bytes = t.itemSize();
    for (uint32_t k = 0; k < rank; ++k) {
      int64_t n = int64_t(r.u64(label + " shape"));
      if (n < 0 || (n && __builtin_mul_overflow(bytes, n, &bytes)))
        invalid(concat(label, ": bad shape"));
      t.shape.push_back(n);
    }
    s->tensors.push_back(std::move(t));
  }

  uint64_t numSenders = r.count(r.u32("sender count"), 24, "senders");
  std::unordered_set<uint32_t> ranks;
  for (uint64_t i = 0; i < numSenders; ++i) {
    std::string label = concat("sender ", i);
    Sender x;
    x.commRank = r.u32(label + " rank");
    if (x.commRank >= s->worldSize || !ranks.insert(x.commRank).second)
      invalid(concat(label, ": rank ", x.commRank,
                     " is out of range or already a sender"));
    x.stagingCap = r.u64(label + " staging cap");
    x.stagingBytes = r.u64(label + " staging bytes");
    if (x.stagingBytes > x.stagingCap)
      invalid(concat(label, ": staging ", x.stagingBytes, " exceeds its cap ",
                     x.stagingCap));
    uint64_t n = r.count(r.u32(label + " holding count"), 4, label + " holdings");
    std::vector<bool> held(numTensors, false);
    for (uint64_t h = 0; h < n; ++h) {
      Holding hd;
      hd.tensor = r.u32(label + " holding tensor");
      if (hd.tensor >= numTensors || held[hd.tensor])
        invalid(concat(label, ": holding ", h, " names tensor ", hd.tensor,
                       " which is out of range or held twice"));
      held[hd.tensor] = true;
      const Tensor &t = s->tensors[hd.tensor];
      hd.box = r.box(uint32_t(t.shape.size()), label + " holding box");
      checkBox(hd.box, t, concat(label, " holding ", h));
      x.holdings.push_back(std::move(hd));
    }
    s->senders.push_back(std::move(x));
  }

  uint64_t numReceivers = r.count(r.u32("receiver count"), 41, "receivers");
  ranks.clear();
  for (uint64_t i = 0; i < numReceivers; ++i) {
    std::string label = concat("receiver ", i);
    Receiver x;
    x.commRank = r.u32(label + " rank");
    if (x.commRank >= s->worldSize || !ranks.insert(x.commRank).second)
      invalid(concat(label, ": rank ", x.commRank,
                     " is out of range or already a receiver"));
    x.stagingCap = r.u64(label + " staging cap");
    x.stagingBytes = r.u64(label + " staging bytes");
    uint8_t atomic = r.u8(label + " atomic");
    if (atomic > 1)
      invalid(concat(label, ": atomic is ", int(atomic), ", not 0 or 1"));
    x.atomic = atomic;
    if (!x.atomic && x.stagingBytes > x.stagingCap)
      invalid(concat(label, ": staging ", x.stagingBytes, " exceeds its cap ",
                     x.stagingCap));
    x.planFingerprint = r.u64(label + " plan fingerprint");
    x.planDigest = r.u64(label + " plan digest");
    uint64_t n = r.count(r.u32(label + " need count"), 9, label + " needs");
    for (uint64_t k = 0; k < n; ++k) {
      Need need;
      need.tensor = r.u32(label + " need tensor");
      if (need.tensor >= numTensors)
        invalid(concat(label, ": need ", k, " names tensor ", need.tensor,
                       " of ", numTensors));
      need.kind = r.u8(label + " need kind");
      if (need.kind > LOADPLAN_NEED_WHOLE)
        invalid(concat(label, ": need ", k, " has unknown kind ",
                       int(need.kind)));
      need.box = r.u32(label + " need box");
      const Tensor &t = s->tensors[need.tensor];
      need.range = r.box(uint32_t(t.shape.size()), label + " need box");
      checkBox(need.range, t, concat(label, " need ", k));
      if (need.kind != LOADPLAN_NEED_BOX && need.range != wholeBox(t.shape))
        invalid(concat(label, ": need ", k, " of ", quote(t.name),
                       " must be the whole tensor"));
      x.needs.push_back(std::move(need));
    }
    s->receivers.push_back(std::move(x));
  }

  uint64_t numPieces = r.count(r.u64("piece count"), 37, "pieces");
  std::vector<std::vector<int64_t>> covered(numReceivers);
  for (uint64_t i = 0; i < numReceivers; ++i)
    covered[i].assign(s->receivers[i].needs.size(), 0);
  s->pieces.reserve(numPieces);
  for (uint64_t i = 0; i < numPieces; ++i) {
    std::string label = concat("piece ", i);
    Piece p;
    p.sender = r.u32(label + " sender");
    p.receiver = r.u32(label + " receiver");
    p.holding = r.u32(label + " holding");
    p.need = r.u32(label + " need");
    p.round = r.u32(label + " round");
    p.flags = r.u8(label + " flags");
    p.sendOffset = r.u64(label + " send offset");
    p.recvOffset = r.u64(label + " receive offset");
    if (p.sender >= numSenders || p.receiver >= numReceivers)
      invalid(concat(label, ": sender ", p.sender, " or receiver ", p.receiver,
                     " is out of range"));
    const Sender &x = s->senders[p.sender];
    const Receiver &rec = s->receivers[p.receiver];
    if (p.holding >= x.holdings.size() || p.need >= rec.needs.size())
      invalid(concat(label, ": holding ", p.holding, " or need ", p.need,
                     " is out of range"));
    const Holding &hd = x.holdings[p.holding];
    const Need &need = rec.needs[p.need];
    if (hd.tensor != need.tensor)
      invalid(concat(label, ": its holding and need are of different tensors"));
    if (p.round >= s->numRounds)
      invalid(concat(label, ": round ", p.round, " of ", s->numRounds));
    if (p.flags > (LOADPLAN_PIECE_PACKED | LOADPLAN_PIECE_STAGED |
                   LOADPLAN_PIECE_JOINED))
      invalid(concat(label, ": unknown flags ", int(p.flags)));
    const Tensor &t = s->tensors[need.tensor];
    p.box = r.box(uint32_t(t.shape.size()), label + " box");
    checkBox(p.box, t, label);
    if (!contains(hd.box, p.box) || !contains(need.range, p.box))
      invalid(concat(label, ": box ", boxText(p.box),
                     " is not inside its holding ", boxText(hd.box),
                     " and its need ", boxText(need.range)));
    uint64_t bytes = s->pieceBytes(p), end;
    bool joined = p.flags & LOADPLAN_PIECE_JOINED;
    // A message's first piece starts a staging slot; a joined piece starts
    // where the one before it ends, at a multiple of its element size.
    uint64_t align = joined ? uint64_t(t.itemSize()) : kStagingAlign;
    if (joined)
      checkJoined(*s, p, label);
    if (p.flags & LOADPLAN_PIECE_PACKED) {
      if (__builtin_add_overflow(p.sendOffset, bytes, &end) ||
          end > x.stagingBytes || p.sendOffset % align)
        invalid(concat(label, ": send offset ", p.sendOffset,
                       " is unaligned or past the sender's staging of ",
                       x.stagingBytes, " bytes"));
    } else if (!contiguousIn(p.box, hd.box) ||
               p.sendOffset != uint64_t(offsetIn(p.box, hd.box)) *
                                   uint64_t(t.itemSize())) {
      invalid(concat(label, ": it is not packed but not one contiguous run at "
                     "its send offset in its holding"));
    }
    if (p.flags & LOADPLAN_PIECE_STAGED) {
      if (__builtin_add_overflow(p.recvOffset, bytes, &end) ||
          end > rec.stagingBytes || p.recvOffset % align)
        invalid(concat(label, ": receive offset ", p.recvOffset,
                       " is unaligned or past the receiver's staging of ",
                       rec.stagingBytes, " bytes"));
    } else if (rec.atomic || p.recvOffset) {
      invalid(concat(label, ": it lands in place on an atomic receiver or has "
                     "a receive offset"));
    }
    covered[p.receiver][p.need] += p.box.volume();
    s->pieces.push_back(std::move(p));
  }
  if (r.left())
    invalid(concat(r.left(), " bytes follow the last piece"));
  checkStagingApart(*s);
  for (uint64_t i = 0; i < numReceivers; ++i)
    for (size_t k = 0; k < covered[i].size(); ++k)
      if (covered[i][k] != s->receivers[i].needs[k].range.volume())
        invalid(concat("receiver ", i, " need ", k, ": its pieces hold ",
                       covered[i][k], " of its ",
                       s->receivers[i].needs[k].range.volume(), " elements"));
  s->fingerprint = inputFingerprint(*s);
  if (s->fingerprint != fingerprint)
    invalid(concat("fingerprint ", hex64(fingerprint),
                   " is not that of its inputs, ", hex64(s->fingerprint)));
  s->checksum = checksum;
  s->bytes.assign(data, data + size);
  return s;
}

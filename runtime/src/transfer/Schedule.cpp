//===- Schedule.cpp - Transfer schedules: build, serialize, parse -*- C++ -*-===//
//
// Building: each receiver's needs (its plan's direct boxes and fallback
// tensors, or for FULL every whole tensor) are cut along the senders'
// boxes; each cut goes to the least loaded of the senders that hold it.
// Pieces that cannot be received in place (or sent from where they lie)
// need staging; they are cut to fit the caps and packed first-fit into
// rounds so that no rank's staging exceeds its cap in any round.
//
// Parsing: every byte is hostile until checked, as for plans; a schedule
// that parses can be run by an engine without further checks of its
// indices, boxes and offsets.
//
//===----------------------------------------------------------------------===//

#include "Schedule.h"
#include "../Status.h"
#include "loadplan/format/ByteIO.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <unordered_set>

using namespace loadplan;
using namespace loadplan::transfer;
using loadplan_format::ByteReader;
using loadplan_format::ByteWriter;
using loadplan_format::Hasher;
using loadplan_format::hex64;

int64_t Tensor::itemSize() const {
  return static_cast<int64_t>(loadplan_dtype_size(dtype));
}

uint64_t Schedule::pieceBytes(const Piece &p) const {
  const Need &need = receivers[p.receiver].needs[p.need];
  return uint64_t(p.box.volume()) * uint64_t(tensors[need.tensor].itemSize());
}

namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

uint64_t alignUp(uint64_t v) {
  return (v + kStagingAlign - 1) / kStagingAlign * kStagingAlign;
}

/// A box as the fingerprint hashes it: its starts, then its stops.
void hashBox(Hasher &h, const Box &b) {
  h.i64s(b.lo);
  h.i64s(b.hi);
}

/// A box as schedule_format.h lays it out: (start, stop) per dim.
void writeBox(ByteWriter &w, const Box &b) {
  for (uint32_t k = 0; k < b.rank(); ++k) {
    w.i64(b.lo[k]);
    w.i64(b.hi[k]);
  }
}

uint64_t inputFingerprint(const Schedule &s) {
  Hasher h;
  h.u64(s.engine);
  h.u64(s.worldSize);
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

void serialize(Schedule &s) {
  ByteWriter p = loadplan_format::startFile();
  p.u32(s.engine);
  p.u32(s.worldSize);
  p.u32(s.numRounds);
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

std::string senderLabel(const Schedule &s, uint32_t i) {
  return concat("sender ", i, " (rank ", s.senders[i].commRank, ")");
}
std::string receiverLabel(const Schedule &s, uint32_t i) {
  return concat("receiver ", i, " (rank ", s.receivers[i].commRank, ")");
}

std::string tensorText(const Tensor &t) {
  return concat(loadplan_dtype_name(t.dtype), " ", t.shape);
}

} // namespace

//===----------------------------------------------------------------------===//
// Plans seen from a receiver
//===----------------------------------------------------------------------===//

uint64_t loadplan::transfer::planDigest(const Plan &plan) {
  Hasher h;
  h.u64(plan.fingerprint);
  for (const Entry &e : plan.entries) {
    h.str(e.name);
    h.u64(e.kind);
    h.u64(e.dtype);
    h.u64(e.rank());
    h.i64s(e.shape);
    h.u64(e.numBoxes);
    h.i64s(e.boxes);
    h.u64(e.writes.size());
    for (const Write &w : e.writes) {
      h.u64(w.target);
      h.u64(w.box);
      h.u64(uint64_t(w.offset));
      h.u64(w.shape.size());
      h.i64s(w.shape);
      h.i64s(w.stride);
    }
  }
  return h.value;
}

Landing::Landing(const Plan &plan, const std::vector<Tensor> &tensors)
    : plan(plan), tensors(tensors),
      numTargets(static_cast<uint32_t>(plan.targets.size())) {
  entryOf.assign(tensors.size(), -1);
  for (uint32_t t = 0; t < tensors.size(); ++t) {
    auto it = plan.byName.find(tensors[t].name);
    if (it != plan.byName.end())
      entryOf[t] = it->second;
  }
  fallbackIndex.assign(plan.entries.size(), -1);
  const std::vector<uint32_t> &fallbacks = plan.byKind[LOADPLAN_KIND_FALLBACK];
  for (uint32_t k = 0; k < fallbacks.size(); ++k)
    fallbackIndex[fallbacks[k]] = k;
  wholeRegion.resize(plan.entries.size());
  boxes.resize(plan.entries.size());
  writes.resize(plan.entries.size());
  for (uint32_t ei = 0; ei < plan.entries.size(); ++ei) {
    const Entry &e = plan.entries[ei];
    wholeRegion[ei] = Region{0, e.shape, contiguousStrides(e.shape)};
    boxes[ei].resize(e.numBoxes);
    writes[ei].resize(e.numBoxes);
    for (uint32_t b = 0; b < e.numBoxes; ++b) {
      Box &box = boxes[ei][b];
      for (uint32_t k = 0; k < e.rank(); ++k) {
        box.lo.push_back(e.boxStart(b, k));
        box.hi.push_back(e.boxStop(b, k));
      }
    }
    for (const Write &w : e.writes)
      writes[ei][w.box].push_back({Region{w.offset, w.shape, w.stride}, w.target});
  }
}

uint32_t Landing::fallbackTarget(uint32_t entry) const {
  return numTargets + static_cast<uint32_t>(fallbackIndex[entry]);
}

std::vector<Need> Landing::needs(uint32_t engine, const std::string &who) const {
  std::vector<Need> out;
  std::unordered_set<std::string_view> declared;
  for (const Tensor &t : tensors)
    declared.insert(t.name);
  for (const Entry &e : plan.entries)
    if (e.kind != LOADPLAN_KIND_UNNEEDED && !declared.count(e.name))
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, who, ": its plan needs ",
           quote(e.name), " but no sender declares it");
  for (uint32_t t = 0; t < tensors.size(); ++t) {
    const Tensor &tensor = tensors[t];
    int64_t ei = entryOf[t];
    const Entry *e = ei >= 0 ? &plan.entries[ei] : nullptr;
    if (e && e->kind != LOADPLAN_KIND_UNNEEDED &&
        (e->dtype != tensor.dtype || e->shape != tensor.shape))
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, who, ": its plan has ",
           quote(tensor.name), " as ", loadplan_dtype_name(e->dtype), " ",
           concat(e->shape), " but the senders declare ", tensorText(tensor));
    Box whole = wholeBox(tensor.shape);
    if (whole.volume() == 0)
      continue;
    if (engine == LOADPLAN_ENGINE_FULL) {
      out.push_back({t, LOADPLAN_NEED_WHOLE, 0, whole});
      continue;
    }
    if (!e || e->kind == LOADPLAN_KIND_UNNEEDED)
      continue;
    if (e->kind == LOADPLAN_KIND_FALLBACK) {
      out.push_back({t, LOADPLAN_NEED_FALLBACK, 0, whole});
      continue;
    }
    for (uint32_t b = 0; b < e->numBoxes; ++b)
      if (boxes[ei][b].volume() > 0)
        out.push_back({t, LOADPLAN_NEED_BOX, b, boxes[ei][b]});
  }
  return out;
}

void Landing::destinations(const Need &need,
                           std::vector<Destination> &out) const {
  int64_t ei = entryOf[need.tensor];
  if (ei < 0)
    return;
  const Entry &e = plan.entries[ei];
  if (e.kind == LOADPLAN_KIND_FALLBACK) {
    out.push_back({wholeBox(e.shape), &wholeRegion[ei], fallbackTarget(ei)});
    return;
  }
  if (e.kind != LOADPLAN_KIND_DIRECT)
    return;
  for (uint32_t b = 0; b < e.numBoxes; ++b) {
    if (need.kind == LOADPLAN_NEED_BOX && b != need.box)
      continue;
    for (const auto &[region, target] : writes[ei][b])
      out.push_back({boxes[ei][b], &region, target});
  }
}

bool Landing::land(const Need &need, const Box &piece, std::vector<Part> &parts,
                   uint32_t &target) const {
  std::vector<Destination> dests;
  destinations(need, dests);
  size_t before = parts.size();
  int hits = 0;
  Box sub;
  for (const Destination &d : dests) {
    if (!intersect(d.box, piece, sub))
      continue;
    ++hits;
    size_t from = parts.size();
    restrictRegion(d.box, *d.region, sub, parts);
    for (size_t i = from; i < parts.size(); ++i)
      parts[i].target = d.target;
  }
  if (hits != 1 || parts.size() != before + 1)
    return false;
  const Part &only = parts.back();
  if (only.box != piece || !isContiguousRun(only.region))
    return false;
  target = only.target;
  return true;
}

//===----------------------------------------------------------------------===//
// Building
//===----------------------------------------------------------------------===//

namespace {

Box boxFromArrays(const Tensor &t, const int64_t *starts, const int64_t *stops) {
  if (!starts && !stops)
    return wholeBox(t.shape);
  if (!starts || !stops)
    fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "a holding of ", quote(t.name),
         " has starts or stops NULL but not both");
  Box b;
  b.lo.assign(starts, starts + t.shape.size());
  b.hi.assign(stops, stops + t.shape.size());
  return b;
}

bool boxInside(const Box &b, const std::vector<int64_t> &shape) {
  for (size_t k = 0; k < shape.size(); ++k)
    if (b.lo[k] < 0 || b.lo[k] >= b.hi[k] || b.hi[k] > shape[k])
      return false;
  return true;
}

/// Senders holding one box of one tensor: replicas, any of which may send.
struct Group {
  Box box;
  std::vector<std::pair<uint32_t, uint32_t>> members; // (sender, holding)
};

/// A piece before bucketing.
struct Draft {
  uint32_t sender, receiver, holding, need;
  Box box;
  bool packed, staged;
};

class Builder {
public:
  explicit Builder(const loadplan_schedule_spec_t &spec) : spec(spec) {}

  std::unique_ptr<Schedule> build() {
    s = std::make_unique<Schedule>();
    if (spec.engine >= LOADPLAN_ENGINE_COUNT_)
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "unknown engine ", spec.engine);
    if (spec.world_size < 1)
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "world_size ", spec.world_size,
           " is not positive");
    s->engine = spec.engine;
    s->worldSize = uint32_t(spec.world_size);
    readTensors();
    readSenders();
    readReceivers();
    cut();
    bucket();
    serialize(*s);
    return std::move(s);
  }

private:
  void readTensors() {
    if (spec.num_tensors && !spec.tensors)
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "tensors is NULL");
    std::unordered_set<std::string> names;
    for (size_t i = 0; i < spec.num_tensors; ++i) {
      const loadplan_checkpoint_tensor_t &in = spec.tensors[i];
      std::string label = concat("tensor ", i);
      if (!in.name && in.name_size)
        fail(LOADPLAN_STATUS_INVALID_ARGUMENT, label, ": name is NULL");
      Tensor t;
      t.name.assign(in.name ? in.name : "", in.name_size);
      label += " (" + quote(t.name) + ")";
      if (!names.insert(t.name).second)
        fail(LOADPLAN_STATUS_INVALID_ARGUMENT, label, " is declared twice");
      t.dtype = in.dtype;
      if (!loadplan_dtype_size(t.dtype))
        fail(LOADPLAN_STATUS_INVALID_ARGUMENT, label, ": unknown dtype ",
             in.dtype);
      if (in.rank > kMaxRank)
        fail(LOADPLAN_STATUS_INVALID_ARGUMENT, label, ": rank ", in.rank,
             " is more than ", kMaxRank);
      if (in.rank && !in.shape)
        fail(LOADPLAN_STATUS_INVALID_ARGUMENT, label, ": shape is NULL");
      t.shape.assign(in.shape, in.shape + in.rank);
      int64_t bytes = t.itemSize();
      for (int64_t n : t.shape)
        if (n < 0 || (n && __builtin_mul_overflow(bytes, n, &bytes)))
          fail(LOADPLAN_STATUS_INVALID_ARGUMENT, label, ": bad shape ",
               t.shape);
      s->tensors.push_back(std::move(t));
    }
  }

  /// A cap as given (0: the default), at least one aligned slot.
  static uint64_t stagingCap(uint64_t cap, const std::string &label) {
    if (!cap)
      return LOADPLAN_DEFAULT_STAGING_CAP;
    if (cap < kStagingAlign)
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, label, ": staging cap ", cap,
           " is below the minimum of ", kStagingAlign, " bytes");
    return cap;
  }

  void checkRank(int32_t rank, const std::string &label) {
    if (rank < 0 || uint32_t(rank) >= s->worldSize)
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, label, ": comm_rank ", rank,
           " is not in [0, ", s->worldSize, ")");
  }

  void readSenders() {
    if (spec.num_senders && !spec.senders)
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "senders is NULL");
    std::unordered_set<int32_t> ranks;
    groups.resize(s->tensors.size());
    for (size_t i = 0; i < spec.num_senders; ++i) {
      const loadplan_sender_spec_t &in = spec.senders[i];
      std::string label = concat("sender ", i);
      checkRank(in.comm_rank, label);
      if (!ranks.insert(in.comm_rank).second)
        fail(LOADPLAN_STATUS_INVALID_ARGUMENT, label, ": rank ", in.comm_rank,
             " is already a sender");
      Sender x;
      x.commRank = uint32_t(in.comm_rank);
      x.stagingCap = stagingCap(in.staging_cap, label);
      if (in.num_holdings && !in.holdings)
        fail(LOADPLAN_STATUS_INVALID_ARGUMENT, label, ": holdings is NULL");
      std::vector<bool> held(s->tensors.size(), false);
      for (size_t h = 0; h < in.num_holdings; ++h) {
        const loadplan_holding_t &hd = in.holdings[h];
        if (hd.tensor >= s->tensors.size())
          fail(LOADPLAN_STATUS_INVALID_ARGUMENT, label, ": holding ", h,
               " names tensor ", hd.tensor, " of ", s->tensors.size());
        const Tensor &t = s->tensors[hd.tensor];
        if (held[hd.tensor])
          fail(LOADPLAN_STATUS_INVALID_ARGUMENT, label, " holds ",
               quote(t.name), " twice");
        held[hd.tensor] = true;
        Box box = boxFromArrays(t, hd.starts, hd.stops);
        if (!boxInside(box, t.shape))
          fail(LOADPLAN_STATUS_INVALID_ARGUMENT, label, " holds box ",
               boxText(box), " of ", quote(t.name), " (", tensorText(t),
               "), which is empty or not inside it");
        uint32_t index = uint32_t(x.holdings.size());
        x.holdings.push_back({hd.tensor, box});
        addToGroup(hd.tensor, box, uint32_t(i), index);
      }
      s->senders.push_back(std::move(x));
    }
    if (spec.engine == LOADPLAN_ENGINE_SLICED)
      return;
    // Intersections are only well defined when boxes of different senders
    // are equal (replicas) or disjoint (shards).
    for (uint32_t t = 0; t < groups.size(); ++t)
      for (size_t a = 0; a < groups[t].size(); ++a)
        for (size_t b = a + 1; b < groups[t].size(); ++b) {
          Box sub;
          if (intersect(groups[t][a].box, groups[t][b].box, sub))
            fail(LOADPLAN_STATUS_INVALID_ARGUMENT,
                 senderLabel(*s, groups[t][a].members[0].first), " and ",
                 senderLabel(*s, groups[t][b].members[0].first),
                 " hold overlapping but different boxes of ",
                 quote(s->tensors[t].name), ": ", boxText(groups[t][a].box),
                 " and ", boxText(groups[t][b].box),
                 "; boxes of different senders must be equal or disjoint");
        }
  }

  void addToGroup(uint32_t tensor, const Box &box, uint32_t sender,
                  uint32_t holding) {
    for (Group &g : groups[tensor])
      if (g.box == box) {
        g.members.push_back({sender, holding});
        return;
      }
    groups[tensor].push_back({box, {{sender, holding}}});
  }

  void readReceivers() {
    if (spec.num_receivers && !spec.receivers)
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "receivers is NULL");
    std::unordered_set<int32_t> ranks;
    for (size_t i = 0; i < spec.num_receivers; ++i) {
      const loadplan_receiver_spec_t &in = spec.receivers[i];
      std::string label = concat("receiver ", i);
      checkRank(in.comm_rank, label);
      label += concat(" (rank ", in.comm_rank, ")");
      if (!ranks.insert(in.comm_rank).second)
        fail(LOADPLAN_STATUS_INVALID_ARGUMENT, label,
             " is already a receiver");
      if (!in.plan || !in.plan->plan)
        fail(LOADPLAN_STATUS_INVALID_ARGUMENT, label, ": plan is NULL");
      const Plan &plan = *in.plan->plan;
      Receiver r;
      r.commRank = uint32_t(in.comm_rank);
      r.stagingCap = stagingCap(in.staging_cap, label);
      r.atomic = in.atomic != 0;
      r.planFingerprint = plan.fingerprint;
      r.planDigest = planDigest(plan);
      landings.push_back(std::make_unique<Landing>(plan, s->tensors));
      r.needs = landings.back()->needs(s->engine, label);
      s->receivers.push_back(std::move(r));
    }
  }

  /// The least loaded of `members`; ties go to the first.
  std::pair<uint32_t, uint32_t>
  pick(const std::vector<std::pair<uint32_t, uint32_t>> &members) {
    auto best = members.front();
    for (const auto &m : members)
      if (load[m.first] < load[best.first])
        best = m;
    return best;
  }

  void cut() {
    load.assign(s->senders.size(), 0);
    for (uint32_t r = 0; r < s->receivers.size(); ++r) {
      const Receiver &rec = s->receivers[r];
      for (uint32_t n = 0; n < rec.needs.size(); ++n) {
        const Need &need = rec.needs[n];
        const Tensor &t = s->tensors[need.tensor];
        uint64_t item = uint64_t(t.itemSize());
        if (s->engine == LOADPLAN_ENGINE_SLICED) {
          std::vector<std::pair<uint32_t, uint32_t>> whole;
          for (const Group &g : groups[need.tensor])
            if (contains(g.box, need.range))
              whole.insert(whole.end(), g.members.begin(), g.members.end());
          if (whole.empty())
            fail(LOADPLAN_STATUS_INVALID_ARGUMENT, receiverLabel(*s, r),
                 " needs box ", boxText(need.range), " of ", quote(t.name),
                 " but no sender holds it whole; the sliced engine sends each "
                 "box from one sender (use m_to_n to gather it from several)");
          auto [sender, holding] = pick(whole);
          load[sender] += uint64_t(need.range.volume()) * item;
          add(sender, r, holding, n, need.range);
          continue;
        }
        int64_t covered = 0;
        Box sub;
        for (const Group &g : groups[need.tensor]) {
          if (!intersect(g.box, need.range, sub))
            continue;
          auto [sender, holding] = pick(g.members);
          load[sender] += uint64_t(sub.volume()) * item;
          covered += sub.volume();
          add(sender, r, holding, n, sub);
        }
        if (covered != need.range.volume())
          fail(LOADPLAN_STATUS_INVALID_ARGUMENT, receiverLabel(*s, r),
               " needs box ", boxText(need.range), " of ", quote(t.name),
               " but the senders hold only ", covered, " of its ",
               need.range.volume(), " elements");
      }
    }
  }

  /// Adds piece `box`, cut to the staging caps it needs.
  void add(uint32_t sender, uint32_t receiver, uint32_t holding, uint32_t need,
           const Box &box) {
    const Sender &x = s->senders[sender];
    const Receiver &r = s->receivers[receiver];
    const Need &n = r.needs[need];
    const Tensor &t = s->tensors[n.tensor];
    const Box &held = x.holdings[holding].box;
    const Landing &landing = *landings[receiver];
    auto classify = [&](const Box &b, Draft &d) {
      parts.clear();
      uint32_t target;
      d = {sender, receiver, holding, need, b, !contiguousIn(b, held),
           r.atomic || !landing.land(n, b, parts, target)};
    };
    Draft d;
    classify(box, d);
    // Whole aligned slots: a piece of at most `limit` elements takes a
    // slot no larger than the cap (which is at least one slot).
    uint64_t item = uint64_t(t.itemSize());
    uint64_t limit = std::numeric_limits<uint64_t>::max();
    if (d.packed)
      limit = std::min(limit, x.stagingCap / kStagingAlign * kStagingAlign / item);
    if (d.staged && !r.atomic)
      limit = std::min(limit, r.stagingCap / kStagingAlign * kStagingAlign / item);
    if (uint64_t(box.volume()) <= limit) {
      drafts.push_back(std::move(d));
      return;
    }
    std::vector<Box> chunks;
    splitBox(box, int64_t(std::min<uint64_t>(limit, uint64_t(kInt64Max))),
             chunks);
    for (const Box &c : chunks) {
      classify(c, d);
      drafts.push_back(std::move(d));
    }
  }

  /// First fit: each piece goes to the first round where its sender and
  /// receiver both still have the staging it needs.
  void bucket() {
    size_t numSenders = s->senders.size(), numReceivers = s->receivers.size();
    std::vector<std::vector<uint64_t>> sendUse(numSenders), recvUse(numReceivers);
    std::vector<uint64_t> atomicUse(numReceivers, 0);
    std::vector<std::pair<uint32_t, size_t>> order; // (round, draft)
    uint32_t rounds = 0;
    for (size_t i = 0; i < drafts.size(); ++i) {
      const Draft &d = drafts[i];
      const Sender &x = s->senders[d.sender];
      Receiver &r = s->receivers[d.receiver];
      const Tensor &t = s->tensors[r.needs[d.need].tensor];
      uint64_t bytes = uint64_t(d.box.volume()) * uint64_t(t.itemSize());
      uint64_t slot = alignUp(bytes);
      bool useSend = d.packed, useRecv = d.staged && !r.atomic;
      std::vector<uint64_t> &su = sendUse[d.sender], &ru = recvUse[d.receiver];
      uint32_t k = 0;
      if (useSend || useRecv) {
        for (;; ++k) {
          if (su.size() <= k)
            su.resize(k + 1, 0);
          if (ru.size() <= k)
            ru.resize(k + 1, 0);
          if ((!useSend || su[k] + slot <= x.stagingCap) &&
              (!useRecv || ru[k] + slot <= r.stagingCap))
            break;
        }
      }
      Piece p;
      p.sender = d.sender;
      p.receiver = d.receiver;
      p.holding = d.holding;
      p.need = d.need;
      p.round = k;
      p.box = d.box;
      if (d.packed) {
        p.flags |= LOADPLAN_PIECE_PACKED;
        p.sendOffset = su[k];
        su[k] += slot;
      } else {
        p.sendOffset = uint64_t(offsetIn(d.box, x.holdings[d.holding].box)) *
                       uint64_t(t.itemSize());
      }
      if (d.staged) {
        p.flags |= LOADPLAN_PIECE_STAGED;
        uint64_t &use = r.atomic ? atomicUse[d.receiver] : ru[k];
        p.recvOffset = use;
        use += slot;
      }
      rounds = std::max(rounds, k + 1);
      order.push_back({k, s->pieces.size()});
      s->pieces.push_back(std::move(p));
    }
    s->numRounds = rounds;
    // Posting order: by round, then as built (receiver by receiver).
    std::stable_sort(order.begin(), order.end(),
                     [](const auto &a, const auto &b) { return a.first < b.first; });
    std::vector<Piece> sorted;
    sorted.reserve(order.size());
    for (const auto &o : order)
      sorted.push_back(std::move(s->pieces[o.second]));
    s->pieces = std::move(sorted);
    for (size_t i = 0; i < numSenders; ++i)
      for (uint64_t u : sendUse[i])
        s->senders[i].stagingBytes = std::max(s->senders[i].stagingBytes, u);
    for (size_t i = 0; i < numReceivers; ++i) {
      Receiver &r = s->receivers[i];
      r.stagingBytes = atomicUse[i];
      for (uint64_t u : recvUse[i])
        r.stagingBytes = std::max(r.stagingBytes, u);
    }
  }

  const loadplan_schedule_spec_t &spec;
  std::unique_ptr<Schedule> s;
  std::vector<std::vector<Group>> groups; // per tensor
  std::vector<std::unique_ptr<Landing>> landings; // per receiver
  std::vector<uint64_t> load;                     // bytes per sender
  std::vector<Draft> drafts;
  std::vector<Part> parts; // scratch
};

} // namespace

std::unique_ptr<Schedule>
loadplan::transfer::buildSchedule(const loadplan_schedule_spec_t &spec) {
  return Builder(spec).build();
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
  [[noreturn]] void truncated(const std::string &what, size_t n) override {
    invalid("truncated: " + shortfall(what, n));
  }
};

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
    invalid(concat("version ", version, " is not ", LOADPLAN_SCHEDULE_VERSION));
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
  uint64_t actual = loadplan_fnv1a64(LOADPLAN_FNV1A64_INIT, payload, payloadSize);
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
    if (p.flags > (LOADPLAN_PIECE_PACKED | LOADPLAN_PIECE_STAGED))
      invalid(concat(label, ": unknown flags ", int(p.flags)));
    const Tensor &t = s->tensors[need.tensor];
    p.box = r.box(uint32_t(t.shape.size()), label + " box");
    checkBox(p.box, t, label);
    if (!contains(hd.box, p.box) || !contains(need.range, p.box))
      invalid(concat(label, ": box ", boxText(p.box),
                     " is not inside its holding ", boxText(hd.box),
                     " and its need ", boxText(need.range)));
    uint64_t bytes = s->pieceBytes(p), end;
    if (p.flags & LOADPLAN_PIECE_PACKED) {
      if (__builtin_add_overflow(p.sendOffset, bytes, &end) ||
          end > x.stagingBytes || p.sendOffset % kStagingAlign)
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
          end > rec.stagingBytes || p.recvOffset % kStagingAlign)
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

//===----------------------------------------------------------------------===//
// Summary and text
//===----------------------------------------------------------------------===//

loadplan_schedule_summary_t Schedule::summary() const {
  loadplan_schedule_summary_t out{};
  out.engine = engine;
  out.world_size = int32_t(worldSize);
  out.fingerprint = fingerprint;
  out.checksum = checksum;
  out.num_tensors = uint32_t(tensors.size());
  out.num_senders = uint32_t(senders.size());
  out.num_receivers = uint32_t(receivers.size());
  out.num_rounds = numRounds;
  out.num_pieces = pieces.size();
  for (const Receiver &r : receivers)
    for (const Need &n : r.needs)
      out.bytes_needed +=
          uint64_t(n.range.volume()) * uint64_t(tensors[n.tensor].itemSize());
  for (const Piece &p : pieces) {
    uint64_t bytes = pieceBytes(p);
    out.bytes_moved += bytes;
    if (senders[p.sender].commRank != receivers[p.receiver].commRank)
      out.bytes_between_ranks += bytes;
    (p.flags & LOADPLAN_PIECE_STAGED ? out.bytes_staged : out.bytes_in_place) +=
        bytes;
    if (p.flags & LOADPLAN_PIECE_PACKED)
      out.bytes_packed += bytes;
  }
  for (const Sender &x : senders)
    out.max_sender_staging = std::max(out.max_sender_staging, x.stagingBytes);
  for (const Receiver &r : receivers)
    out.max_receiver_staging = std::max(out.max_receiver_staging, r.stagingBytes);
  return out;
}

std::string Schedule::text(uint32_t detail) const {
  loadplan_schedule_summary_t sum = summary();
  std::ostringstream os;
  os << "schedule: engine " << loadplan_engine_name(engine) << ", "
     << worldSize << " ranks, " << senders.size() << " senders, "
     << receivers.size() << " receivers, " << tensors.size() << " tensors, "
     << numRounds << " rounds, " << pieces.size() << " pieces\n"
     << "fingerprint " << hex64(fingerprint) << ", checksum " << hex64(checksum)
     << "\n"
     << "bytes: needed " << sum.bytes_needed << ", moved " << sum.bytes_moved
     << " (between ranks " << sum.bytes_between_ranks << "), in place "
     << sum.bytes_in_place << ", staged " << sum.bytes_staged << ", packed "
     << sum.bytes_packed << "\n";
  std::vector<uint64_t> sent(senders.size(), 0), got(receivers.size(), 0);
  std::vector<uint64_t> sentPieces(senders.size(), 0), gotPieces(receivers.size(), 0);
  for (const Piece &p : pieces) {
    uint64_t bytes = pieceBytes(p);
    sent[p.sender] += bytes;
    got[p.receiver] += bytes;
    ++sentPieces[p.sender];
    ++gotPieces[p.receiver];
  }
  for (uint32_t i = 0; i < senders.size(); ++i)
    os << senderLabel(*this, i) << ": holds " << senders[i].holdings.size()
       << " tensors, sends " << sent[i] << " bytes in " << sentPieces[i]
       << " pieces, staging " << senders[i].stagingBytes << " of "
       << senders[i].stagingCap << "\n";
  for (uint32_t i = 0; i < receivers.size(); ++i) {
    const Receiver &r = receivers[i];
    uint64_t needed = 0;
    for (const Need &n : r.needs)
      needed += uint64_t(n.range.volume()) * uint64_t(tensors[n.tensor].itemSize());
    os << receiverLabel(*this, i) << ": plan " << hex64(r.planFingerprint)
       << ", needs " << needed << " bytes in " << r.needs.size()
       << " boxes, receives " << got[i] << " bytes in " << gotPieces[i]
       << " pieces, staging " << r.stagingBytes;
    if (r.atomic)
      os << " (atomic)\n";
    else
      os << " of " << r.stagingCap << "\n";
  }
  if (detail == 0)
    return os.str();
  // Pieces by (sender, receiver), each pair in posting order.
  std::vector<size_t> order(pieces.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::make_pair(pieces[a].sender, pieces[a].receiver) <
           std::make_pair(pieces[b].sender, pieces[b].receiver);
  });
  for (size_t i = 0; i < order.size();) {
    const Piece &first = pieces[order[i]];
    size_t j = i;
    uint64_t bytes = 0;
    while (j < order.size() && pieces[order[j]].sender == first.sender &&
           pieces[order[j]].receiver == first.receiver)
      bytes += pieceBytes(pieces[order[j++]]);
    os << senderLabel(*this, first.sender) << " -> "
       << receiverLabel(*this, first.receiver) << ": " << j - i
       << " pieces, " << bytes << " bytes\n";
    for (; i < j; ++i) {
      const Piece &p = pieces[order[i]];
      const Need &n = receivers[p.receiver].needs[p.need];
      os << "  round " << p.round << " " << quote(tensors[n.tensor].name) << " "
         << boxText(p.box) << " " << pieceBytes(p) << " bytes"
         << (p.flags & LOADPLAN_PIECE_PACKED ? ", packed" : "")
         << (p.flags & LOADPLAN_PIECE_STAGED ? ", staged" : ", in place")
         << "\n";
    }
  }
  return os.str();
}

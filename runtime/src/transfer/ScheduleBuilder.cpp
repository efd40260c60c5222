//===- ScheduleBuilder.cpp - Build a transfer schedule ----------*- C++ -*-===//
//
// Each receiver's needs (its plan's direct boxes and fallback tensors, or
// for FULL every whole tensor) are cut along the senders' boxes; each cut
// goes to the least loaded of the senders that hold it. Pieces that cannot
// be received in place (or sent from where they lie) need staging; they are
// cut to fit the caps and packed first-fit into rounds so that no rank's
// staging exceeds its cap in any round.
//
//===----------------------------------------------------------------------===//

#include "Schedule.h"
#include "../Status.h"

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>
#include <unordered_set>

using namespace loadplan;
using namespace loadplan::transfer;

namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

uint64_t alignUp(uint64_t v) {
  return (v + kStagingAlign - 1) / kStagingAlign * kStagingAlign;
}

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
  uint64_t bytes = 0;
  int64_t itemSize = 0;
  /// Where it lands when received in place (not staged): a storage and a
  /// byte in it (Landing::address).
  uint32_t storage = 0;
  uint64_t address = 0;
};

/// Pieces that travel as one message, in their order in it.
struct Message {
  std::vector<size_t> drafts;
  bool packed = false, staged = false;
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
    decideOverlap();
    cut();
    join();
    bucket();
    serializeSchedule(*s);
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

  /// Rounds overlap unless asked not to or a cap cannot hold two slots.
  void decideOverlap() {
    s->joinBelow = spec.join_below ? spec.join_below : LOADPLAN_DEFAULT_JOIN_BELOW;
    bool overlap = !spec.sequential;
    for (const Sender &x : s->senders)
      overlap &= x.stagingCap >= 2 * kStagingAlign;
    for (const Receiver &r : s->receivers)
      overlap &= r.atomic || r.stagingCap >= 2 * kStagingAlign;
    s->flags = overlap ? LOADPLAN_SCHEDULE_OVERLAP : 0;
  }

  /// The staging a round may use of `cap`: whole aligned slots of all of
  /// it, or of half of it when rounds overlap.
  uint64_t roundCap(uint64_t cap) const {
    if (s->overlaps())
      cap /= 2;
    return cap / kStagingAlign * kStagingAlign;
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
      uint32_t target = 0;
      bool inPlace = landing.land(n, b, parts, target);
      d = {sender, receiver, holding, need, b, !contiguousIn(b, held),
           r.atomic || !inPlace};
      d.itemSize = t.itemSize();
      d.bytes = uint64_t(b.volume()) * uint64_t(d.itemSize);
      if (inPlace)
        std::tie(d.storage, d.address) =
            landing.address(target, parts.back().region.offset, d.itemSize);
    };
    Draft d;
    classify(box, d);
    // Whole aligned slots: a piece of at most `limit` elements takes a
    // slot no larger than a round's part of the cap (at least one slot).
    uint64_t item = uint64_t(t.itemSize());
    uint64_t limit = std::numeric_limits<uint64_t>::max();
    if (d.packed)
      limit = std::min(limit, roundCap(x.stagingCap) / item);
    if (d.staged && !r.atomic)
      limit = std::min(limit, roundCap(r.stagingCap) / item);
    if (uint64_t(box.volume()) <= limit) {
      drafts.push_back(std::move(d));
      return;
    }
    std::vector<Box> chunks;
    std::vector<int64_t> granule = landing.granule(n);
    splitBox(box, int64_t(std::min<uint64_t>(limit, uint64_t(kInt64Max))),
             chunks, granule);
    for (const Box &c : chunks) {
      if (!granule.empty() && uint64_t(c.volume()) > limit)
        fail(LOADPLAN_STATUS_INVALID_ARGUMENT, receiverLabel(*s, receiver),
             ": a piece of ", quote(t.name), " is at least one atom of its "
             "plan's transform (", granule[0], " x ", granule[1],
             " elements, ", uint64_t(granule[0] * granule[1]) * item,
             " bytes), more than a round's part of the staging cap of ",
             d.packed ? senderLabel(*s, sender) : receiverLabel(*s, receiver),
             " (", limit * item, " bytes): raise it");
      classify(c, d);
      drafts.push_back(std::move(d));
    }
  }

  /// Joins the pieces of fewer than joinBelow bytes between each sender
  /// and receiver into messages of at most a round's staging: the largest
  /// elements first (so that every piece's offset stays a multiple of its
  /// element size), then in the order their destinations lie in memory (so
  /// that pieces landing in place one after another can arrive so as one
  /// run). A run of such pieces of joinBelow bytes or more (a layer's
  /// experts into its fused tensor) is a message of its own, received in
  /// place: joined with other runs it would be staged and scattered. Every
  /// other piece is a message of its own.
  void join() {
    std::map<std::pair<uint32_t, uint32_t>, std::vector<size_t>> small;
    std::vector<std::pair<size_t, Message>> ordered; // (first draft, message)
    for (size_t i = 0; i < drafts.size(); ++i) {
      const Draft &d = drafts[i];
      if (d.bytes < s->joinBelow) {
        small[{d.sender, d.receiver}].push_back(i);
        continue;
      }
      ordered.push_back({i, Message{{i}, d.packed, d.staged}});
    }
    for (auto &[pair, list] : small) {
      std::stable_sort(list.begin(), list.end(), [&](size_t a, size_t b) {
        const Draft &x = drafts[a], &y = drafts[b];
        return std::make_tuple(-x.itemSize, x.staged, x.storage, x.address) <
               std::make_tuple(-y.itemSize, y.staged, y.storage, y.address);
      });
      const Sender &x = s->senders[pair.first];
      const Receiver &r = s->receivers[pair.second];
      uint64_t limit = roundCap(x.stagingCap);
      if (!r.atomic)
        limit = std::min(limit, roundCap(r.stagingCap));
      Message m;
      uint64_t bytes = 0;
      auto close = [&] {
        if (m.drafts.empty())
          return;
        size_t first = *std::min_element(m.drafts.begin(), m.drafts.end());
        settle(m);
        ordered.push_back({first, std::move(m)});
        m = Message{};
        bytes = 0;
      };
      auto add = [&](size_t i) {
        if (bytes + drafts[i].bytes > limit)
          close();
        m.drafts.push_back(i);
        bytes += drafts[i].bytes;
      };
      // Runs of pieces that land in place one after another: the long ones
      // alone, the others joined.
      std::vector<size_t> rest;
      for (size_t begin = 0, end; begin < list.size(); begin = end) {
        uint64_t runBytes = drafts[list[begin]].bytes;
        for (end = begin + 1; end < list.size() && follows(list[end - 1], list[end]);
             ++end)
          runBytes += drafts[list[end]].bytes;
        if (drafts[list[begin]].staged || runBytes < s->joinBelow) {
          rest.insert(rest.end(), list.begin() + begin, list.begin() + end);
          continue;
        }
        for (size_t k = begin; k < end; ++k)
          add(list[k]);
        close();
      }
      for (size_t i : rest)
        add(i);
      close();
    }
    // Messages in the order of their first piece, as built.
    std::stable_sort(ordered.begin(), ordered.end(),
                     [](const auto &a, const auto &b) { return a.first < b.first; });
    messages.reserve(ordered.size());
    for (auto &o : ordered)
      messages.push_back(std::move(o.second));
  }

  /// Whether draft `b` lands in place right after draft `a`.
  bool follows(size_t a, size_t b) const {
    const Draft &x = drafts[a], &y = drafts[b];
    return !x.staged && !y.staged && x.storage == y.storage &&
           x.address + x.bytes == y.address;
  }

  /// Whether message `m` (of several pieces) must be packed and staged: it
  /// need not be packed when its pieces follow one another in one holding,
  /// nor staged when they land in place one after another.
  void settle(Message &m) const {
    const Draft &first = drafts[m.drafts.front()];
    if (m.drafts.size() == 1) {
      m.packed = first.packed;
      m.staged = first.staged;
      return;
    }
    bool inOneHolding = !first.packed, inOneRun = !first.staged;
    for (size_t k = 1; k < m.drafts.size(); ++k) {
      const Draft &a = drafts[m.drafts[k - 1]], &b = drafts[m.drafts[k]];
      const Box &held = s->senders[a.sender].holdings[a.holding].box;
      inOneHolding &= !b.packed && a.holding == b.holding &&
                      uint64_t(offsetIn(a.box, held)) * a.itemSize + a.bytes ==
                          uint64_t(offsetIn(b.box, held)) * b.itemSize;
      inOneRun &= follows(m.drafts[k - 1], m.drafts[k]);
    }
    m.packed = !inOneHolding;
    m.staged = !inOneRun;
  }

  /// First fit: each message goes to the first round where its sender and
  /// receiver both still have the staging it needs; its pieces follow one
  /// another in it.
  void bucket() {
    size_t numSenders = s->senders.size(), numReceivers = s->receivers.size();
    std::vector<std::vector<uint64_t>> sendUse(numSenders), recvUse(numReceivers);
    std::vector<uint64_t> atomicUse(numReceivers, 0);
    std::vector<std::pair<uint32_t, size_t>> order; // (round, piece)
    uint32_t rounds = 0;
    for (const Message &m : messages) {
      const Draft &first = drafts[m.drafts.front()];
      const Sender &x = s->senders[first.sender];
      Receiver &r = s->receivers[first.receiver];
      uint64_t bytes = 0;
      for (size_t i : m.drafts)
        bytes += drafts[i].bytes;
      uint64_t slot = alignUp(bytes);
      bool useSend = m.packed, useRecv = m.staged && !r.atomic;
      std::vector<uint64_t> &su = sendUse[first.sender],
                            &ru = recvUse[first.receiver];
      uint64_t sendCap = roundCap(x.stagingCap), recvCap = roundCap(r.stagingCap);
      uint32_t k = 0;
      if (useSend || useRecv) {
        for (;; ++k) {
          if (su.size() <= k)
            su.resize(k + 1, 0);
          if (ru.size() <= k)
            ru.resize(k + 1, 0);
          if ((!useSend || su[k] + slot <= sendCap) &&
              (!useRecv || ru[k] + slot <= recvCap))
            break;
        }
      }
      uint64_t sendAt = useSend ? su[k] : 0;
      uint64_t recvAt = 0;
      if (m.staged)
        recvAt = r.atomic ? atomicUse[first.receiver] : ru[k];
      for (size_t j = 0; j < m.drafts.size(); ++j) {
        const Draft &d = drafts[m.drafts[j]];
        Piece p;
        p.sender = d.sender;
        p.receiver = d.receiver;
        p.holding = d.holding;
        p.need = d.need;
        p.round = k;
        p.box = d.box;
        if (j)
          p.flags |= LOADPLAN_PIECE_JOINED;
        if (m.packed) {
          p.flags |= LOADPLAN_PIECE_PACKED;
          p.sendOffset = sendAt;
          sendAt += d.bytes;
        } else {
          p.sendOffset = uint64_t(offsetIn(d.box, x.holdings[d.holding].box)) *
                         uint64_t(d.itemSize);
        }
        if (m.staged) {
          p.flags |= LOADPLAN_PIECE_STAGED;
          p.recvOffset = recvAt;
          recvAt += d.bytes;
        }
        order.push_back({k, s->pieces.size()});
        s->pieces.push_back(std::move(p));
      }
      if (useSend)
        su[k] += slot;
      if (m.staged)
        (r.atomic ? atomicUse[first.receiver] : ru[k]) += slot;
      rounds = std::max(rounds, k + 1);
    }
    s->numRounds = rounds;
    // Posting order: by round, then as built (a message's pieces together).
    std::stable_sort(order.begin(), order.end(),
                     [](const auto &a, const auto &b) { return a.first < b.first; });
    std::vector<Piece> sorted;
    sorted.reserve(order.size());
    for (const auto &o : order)
      sorted.push_back(std::move(s->pieces[o.second]));
    s->pieces = std::move(sorted);
    // With overlap, odd rounds use the part after the even rounds'.
    std::vector<uint64_t> sendOdd(numSenders, 0), recvOdd(numReceivers, 0);
    for (size_t i = 0; i < numSenders; ++i)
      s->senders[i].stagingBytes = halves(sendUse[i], sendOdd[i]);
    for (size_t i = 0; i < numReceivers; ++i) {
      Receiver &r = s->receivers[i];
      r.stagingBytes = r.atomic ? atomicUse[i] : halves(recvUse[i], recvOdd[i]);
    }
    for (Piece &p : s->pieces) {
      if (!(p.round & 1))
        continue;
      if (p.flags & LOADPLAN_PIECE_PACKED)
        p.sendOffset += sendOdd[p.sender];
      if ((p.flags & LOADPLAN_PIECE_STAGED) && !s->receivers[p.receiver].atomic)
        p.recvOffset += recvOdd[p.receiver];
    }
  }

  /// The staging of a rank that uses `use[k]` in round k: the most of any
  /// round; with overlap, the even rounds' most (aligned) and, from `odd`
  /// on, the odd rounds' most.
  uint64_t halves(const std::vector<uint64_t> &use, uint64_t &odd) const {
    uint64_t even = 0, oddMost = 0;
    for (size_t k = 0; k < use.size(); ++k) {
      uint64_t &most = s->overlaps() && (k & 1) ? oddMost : even;
      most = std::max(most, use[k]);
    }
    odd = s->overlaps() && oddMost ? alignUp(even) : 0;
    return odd + (odd ? oddMost : even);
  }

  const loadplan_schedule_spec_t &spec;
  std::unique_ptr<Schedule> s;
  std::vector<std::vector<Group>> groups; // per tensor
  std::vector<std::unique_ptr<Landing>> landings; // per receiver
  std::vector<uint64_t> load;                     // bytes per sender
  std::vector<Draft> drafts;
  std::vector<Message> messages;
  std::vector<Part> parts; // scratch
};

} // namespace

std::unique_ptr<Schedule>
loadplan::transfer::buildSchedule(const loadplan_schedule_spec_t &spec) {
  return Builder(spec).build();
}

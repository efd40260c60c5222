//===- ScheduleText.cpp - A schedule's summary and listing ------*- C++ -*-===//
//
// What loadplan_schedule_summary and loadplan_schedule_text give, and the
// labels the builder's messages share with the listing.
//
//===----------------------------------------------------------------------===//

#include "Schedule.h"
#include "../Status.h"
#include "loadplan/format/ByteIO.h"

#include <algorithm>

using namespace loadplan;
using namespace loadplan::transfer;
using loadplan_format::hex64;

std::string loadplan::transfer::senderLabel(const Schedule &s, uint32_t i) {
  return concat("sender ", i, " (rank ", s.senders[i].commRank, ")");
}
std::string loadplan::transfer::receiverLabel(const Schedule &s, uint32_t i) {
  return concat("receiver ", i, " (rank ", s.receivers[i].commRank, ")");
}

std::string loadplan::transfer::tensorText(const Tensor &t) {
  return concat(loadplan_dtype_name(t.dtype), " ", t.shape);
}

uint64_t Schedule::numMessages() const {
  uint64_t n = 0;
  for (const Piece &p : pieces)
    n += !(p.flags & LOADPLAN_PIECE_JOINED);
  return n;
}

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
  out.num_messages = numMessages();
  out.flags = flags;
  out.join_below = joinBelow;
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
     << numRounds << " rounds, " << pieces.size() << " pieces in "
     << sum.num_messages << " messages\n"
     << "fingerprint " << hex64(fingerprint) << ", checksum " << hex64(checksum)
     << "\n"
     << "pieces under " << joinBelow << " bytes travel together; rounds "
     << (overlaps() ? "overlap" : "run one after another") << "\n"
     << "bytes: needed " << sum.bytes_needed << ", moved " << sum.bytes_moved
     << " (between ranks " << sum.bytes_between_ranks << "), in place "
     << sum.bytes_in_place << ", staged " << sum.bytes_staged << ", packed "
     << sum.bytes_packed << "\n";
  std::vector<uint64_t> sent(senders.size(), 0), got(receivers.size(), 0);
  std::vector<uint64_t> sentPieces(senders.size(), 0), gotPieces(receivers.size(), 0);
  std::vector<uint64_t> sentMessages(senders.size(), 0),
      gotMessages(receivers.size(), 0);
  for (const Piece &p : pieces) {
    uint64_t bytes = pieceBytes(p);
    sent[p.sender] += bytes;
    got[p.receiver] += bytes;
    ++sentPieces[p.sender];
    ++gotPieces[p.receiver];
    bool starts = !(p.flags & LOADPLAN_PIECE_JOINED);
    sentMessages[p.sender] += starts;
    gotMessages[p.receiver] += starts;
  }
  for (uint32_t i = 0; i < senders.size(); ++i)
    os << senderLabel(*this, i) << ": holds " << senders[i].holdings.size()
       << " tensors, sends " << sent[i] << " bytes in " << sentPieces[i]
       << " pieces (" << sentMessages[i] << " messages), staging "
       << senders[i].stagingBytes << " of " << senders[i].stagingCap << "\n";
  for (uint32_t i = 0; i < receivers.size(); ++i) {
    const Receiver &r = receivers[i];
    uint64_t needed = 0;
    for (const Need &n : r.needs)
      needed += uint64_t(n.range.volume()) * uint64_t(tensors[n.tensor].itemSize());
    os << receiverLabel(*this, i) << ": plan " << hex64(r.planFingerprint)
       << ", needs " << needed << " bytes in " << r.needs.size()
       << " boxes, receives " << got[i] << " bytes in " << gotPieces[i]
       << " pieces (" << gotMessages[i] << " messages), staging "
       << r.stagingBytes;
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
    uint64_t messages = 0;
    for (size_t k = i; k < j; ++k)
      messages += !(pieces[order[k]].flags & LOADPLAN_PIECE_JOINED);
    os << senderLabel(*this, first.sender) << " -> "
       << receiverLabel(*this, first.receiver) << ": " << j - i
       << " pieces in " << messages << " messages, " << bytes << " bytes\n";
    for (; i < j; ++i) {
      const Piece &p = pieces[order[i]];
      const Need &n = receivers[p.receiver].needs[p.need];
      // A joined piece continues the message of the line above it.
      os << (p.flags & LOADPLAN_PIECE_JOINED ? "  + " : "  ") << "round "
         << p.round << " " << quote(tensors[n.tensor].name) << " "
         << boxText(p.box) << " " << pieceBytes(p) << " bytes"
         << (p.flags & LOADPLAN_PIECE_PACKED ? ", packed" : "")
         << (p.flags & LOADPLAN_PIECE_STAGED ? ", staged" : ", in place")
         << "\n";
    }
  }
  return os.str();
}

//===- ScheduleLanding.cpp - Where a receiver's pieces land -----*- C++ -*-===//
//
// A receiver's plan seen from a schedule: which needs it has of the
// checkpoint tensors, and where in the plan's targets (or the fallback
// buffers) each piece of a need lands. The builder asks it which pieces can
// be received in place; the engine, where to put them.
//
//===----------------------------------------------------------------------===//

#include "Schedule.h"
#include "../Status.h"
#include "loadplan/transform.h"

#include <unordered_set>

using namespace loadplan;
using namespace loadplan::transfer;

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
    boxes[ei] = e.boxes;
    writes[ei].resize(e.boxes.size());
    for (const Write &w : e.writes)
      writes[ei][w.box].push_back({Region{w.offset, w.shape, w.stride},
                                   w.target, w.convertTo, w.transform});
  }
}

std::pair<uint32_t, uint64_t> Landing::address(uint32_t target, int64_t offset,
                                               int64_t itemSize) const {
  uint64_t byte = uint64_t(offset) * uint64_t(itemSize);
  if (target < numTargets) {
    const Target &t = plan.targets[target];
    return {t.storage, t.byteOffset + byte};
  }
  return {uint32_t(plan.storageSizes.size()) + (target - numTargets), byte};
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
    for (uint32_t b = 0; b < e->boxes.size(); ++b)
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
    out.push_back(
        {wholeBox(e.shape), &wholeRegion[ei], fallbackTarget(ei), 0, 0});
    return;
  }
  if (e.kind != LOADPLAN_KIND_DIRECT)
    return;
  for (uint32_t b = 0; b < e.boxes.size(); ++b) {
    if (need.kind == LOADPLAN_NEED_BOX && b != need.box)
      continue;
    for (const BoxWrite &w : writes[ei][b])
      out.push_back(
          {boxes[ei][b], &w.region, w.target, w.convertTo, w.transform});
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
    if (d.transform)
      restrictTransformed(tensors[need.tensor].name, d, sub, parts);
    else
      restrictRegion(d.box, *d.region, sub, parts);
    for (size_t i = from; i < parts.size(); ++i) {
      parts[i].target = d.target;
      parts[i].convertTo = d.convertTo;
      parts[i].transform = d.transform;
    }
  }
  if (hits != 1 || parts.size() != before + 1)
    return false;
  const Part &only = parts.back();
  // Bytes that convert or transform cannot land as they come.
  if (only.box != piece || only.convertTo || only.transform ||
      !isContiguousRun(only.region))
    return false;
  target = only.target;
  return true;
}

void Landing::restrictTransformed(const std::string &name,
                                  const Destination &d, const Box &sub,
                                  std::vector<Part> &out) const {
  auto [known, dtype, rows, cols, words] = loadplan_transform::atomOf(d.transform);
  const Box &box = d.box;
  int64_t r0 = sub.lo[0] - box.lo[0], r1 = sub.hi[0] - box.lo[0];
  int64_t c0 = sub.lo[1] - box.lo[1], c1 = sub.hi[1] - box.lo[1];
  if (r0 % rows || r1 % rows || c0 % cols || c1 % cols)
    fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "piece ", boxText(sub), " of ",
         quote(name), " cuts the atoms of its plan's transform ",
         loadplan_transform_name(d.transform), " (", rows, " rows by ", cols,
         " columns from the first element of box ", boxText(box),
         "): every sender must hold whole atoms of it");
  // In the transform's output the box is [atom columns, atom rows, words],
  // which the region splits; the piece is a block of it.
  Box atoms{std::vector<int64_t>{0, 0, 0},
            std::vector<int64_t>{box.extent(1) / cols, box.extent(0) / rows,
                                 words}};
  Box block{std::vector<int64_t>{c0 / cols, r0 / rows, 0},
            std::vector<int64_t>{c1 / cols, r1 / rows, words}};
  size_t from = out.size();
  restrictRegion(atoms, *d.region, block, out);
  for (size_t i = from; i < out.size(); ++i) {
    const Box &b = out[i].box;
    if (b.lo[2] != 0 || b.hi[2] != words)
      fail(LOADPLAN_STATUS_INTERNAL, "a part of ", quote(name),
           " splits the words of an atom");
    out[i].box = Box{std::vector<int64_t>{box.lo[0] + b.lo[1] * rows,
                                          box.lo[1] + b.lo[0] * cols},
                     std::vector<int64_t>{box.lo[0] + b.hi[1] * rows,
                                          box.lo[1] + b.hi[0] * cols}};
  }
}

std::vector<int64_t> Landing::granule(const Need &need) const {
  std::vector<Destination> dests;
  destinations(need, dests);
  for (const Destination &d : dests)
    if (loadplan_transform::Atom a = loadplan_transform::atomOf(d.transform);
        a.known)
      return {a.rows, a.cols};
  return {};
}

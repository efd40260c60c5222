//===- DeviceCopy.cpp - Copies as the CUDA kernel runs them ------*- C++ -*-===//
//
// Host code only: built with or without the CUDA toolkit, so the tests can
// check device programs everywhere.
//
//===----------------------------------------------------------------------===//

#include "DeviceCopy.h"
#include "../Copies.h"
#include "../Status.h"

using namespace loadplan;

DeviceProgram loadplan::buildDeviceProgram(const Copies &copies) {
  DeviceProgram out;
  out.copies.reserve(copies.copies.size());
  out.chunks.reserve(copies.copies.size());
  for (const Copy &c : copies.copies) {
    if (c.numDims > uint32_t(kDeviceMaxDims))
      fail(LOADPLAN_STATUS_UNAVAILABLE, "a write of entry ", c.entry,
           " needs ", c.numDims, " dims after merging; the CUDA executor "
           "handles at most ", kDeviceMaxDims);
    DeviceCopy d{};
    d.dst = reinterpret_cast<uint64_t>(c.dst);
    d.srcOffset = c.srcOffset;
    d.run = c.run;
    d.bytes = c.bytes();
    d.numDims = static_cast<int32_t>(c.numDims);
    uint64_t alignment = d.dst | uint64_t(d.srcOffset) | uint64_t(d.run);
    const ByteDim *dims = copies.dimsOf(c);
    for (uint32_t k = 0; k < c.numDims; ++k) {
      d.size[k] = dims[k].size;
      d.srcStride[k] = dims[k].srcStride;
      d.dstStride[k] = dims[k].dstStride;
      alignment |= uint64_t(dims[k].srcStride) | uint64_t(dims[k].dstStride);
    }
    d.unit = 16;
    while (alignment & uint64_t(d.unit - 1))
      d.unit >>= 1;
    d.convertFrom = c.convertFrom;
    d.convertTo = c.convertTo;
    d.transform = c.transform;
    d.srcRowStride = c.srcRowStride;
    d.srcColStride = c.srcColStride;
    d.atomRows = c.atomRows;
    d.itemSize = int32_t(c.itemSize);
    d.srcItemSize = int32_t(c.srcItemSize);
    out.copies.push_back(d);
    out.chunks.push_back(
        uint64_t((d.bytes + kDeviceChunkBytes - 1) / kDeviceChunkBytes));
  }
  return out;
}

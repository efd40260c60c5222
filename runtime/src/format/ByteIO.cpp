//===- ByteIO.cpp - Plan and schedule file bytes ----------------*- C++ -*-===//

#include "loadplan/format/ByteIO.h"

#include <cstdio>
#include <cstring>

using namespace loadplan_format;

std::string Field::str() const {
  std::string out;
  for (unsigned k = 0; k < count; ++k) {
    const Part &p = parts[k];
    if (k)
      out += ' ';
    out += p.held ? *p.held : std::string(p.text);
    if (p.indexed)
      out += " " + std::to_string(p.index);
  }
  return out;
}

std::string ByteReader::shortfall(const Field &what, size_t n) const {
  return what.str() + " at byte " + std::to_string(offset()) + " needs " +
         std::to_string(n) + " bytes but " + std::to_string(left()) +
         " are left";
}

ByteWriter loadplan_format::startFile() {
  ByteWriter file;
  file.bytes.resize(FileHeader::kSize);
  return file;
}

uint64_t loadplan_format::writeHeader(ByteWriter &file, const char *magic,
                                      uint32_t version, uint64_t fingerprint) {
  auto *header = reinterpret_cast<uint8_t *>(file.bytes.data());
  std::memcpy(header, magic, FileHeader::kMagicSize);
  storeU32(header + FileHeader::kVersionAt, version);
  storeU32(header + FileHeader::kHeaderSizeAt, FileHeader::kSize);
  storeU64(header + FileHeader::kFingerprintAt, fingerprint);
  return resealHeader(header, file.bytes.size());
}

uint64_t loadplan_format::resealHeader(uint8_t *file, size_t size) {
  size_t payloadSize = size - FileHeader::kSize;
  uint64_t checksum =
      loadplan_checksum64(file + FileHeader::kSize, payloadSize);
  storeU64(file + FileHeader::kPayloadSizeAt, payloadSize);
  storeU64(file + FileHeader::kChecksumAt, checksum);
  return checksum;
}

std::string loadplan_format::hex64(uint64_t value, const char *prefix) {
  char digits[17];
  std::snprintf(digits, sizeof digits, "%016llx",
                static_cast<unsigned long long>(value));
  return prefix + std::string(digits);
}

//===- ByteIO.h - Plan and schedule file bytes ------------------*- C++ -*-===//
//
// What plan_format.h and schedule_format.h lay out, one way each: integers
// little-endian and strings as a u32 length then their bytes, appended by
// ByteWriter and read back by ByteReader with every read bounds checked;
// the 40-byte header both files start with, whose checksum is
// loadplan_checksum64 (XXH64) of the payload; and FNV-1a over integers and
// strings for their fingerprints and digests, computed by plan_format.h's
// functions. Plain C++17, no LLVM: the compiler and the runtime share it.
//
//===----------------------------------------------------------------------===//

#ifndef LOADPLAN_FORMAT_BYTEIO_H
#define LOADPLAN_FORMAT_BYTEIO_H

#include "loadplan/plan_format.h"
#include "loadplan/schedule_format.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

/// The file formats' C++ side. Not `loadplan`: compiler sources that use
/// `namespace mlir` name their own `mlir::loadplan` as `loadplan::`.
namespace loadplan_format {

//===----------------------------------------------------------------------===//
// Integers in memory
//===----------------------------------------------------------------------===//

inline uint32_t loadU32(const uint8_t *p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 |
         uint32_t(p[3]) << 24;
}

inline uint64_t loadU64(const uint8_t *p) {
  return uint64_t(loadU32(p)) | uint64_t(loadU32(p + 4)) << 32;
}

inline void storeU32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    p[i] = uint8_t(v >> (8 * i));
}

inline void storeU64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    p[i] = uint8_t(v >> (8 * i));
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

/// Appends fields to `bytes`. Plans run to tens of MB, so each field is
/// appended whole rather than byte by byte.
class ByteWriter {
public:
  std::string bytes;

  void u8(uint8_t v) { bytes.push_back(static_cast<char>(v)); }
  void u32(uint32_t v) {
    uint8_t buf[4];
    storeU32(buf, v);
    append(buf, sizeof buf);
  }
  void u64(uint64_t v) {
    uint8_t buf[8];
    storeU64(buf, v);
    append(buf, sizeof buf);
  }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  /// A u32 length, then the bytes.
  void str(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    bytes.append(s.data(), s.size());
  }
  void i64s(const std::vector<int64_t> &values) {
    for (int64_t v : values)
      i64(v);
  }

private:
  void append(const uint8_t *p, size_t n) {
    bytes.append(reinterpret_cast<const char *>(p), n);
  }
};

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

/// What a read is for, named in the message when the bytes run out:
/// "entry 12 write 3 target". The parts are kept as given (C strings,
/// numbers, or a std::string that must outlive the read) and joined only
/// when a message needs them, so a well-formed file is read without
/// formatting a label per field.
class Field {
public:
  Field(const char *text) { push(text, nullptr, 0, false); }
  /// `text` is held by reference: it must outlive every read given it.
  Field(const std::string &text) { push(nullptr, &text, 0, false); }
  Field(const char *text, uint64_t index) { push(text, nullptr, index, true); }
  /// This field with `text` (and `index`) after it.
  Field operator()(const char *text) const {
    Field f = *this;
    f.push(text, nullptr, 0, false);
    return f;
  }
  Field operator()(const char *text, uint64_t index) const {
    Field f = *this;
    f.push(text, nullptr, index, true);
    return f;
  }
  /// The parts joined by spaces.
  std::string str() const;

private:
  struct Part {
    const char *text;
    const std::string *held;
    uint64_t index;
    bool indexed;
  };
  static constexpr unsigned kMaxParts = 6;
  void push(const char *text, const std::string *held, uint64_t index,
            bool indexed) {
    if (count < kMaxParts)
      parts[count++] = {text, held, index, indexed};
  }
  Part parts[kMaxParts];
  unsigned count = 0;
};

/// Bounds-checked reads of `size` bytes at `data`, which sit at byte `base`
/// of their file (messages count from the file's start). `what` names the
/// field a read is for, for the message when the bytes run out.
///
/// A read past the end calls truncated(). A format's reader throws its error
/// there. By default the read yields zeros (an empty string or vector), no
/// later read yields anything, and ok() turns false: a lenient reader (the
/// fuzzers') reads as far as the bytes go and then asks.
class ByteReader {
public:
  ByteReader(const uint8_t *data, size_t size, size_t base = 0)
      : data(data), size(size), base(base) {}
  virtual ~ByteReader() = default;

  size_t left() const { return size - pos; }
  /// The position in the file.
  size_t offset() const { return base + pos; }
  /// False once a read ran past the end.
  bool ok() const { return !failed; }

  /// The next `n` bytes, or nullptr when fewer are left.
  const uint8_t *take(size_t n, const Field &what) {
    if (n > left()) {
      truncated(what, n);
      failed = true;
      pos = size;
      return nullptr;
    }
    const uint8_t *p = data + pos;
    pos += n;
    return p;
  }
  uint8_t u8(const Field &what) {
    const uint8_t *p = take(1, what);
    return p ? *p : 0;
  }
  uint32_t u32(const Field &what) {
    const uint8_t *p = take(4, what);
    return p ? loadU32(p) : 0;
  }
  uint64_t u64(const Field &what) {
    const uint8_t *p = take(8, what);
    return p ? loadU64(p) : 0;
  }
  int64_t i64(const Field &what) {
    return static_cast<int64_t>(u64(what));
  }
  /// A u32 length (for `what` "length"), then that many bytes.
  std::string str(const Field &what) {
    uint32_t n = u32(what("length"));
    const uint8_t *p = take(n, what);
    return p ? std::string(reinterpret_cast<const char *>(p), n)
             : std::string();
  }
  /// `n` i64s; nothing is allocated for more than the bytes left hold.
  std::vector<int64_t> i64s(size_t n, const Field &what) {
    if (n > left() / 8) {
      take(n * 8, what);
      return {};
    }
    std::vector<int64_t> out(n);
    for (size_t i = 0; i < n; ++i)
      out[i] = i64(what);
    return out;
  }

protected:
  /// A read of `n` bytes for `what` found fewer left.
  virtual void truncated(const Field & /*what*/, size_t /*n*/) {}
  /// "<what> at byte <offset> needs <n> bytes but <left> are left": what
  /// the formats' messages say of a short read.
  std::string shortfall(const Field &what, size_t n) const;

private:
  const uint8_t *data;
  size_t size, base;
  size_t pos = 0;
  bool failed = false;
};

//===----------------------------------------------------------------------===//
// The file header
//===----------------------------------------------------------------------===//

/// The header plan and schedule files share: char magic[8], u32 version,
/// u32 header_size, u64 fingerprint, u64 payload_size and u64 checksum
/// (loadplan_checksum64 of the payload), at these offsets.
struct FileHeader {
  static constexpr size_t kMagicSize = 8, kVersionAt = 8, kHeaderSizeAt = 12,
                          kFingerprintAt = 16, kPayloadSizeAt = 24,
                          kChecksumAt = 32, kSize = 40;
};
static_assert(FileHeader::kSize == LOADPLAN_PLAN_HEADER_SIZE &&
                  FileHeader::kSize == LOADPLAN_SCHEDULE_HEADER_SIZE &&
                  FileHeader::kMagicSize == LOADPLAN_PLAN_MAGIC_SIZE &&
                  FileHeader::kMagicSize == LOADPLAN_SCHEDULE_MAGIC_SIZE,
              "plan and schedule headers have one layout");

/// A writer with room for the header: append the payload, then writeHeader.
ByteWriter startFile();

/// Fills in the header of a file begun with startFile, for the payload
/// after it; returns the payload's checksum. `magic` has
/// FileHeader::kMagicSize bytes.
uint64_t writeHeader(ByteWriter &file, const char *magic, uint32_t version,
                     uint64_t fingerprint);

/// Sets the payload size and checksum in the header of the `size` bytes at
/// `file` (at least FileHeader::kSize) to those of the bytes after it and
/// leaves the other fields as they are; returns the checksum. Tests and
/// fuzzers change payloads and reseal them, so that the payload checks are
/// reached.
uint64_t resealHeader(uint8_t *file, size_t size);

//===----------------------------------------------------------------------===//
// Hashing
//===----------------------------------------------------------------------===//

/// FNV-1a over integers, each as a u64, and strings, each as a u64 length
/// then its bytes: how the formats' fingerprints and digests are taken.
class Hasher {
public:
  uint64_t value = LOADPLAN_FNV1A64_INIT;

  void u64(uint64_t v) { value = loadplan_fnv1a64_u64(value, v); }
  void str(std::string_view s) {
    value = loadplan_fnv1a64_str(value, s.data(), s.size());
  }
  /// Each of `values` (a vector, a box's Dims) as a u64.
  template <typename Ints> void i64s(const Ints &values) {
    for (int64_t v : values)
      u64(static_cast<uint64_t>(v));
  }
};

/// `value` as 16 lower-case hex digits after `prefix`: messages print
/// fingerprints and checksums with 0x, the plan's JSON without.
std::string hex64(uint64_t value, const char *prefix = "0x");

} // namespace loadplan_format

#endif // LOADPLAN_FORMAT_BYTEIO_H

//===- SharedMemory.cpp - Colocated transfers: other ranks' memory -------===//
//
// A table travels as bytes, native-endian (both ends are on one machine):
//   u32 magic "LPSH", u32 pid, u32 regions, u32 places,
//   regions x { i32 fd, u32 0, u64 dev, u64 ino, u64 size },
//   places  x { u32 region (kNoRegion: an empty tensor), u32 0, u64 offset }.
//
//===----------------------------------------------------------------------===//

#include "SharedMemory.h"
#include "../Status.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

using namespace loadplan;
using namespace loadplan::transfer;

namespace {

using namespace loadplan::transfer::table;

constexpr uint32_t kMagic = 0x4853504cu; // "LPSH"
constexpr size_t kRegion = 32;

/// A shared file mapping of this process (/proc/self/maps).
struct MapLine {
  uintptr_t start = 0, end = 0;
  uint64_t pgoff = 0, dev = 0, ino = 0;
  std::string path;
};

std::vector<MapLine> sharedMappings() {
  std::vector<MapLine> out;
  FILE *f = std::fopen("/proc/self/maps", "re");
  if (!f)
    fail(LOADPLAN_STATUS_IO_ERROR, "cannot read /proc/self/maps: ",
         std::strerror(errno));
  char line[4096];
  while (std::fgets(line, sizeof line, f)) {
    unsigned long long start, end, pgoff, ino;
    unsigned major, minor;
    char perms[8];
    int pathAt = 0;
    if (std::sscanf(line, "%llx-%llx %7s %llx %x:%x %llu %n", &start, &end,
                    perms, &pgoff, &major, &minor, &ino, &pathAt) < 7)
      continue;
    if (perms[3] != 's' || ino == 0)
      continue;
    MapLine m;
    m.start = uintptr_t(start);
    m.end = uintptr_t(end);
    m.pgoff = pgoff;
    m.dev = uint64_t(makedev(major, minor));
    m.ino = ino;
    if (pathAt > 0) {
      m.path = line + pathAt;
      while (!m.path.empty() && (m.path.back() == '\n' || m.path.back() == ' '))
        m.path.pop_back();
    }
    out.push_back(std::move(m));
  }
  std::fclose(f);
  return out;
}

/// Where `bytes` bytes at `data` lie among `maps` (sorted by address).
enum class Where { Inside, Outside, RunsPast };

Where locate(const std::vector<MapLine> &maps, const uint8_t *data, uint64_t bytes,
             const MapLine *&found) {
  uintptr_t at = reinterpret_cast<uintptr_t>(data);
  auto it = std::upper_bound(maps.begin(), maps.end(), at,
                             [](uintptr_t a, const MapLine &m) { return a < m.start; });
  if (it == maps.begin() || at >= std::prev(it)->end)
    return Where::Outside;
  const MapLine &m = *std::prev(it);
  // The bytes may run on through mappings of the same file that follow.
  uintptr_t end = at + bytes;
  for (auto next = it; end > std::prev(next)->end; ++next)
    if (next == maps.end() || next->start != std::prev(next)->end ||
        next->ino != m.ino || next->dev != m.dev ||
        next->pgoff != std::prev(next)->pgoff +
                           (std::prev(next)->end - std::prev(next)->start))
      return Where::RunsPast;
  found = &m;
  return Where::Inside;
}

/// Where an empty tensor's bytes are: nowhere, but not NULL.
const uint8_t kEmpty[1] = {0};

} // namespace

void table::putHeader(std::vector<uint8_t> &out, uint32_t magic, uint32_t pid,
                      size_t regions, size_t regionBytes, size_t places) {
  out.reserve(kHeaderBytes + regions * regionBytes + places * kPlaceBytes);
  put<uint32_t>(out, magic);
  put<uint32_t>(out, pid);
  put<uint32_t>(out, uint32_t(regions));
  put<uint32_t>(out, uint32_t(places));
}

table::Header table::getHeader(const uint8_t *&p, size_t size, uint32_t magic,
                              size_t regionBytes, size_t numPlaces,
                              const std::function<void(const std::string &)> &bad) {
  if (size < kHeaderBytes)
    bad(concat(size, " bytes"));
  if (get<uint32_t>(p) != magic)
    bad("its magic is wrong");
  Header h;
  h.pid = get<uint32_t>(p);
  h.regions = get<uint32_t>(p);
  uint32_t places = get<uint32_t>(p);
  if (places != numPlaces)
    bad(concat(places, " places for ", numPlaces, " holdings"));
  if (size != kHeaderBytes + uint64_t(h.regions) * regionBytes + uint64_t(places) * kPlaceBytes)
    bad(concat(size, " bytes for ", h.regions, " regions and ", places, " places"));
  return h;
}

void table::putPlaces(std::vector<uint8_t> &out, const std::vector<Place> &places) {
  for (const Place &p : places) {
    put<uint32_t>(out, p.region);
    put<uint32_t>(out, 0);
    put<uint64_t>(out, p.offset);
  }
}

std::vector<table::Place>
table::getPlaces(const uint8_t *&p, size_t count, uint32_t regions,
                 const std::function<void(const std::string &)> &bad) {
  std::vector<Place> places(count);
  for (Place &pl : places) {
    pl.region = get<uint32_t>(p);
    p += 4;
    pl.offset = get<uint64_t>(p);
    if (pl.region != kNoRegion && pl.region >= regions)
      bad(concat("a place names region ", pl.region, " of ", regions));
  }
  return places;
}

void table::placeHoldings(const std::vector<Place> &places,
                          const std::vector<Mapped> &regions,
                          const std::vector<uint64_t> &bytes,
                          const std::string &table, const char *unit,
                          std::vector<const uint8_t *> &out) {
  out.assign(places.size(), nullptr);
  for (size_t i = 0; i < places.size(); ++i) {
    const Place &p = places[i];
    if (p.region == kNoRegion) {
      if (bytes[i])
        fail(LOADPLAN_STATUS_INVALID_ARGUMENT, table, " places holding ", i,
             " (", bytes[i], " bytes) nowhere");
      out[i] = kEmpty;
      continue;
    }
    const Mapped &m = regions[p.region];
    if (p.offset > m.size || bytes[i] > m.size - p.offset)
      fail(LOADPLAN_STATUS_INVALID_ARGUMENT, table, " places holding ", i, " (",
           bytes[i], " bytes) at ", p.offset, " of ", unit, " of ", m.size,
           " bytes");
    out[i] = static_cast<const uint8_t *>(m.data) + p.offset;
  }
}

std::vector<bool> loadplan::transfer::inSharedMemory(const std::vector<const uint8_t *> &data,
                                                    const std::vector<uint64_t> &bytes) {
  std::vector<MapLine> maps = sharedMappings();
  std::vector<bool> out(data.size(), true);
  for (size_t i = 0; i < data.size(); ++i) {
    const MapLine *found = nullptr;
    out[i] = !bytes[i] || locate(maps, data[i], bytes[i], found) == Where::Inside;
  }
  return out;
}

HostIdentity loadplan::transfer::hostIdentity(uint32_t colocated) {
  HostIdentity id;
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string text;
  std::getline(boot, text);
  std::memcpy(id.bootId, text.data(), std::min(text.size(), sizeof id.bootId - 1));
  struct stat st;
  if (::stat("/proc/self/ns/pid", &st) == 0)
    id.pidNamespace = uint64_t(st.st_ino);
  id.pid = uint32_t(::getpid());
  id.colocated = colocated;
  return id;
}

std::vector<uint8_t> SharedTable::bytes() const {
  std::vector<uint8_t> out;
  putHeader(out, kMagic, pid, regions.size(), kRegion, places.size());
  for (const Region &r : regions) {
    put<int32_t>(out, r.fd);
    put<uint32_t>(out, 0);
    put<uint64_t>(out, r.dev);
    put<uint64_t>(out, r.ino);
    put<uint64_t>(out, r.size);
  }
  putPlaces(out, places);
  return out;
}

SharedTable SharedTable::parse(const uint8_t *data, size_t size,
                               size_t numPlaces, const std::string &who) {
  auto bad = [&](const std::string &why) {
    fail(LOADPLAN_STATUS_INVALID_ARGUMENT, "the shared-memory table of ", who,
         " is not one: ", why);
  };
  const uint8_t *p = data;
  Header h = getHeader(p, size, kMagic, kRegion, numPlaces, bad);
  SharedTable t;
  t.pid = h.pid;
  t.regions.resize(h.regions);
  for (Region &r : t.regions) {
    r.fd = get<int32_t>(p);
    p += 4;
    r.dev = get<uint64_t>(p);
    r.ino = get<uint64_t>(p);
    r.size = get<uint64_t>(p);
  }
  t.places = getPlaces(p, numPlaces, h.regions, bad);
  return t;
}

SharedExporter::~SharedExporter() {
  for (auto &[key, d] : fds)
    if (d.owned)
      ::close(d.fd);
}

bool SharedExporter::resolve(const std::vector<const uint8_t *> &data,
                             const std::vector<uint64_t> &bytes,
                             const std::function<std::string(size_t)> &what) {
  // Unchanged since the last table: the same addresses, and each file's
  // descriptor (the process's own) still open on the same file at the
  // same size. A storage freed closes its descriptor (torch's), so a new
  // file at its address is found below; a live storage keeps its mapping,
  // so no other can take its address.
  if (!currentBytes.empty() && data == lastData) {
    bool same = true;
    for (size_t k = 0; same && k < current.regions.size(); ++k) {
      const SharedTable::Region &r = current.regions[k];
      struct stat st;
      // A descriptor opened here outlives the storage: no proof.
      auto d = fds.find({r.dev, r.ino});
      same = d != fds.end() && !d->second.owned && ::fstat(r.fd, &st) == 0 &&
             uint64_t(st.st_dev) == r.dev &&
             uint64_t(st.st_ino) == r.ino && uint64_t(st.st_size) == r.size;
    }
    if (same)
      return false;
  }
  std::vector<MapLine> maps = sharedMappings();
  SharedTable table;
  table.pid = uint32_t(::getpid());
  table.places.resize(data.size());
  std::map<std::pair<uint64_t, uint64_t>, uint32_t> regionOf;
  std::vector<const MapLine *> regionLine;
  for (size_t i = 0; i < data.size(); ++i) {
    if (!bytes[i]) {
      table.places[i] = {kNoRegion, 0};
      continue;
    }
    uintptr_t at = reinterpret_cast<uintptr_t>(data[i]);
    const MapLine *found = nullptr;
    switch (locate(maps, data[i], bytes[i], found)) {
    case Where::Outside:
      fail(LOADPLAN_STATUS_INVALID_UPDATE, what(i),
           " is not in shared memory: a colocated transfer reads a sender's "
           "tensors where they are, so they must live in a shared file "
           "mapping (torch: tensor.share_memory_(), or "
           "loadplan.transfer.share_memory(tensors) once before the first "
           "update)");
    case Where::RunsPast:
      fail(LOADPLAN_STATUS_INVALID_UPDATE, what(i),
           " runs past the end of the shared mapping it starts in");
    case Where::Inside:
      break;
    }
    const MapLine &m = *found;
    auto key = std::make_pair(m.dev, m.ino);
    auto [r, added] = regionOf.emplace(key, uint32_t(table.regions.size()));
    if (added) {
      SharedTable::Region region;
      region.dev = m.dev;
      region.ino = m.ino;
      table.regions.push_back(region);
      regionLine.push_back(&m);
    }
    table.places[i] = {r->second, m.pgoff + (at - m.start)};
  }

  // A descriptor of each file: the one the process holds (torch keeps one
  // per shared storage), or one opened here by the file's name. Checked on
  // every update: a descriptor closed and its number reused is found again.
  bool scanned = false;
  std::map<std::pair<uint64_t, uint64_t>, int> open;
  for (size_t k = 0; k < table.regions.size(); ++k) {
    SharedTable::Region &region = table.regions[k];
    auto key = std::make_pair(region.dev, region.ino);
    struct stat st;
    auto known = fds.find(key);
    if (known != fds.end() &&
        (::fstat(known->second.fd, &st) != 0 || uint64_t(st.st_dev) != key.first ||
         uint64_t(st.st_ino) != key.second)) {
      if (known->second.owned)
        ::close(known->second.fd);
      fds.erase(known);
      known = fds.end();
    }
    if (known == fds.end()) {
      if (!scanned) {
        scanned = true;
        if (DIR *dir = ::opendir("/proc/self/fd")) {
          int self = ::dirfd(dir);
          while (dirent *e = ::readdir(dir)) {
            int fd = std::atoi(e->d_name);
            struct stat fst;
            if (e->d_name[0] == '.' || fd == self || ::fstat(fd, &fst) != 0)
              continue;
            open.emplace(std::make_pair(uint64_t(fst.st_dev), uint64_t(fst.st_ino)), fd);
          }
          ::closedir(dir);
        }
      }
      Descriptor d;
      const std::string &path = regionLine[k]->path;
      if (auto o = open.find(key); o != open.end()) {
        d.fd = o->second;
      } else if (!path.empty() && path[0] == '/' &&
                 path.find(" (deleted)") == std::string::npos) {
        d.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        d.owned = d.fd >= 0;
        if (d.fd < 0 && errno == EMFILE)
          fail(LOADPLAN_STATUS_IO_ERROR, "cannot open the shared file ", quote(path),
               ": ", std::strerror(EMFILE),
               " (raise the limit, ulimit -n, or hold fewer, larger buffers)");
        if (d.fd >= 0 && (::fstat(d.fd, &st) != 0 || uint64_t(st.st_dev) != key.first ||
                          uint64_t(st.st_ino) != key.second)) {
          ::close(d.fd);
          d.fd = -1;
        }
      }
      if (d.fd < 0)
        fail(LOADPLAN_STATUS_INVALID_UPDATE, "the shared mapping of ",
             path.empty() ? std::string("a file") : quote(path), " that holds ",
             what(size_t(std::find_if(table.places.begin(), table.places.end(),
                                      [&](const SharedTable::Place &p) {
                                        return p.region == k;
                                      }) -
                         table.places.begin())),
             " has no open descriptor in this process and no name to open: "
             "other processes cannot map it");
      known = fds.emplace(key, d).first;
    }
    region.fd = known->second.fd;
    if (::fstat(region.fd, &st) != 0)
      fail(LOADPLAN_STATUS_IO_ERROR, "fstat of a shared file: ", std::strerror(errno));
    region.size = uint64_t(st.st_size);
  }
  // Descriptors no table names any more.
  for (auto it = fds.begin(); it != fds.end();) {
    if (regionOf.count(it->first)) {
      ++it;
      continue;
    }
    if (it->second.owned)
      ::close(it->second.fd);
    it = fds.erase(it);
  }
  for (size_t i = 0; i < table.places.size(); ++i) {
    const SharedTable::Place &p = table.places[i];
    if (p.region != kNoRegion && p.offset + bytes[i] > table.regions[p.region].size)
      fail(LOADPLAN_STATUS_INVALID_UPDATE, what(i),
           " lies past the end of its shared file");
  }
  std::vector<uint8_t> out = table.bytes();
  bool changed = out != currentBytes;
  lastData = data;
  current = std::move(table);
  currentBytes = std::move(out);
  return changed;
}

SharedMapper::SharedMapper(SharedMapper &&other) noexcept
    : maps(std::move(other.maps)) {
  other.maps.clear();
}

SharedMapper::~SharedMapper() { release(); }

void SharedMapper::map(const uint8_t *table, size_t size,
                       const std::vector<uint64_t> &bytes, const std::string &who,
                       std::vector<const uint8_t *> &out) {
  map(SharedTable::parse(table, size, bytes.size(), who), bytes, who, out);
}

std::unique_ptr<Exporter> loadplan::transfer::makeSharedExporter() {
  return std::make_unique<SharedExporter>();
}

std::unique_ptr<Mapper> loadplan::transfer::makeSharedMapper() {
  return std::make_unique<SharedMapper>();
}

namespace {
void unmap(const table::Mapped &m) {
  if (m.data)
    ::munmap(m.data, m.size);
}
} // namespace

void SharedMapper::release() {
  for (auto &[key, m] : maps)
    unmap(m);
  maps.clear();
}

void SharedMapper::map(const SharedTable &table, const std::vector<uint64_t> &bytes,
                       const std::string &who, std::vector<const uint8_t *> &out) {
  auto open = [&](size_t k) {
    const SharedTable::Region &r = table.regions[k];
    std::string path = concat("/proc/", table.pid, "/fd/", r.fd);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      fail(LOADPLAN_STATUS_IO_ERROR, "cannot open the shared memory of ", who,
           " (", path, "): ", std::strerror(errno),
           "; colocated ranks must run on one machine, as one user");
    struct stat st;
    if (::fstat(fd, &st) != 0 || uint64_t(st.st_dev) != r.dev ||
        uint64_t(st.st_ino) != r.ino || uint64_t(st.st_size) < r.size) {
      ::close(fd);
      fail(LOADPLAN_STATUS_IO_ERROR, path, " is not the shared file ", who,
           " names (device, inode or size differ): the sender changed its "
           "buffers meanwhile, or the ranks are not in one PID namespace");
    }
    Mapped m;
    m.size = r.size;
    if (r.size) {
      m.data = ::mmap(nullptr, r.size, PROT_READ, MAP_SHARED, fd, 0);
      if (m.data == MAP_FAILED) {
        int error = errno;
        ::close(fd);
        fail(LOADPLAN_STATUS_IO_ERROR, "cannot map the shared memory of ", who,
             " (", path, ", ", r.size, " bytes): ", std::strerror(error));
      }
    }
    ::close(fd);
    return m;
  };
  std::vector<Mapped> mapped = remap(
      maps, table.regions.size(),
      [&](size_t k) {
        const SharedTable::Region &r = table.regions[k];
        return Key{table.pid, r.fd, r.dev, r.ino, r.size};
      },
      open, unmap);
  placeHoldings(table.places, mapped, bytes,
                concat("the shared-memory table of ", who), "a file", out);
}

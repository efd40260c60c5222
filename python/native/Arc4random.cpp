//===- Arc4random.cpp - arc4random for a wheel's static LLVM --------------===//
//
// LLVM's Support library draws random numbers with arc4random where the C
// library it was built against has it (glibc 2.36 and later). Linked
// statically into the wheel's module and loadplan-opt, that one call would make the wheel
// need glibc 2.36; this definition, which the static LLVM objects bind to
// at link time, needs only getrandom (glibc 2.25), so that the wheel runs
// on glibc 2.35 (the manylinux_2_35 policy: Ubuntu 22.04 and later).
//
//===----------------------------------------------------------------------===//

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <sys/random.h>

extern "C" uint32_t arc4random(void) {
  uint32_t value;
  char *out = reinterpret_cast<char *>(&value);
  size_t left = sizeof value;
  while (left > 0) {
    ssize_t got = getrandom(out, left, 0);
    if (got < 0) {
      if (errno == EINTR)
        continue;
      abort(); // as arc4random does: it never fails
    }
    out += got;
    left -= static_cast<size_t>(got);
  }
  return value;
}

// Caps this process's address space, for the life of the object, at what it maps now plus `headroom`: an
// allocation sized by hostile input then fails at once, where on a machine with memory to spare it could succeed
// lazily and hide the bug.
#pragma once

#include <sys/resource.h>
#include <unistd.h>

#include <cstddef>
#include <fstream>

namespace corolla::test {

class AddressSpaceLimit {
 public:
  explicit AddressSpaceLimit(size_t headroom) {
    ::getrlimit(RLIMIT_AS, &old_);
    size_t pages = 0;
    std::ifstream("/proc/self/statm") >> pages;
    rlimit lim = old_;
    lim.rlim_cur = pages * static_cast<size_t>(::sysconf(_SC_PAGESIZE)) + headroom;
    ::setrlimit(RLIMIT_AS, &lim);
  }
  ~AddressSpaceLimit() { ::setrlimit(RLIMIT_AS, &old_); }
  AddressSpaceLimit(const AddressSpaceLimit&) = delete;
  AddressSpaceLimit& operator=(const AddressSpaceLimit&) = delete;

 private:
  rlimit old_{};
};

}  // namespace corolla::test

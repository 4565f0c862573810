#include "apps/api/connection_limits.hpp"

namespace corolla::api {

ConnectionLimits::Ticket ConnectionLimits::admit(const std::string& address) {
  {
    std::lock_guard lock(mutex_);
    auto& from_address = per_address_[address];
    if (total_ >= max_total_ || from_address >= max_per_address_) {
      if (from_address == 0) per_address_.erase(address);
      return nullptr;
    }
    ++total_;
    ++from_address;
  }
  return Ticket(static_cast<void*>(this), [self = shared_from_this(), address](void*) { self->release(address); });
}

void ConnectionLimits::release(const std::string& address) {
  std::lock_guard lock(mutex_);
  --total_;
  auto it = per_address_.find(address);
  if (it != per_address_.end() && --it->second == 0) per_address_.erase(it);
}

size_t ConnectionLimits::open() const {
  std::lock_guard lock(mutex_);
  return total_;
}

}  // namespace corolla::api

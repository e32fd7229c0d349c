// Test buffers with canaries: a known byte pattern before and after the region handed
// to the library, and a "never written" fill inside it, so tests can check that an
// operation wrote only where it may and left the rest byte-for-byte alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

namespace sntest {

// Byte `i` of the pattern used for guards (salt differs) and for untouched regions.
inline uint8_t patternByte(size_t i, uint8_t salt) { return uint8_t((i * 131u + 0x5Bu + salt) ^ (i >> 8)); }

class GuardedBuffer {
 public:
  static constexpr size_t kGuard = 64;

  GuardedBuffer() = default;
  // `bytes` usable bytes starting `misalign` bytes after a 64-byte boundary (to exercise
  // unaligned buffers; pass a multiple of the element size).
  GuardedBuffer(size_t bytes, size_t misalign = 0) { reset(bytes, misalign); }

  void reset(size_t bytes, size_t misalign = 0) {
    bytes_ = bytes;
    front_ = kGuard + misalign;
    total_ = front_ + bytes + kGuard;
    // Over-allocate so that the region can be placed relative to a 64-byte boundary.
    raw_.reset(new uint8_t[total_ + 64]);
    uintptr_t p = reinterpret_cast<uintptr_t>(raw_.get());
    base_ = raw_.get() + ((64 - p % 64) % 64);
    for (size_t i = 0; i < front_; ++i) base_[i] = patternByte(i, 0x11);
    for (size_t i = 0; i < kGuard; ++i) base_[front_ + bytes + i] = patternByte(i, 0x22);
    fillUntouched();
  }

  // The whole allocation, guards included (device-memory tests mirror it on a device).
  uint8_t* span() { return base_; }
  size_t spanBytes() const { return total_; }
  uint8_t* data() { return base_ + front_; }
  const uint8_t* data() const { return base_ + front_; }
  size_t bytes() const { return bytes_; }

  // Fills the usable region with the "untouched" pattern.
  void fillUntouched() {
    for (size_t i = 0; i < bytes_; ++i) base_[front_ + i] = patternByte(i, 0x33);
  }
  // True when bytes [from, to) of the usable region still hold the "untouched" pattern;
  // *where receives the first changed offset.
  bool untouched(size_t from, size_t to, size_t* where = nullptr) const {
    for (size_t i = from; i < to; ++i)
      if (base_[front_ + i] != patternByte(i, 0x33)) {
        if (where) *where = i;
        return false;
      }
    return true;
  }
  // Empty when both guards are intact, else a description of the first damage.
  std::string guardDamage() const {
    for (size_t i = 0; i < front_; ++i)
      if (base_[i] != patternByte(i, 0x11))
        return "byte " + std::to_string(long(i) - long(front_)) + " before the buffer was overwritten";
    for (size_t i = 0; i < kGuard; ++i)
      if (base_[front_ + bytes_ + i] != patternByte(i, 0x22))
        return "byte " + std::to_string(i) + " after the end of the buffer (" + std::to_string(bytes_) +
               " bytes) was overwritten";
    return {};
  }

 private:
  std::unique_ptr<uint8_t[]> raw_;
  uint8_t* base_ = nullptr;
  size_t bytes_ = 0, front_ = 0, total_ = 0;
};

}  // namespace sntest

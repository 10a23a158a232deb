#pragma once
// Storage: one reference-counted block of device memory. Tensors are views onto a Storage
// (shape + strides + offset); several tensors may share one.
//
// The storage also carries the version counter: every in-place write to any view of it bumps
// the version, and autograd compares it with the version recorded when a tensor was saved for
// backward (see SavedTensor in autograd.h).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "allocator.h"

namespace ember {

class Storage {
 public:
  // Allocates nbytes on device d through its allocator.
  Storage(size_t nbytes, Device d);
  // Wraps memory owned elsewhere; `deleter` (may be empty) runs when the storage dies.
  Storage(void* data, size_t nbytes, Device d, std::function<void(void*)> deleter);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;           // set when we own the memory
  std::function<void(void*)> deleter_;       // set for external memory
  uint64_t version_ = 0;
};

}  // namespace ember

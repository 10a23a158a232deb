#include "storage.h"

namespace ember {

Storage::Storage(size_t nbytes, Device d) : nbytes_(nbytes), device_(d) {
  allocator_ = &allocator_for(d);
  data_ = allocator_->allocate(nbytes);
}

Storage::Storage(void* data, size_t nbytes, Device d, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(d), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (allocator_ != nullptr) {
    allocator_->deallocate(data_, nbytes_);
  } else if (deleter_) {
    deleter_(data_);
  }
}

}  // namespace ember

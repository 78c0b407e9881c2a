// An allocator whose blocks start on a cache line, so the arenas' chunk bounds (multiples of 16
// floats) fall on line boundaries and two threads updating neighbouring chunks never share a line.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace convoy::detail {

template <class T, std::size_t Alignment = 64>
struct AlignedAllocator {
  using value_type = T;
  template <class U>
  struct rebind {
    using other = AlignedAllocator<U, Alignment>;
  };

  AlignedAllocator() = default;
  template <class U>
  AlignedAllocator(AlignedAllocator<U, Alignment> const&) noexcept {}

  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{Alignment}));
  }
  // The unsized aligned form: the sized one is declared only under -fsized-deallocation, which
  // Clang before 17 leaves off by default.
  void deallocate(T* p, std::size_t) noexcept {
    ::operator delete (p, std::align_val_t{Alignment});
  }
  template <class U>
  friend bool operator==(AlignedAllocator const&, AlignedAllocator<U, Alignment> const&) {
    return true;
  }
};

/// A float arena: contiguous, starting on a cache line.
template <class T>
using AlignedVector = std::vector<T, AlignedAllocator<T>>;

}  // namespace convoy::detail

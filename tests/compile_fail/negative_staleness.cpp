// A staleness bound below zero means nothing: BoundedStaleness<-1> must not compile.
// expected-error: needs S >= 0
#include <convoy/sync/bounded_staleness.hpp>
#include <cstddef>

// Completing the type instantiates the class and with it its static_assert.
std::size_t const size_of_rejected = sizeof(convoy::sync::BoundedStaleness<-1>);

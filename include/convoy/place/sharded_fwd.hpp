// place::Sharded declared with its default rule, for code that names it without running it: the
// rules in convoy/strategy.hpp. convoy/place/sharded.hpp defines it; only a parameter-server
// communication policy can run it, so only convoy/comm/zmq_ps.hpp includes that.
#pragma once

namespace convoy::place {

struct GreedyBySize;
template <class Rule = GreedyBySize>
struct Sharded;

}  // namespace convoy::place

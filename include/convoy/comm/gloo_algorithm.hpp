// GlooAlgorithm (comm::Gloo::Algorithm): which of Gloo's allreduce algorithms sums a bucket. A
// header of its own, free of Gloo's, so that the policy (comm/gloo.hpp) and the fabric's
// allreducer (comm/gloo/allreducer.hpp) share it without including each other.
#pragma once

namespace convoy::comm {

/// automatic: a bucket of up to 2 MiB on buffers registered once (2 processes exchange whole
/// buckets in one round, more run halving-doubling), a larger one through gloo::allreduce's
/// pipelined ring; ring and bcube: gloo::allreduce for every bucket; halving_doubling: on
/// registered buffers for every bucket. docs/gloo.md has the measurements behind the rule.
enum class GlooAlgorithm { automatic, ring, halving_doubling, bcube };

}  // namespace convoy::comm

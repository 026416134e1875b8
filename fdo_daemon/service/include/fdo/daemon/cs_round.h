// The context-sensitive PGO round in the stage sequence (docs/jit.md,
// "Context-sensitive PGO"):
//
//   instrumented stages -> v1: counts, mode cs_instrumented (the optimized
//   pipeline with CS instrumentation after the inliner) -> policy.cs_pgo_stages
//   stages -> v2: the same counts + cs_functions, optimized (IRUse + CSIRUse).
//
// Pure logic over profile documents and feedback totals, used by the policy.
#pragma once

#include "fdo/daemon/policy.h"
#include "fdo/util/profile.h"

namespace fdo::daemon {

// Whether `current` asks for the context-sensitive round (its stages compile
// cs_instrumented).
bool in_cs_round(const ProfileDoc* current);

// Stages the round needs before it ends (at least one, also when the key was
// switched off mid-round).
int cs_round_stages(const PolicyConfig& config);

// After a rewrite from (first-round) instrumentation counts: when the round is
// configured, no operator chose a mode and the guard's incumbent does not
// leave the context-sensitive counts out (docs/guard.md), `next` asks for it.
void start_cs_round(const PolicyConfig& config, ProfileDoc& next, std::string& reason);

// The end of the round: `current` with the context-sensitive counts of
// `feedback` as its cs_functions and the mode back to derived (optimized).
// A round that counted nothing still ends, without a CS section.
PolicyDecision finish_cs_round(const ProfileDoc& current, const FeedbackAccumulator& feedback);

} // namespace fdo::daemon

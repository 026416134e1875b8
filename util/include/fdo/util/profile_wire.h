// The compile-affecting part of a profile document (profile.h lists it) in
// wire.h's fixed layout: how a profile travels from fdod to a compile worker
// with a compile job (fdo/daemon/compile_messages.h), with no JSON on either
// side. Bookkeeping (provenance, hardware findings, the guard's record,
// reprofile_of, fingerprints and source names, the GPU's launch records and
// trials) is left out: no compile reads it, and none changes the digest.
//
// Value sites and argument value profiles have one layout wherever they
// travel: here and in an exec reply's observation (exec_messages.h).
#pragma once

#include "fdo/util/profile.h"
#include "fdo/util/wire.h"

#include <vector>

namespace fdo::wire {

void put_value_sites(WireWriter& w, const std::vector<ValueSite>& sites);
std::vector<ValueSite> get_value_sites(WireReader& r);
void put_arg_values(WireWriter& w, const std::vector<ArgValues>& args);
std::vector<ArgValues> get_arg_values(WireReader& r);

void put_compile_profile(WireWriter& w, const ProfileDoc& doc);
// What put_compile_profile wrote. Knobs out of the ranges profile_from_json
// accepts, and enums past their last value, fail the reader.
ProfileDoc get_compile_profile(WireReader& r);

} // namespace fdo::wire

namespace fdo {

// `doc` with its compile-affecting fields only: what a compile worker sees of
// it (get_compile_profile of put_compile_profile(doc) equals this), with the
// same digest as `doc`.
ProfileDoc compile_view(const ProfileDoc& doc);

} // namespace fdo

// The state directory (docs/fdod.md, "State directory"): profiles.db,
// programs/ and cache/. It holds every tenant's programs, profiles and
// compiled code, so it is private to fdod's user; and a database that
// vanished next to the programs and cache entries it describes is noticed
// instead of being replaced by an empty one.
#pragma once

#include "fdo/util/expected.h"

#include <string>

namespace fdo::daemon {

// Where the service's profile store lives. Only a store in the state dir
// (the default SQLite one) is expected beside the state dir's programs and
// cache entries; a store elsewhere says nothing about them.
enum class StoreLocation { state_dir, elsewhere };

// Makes `state_dir` ready before anything in it is opened: creates it (and
// missing parents) with mode 0700 whatever the umask, and tightens an
// existing one that group or others may use to 0700 (logged as a warning),
// which keeps everything below it private whatever the entries' own modes.
// Then, for a store in the state dir, check_state_dir. Errors: io or
// permission_denied when the directory cannot be created or tightened, and
// those of check_state_dir.
Status prepare_state_dir(const std::string& state_dir, StoreLocation store);

// Refuses a state dir whose profiles.db is missing or empty (0 bytes) while
// programs/ holds .prog files or cache/ holds entries: every registered
// program id would turn into "register it first" and its profiles would be
// gone. Errc::corrupt, saying what was found and what to do (restore the
// database, or move programs/ and cache/ away to start fresh). A fresh or
// empty state dir, and one with a non-empty profiles.db, pass; what the
// database holds is the store's to judge when it opens it.
Status check_state_dir(const std::string& state_dir);

// Removes the temp files of atomic writes (write_file_atomic) that a killed
// fdod left in the state dir (programs/, the cache's identity records); the
// disk tier sweeps its own objects/ when it opens. Returns how many went.
Expected<std::size_t> sweep_interrupted_writes(const std::string& state_dir);

// Creates `path` and each missing parent with mode 0700 whatever the umask;
// an existing directory is left as it is. io when a component is not a
// directory or cannot be created.
Status create_private_dirs(const std::string& path);

} // namespace fdo::daemon
